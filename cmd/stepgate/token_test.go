package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
)

func TestTokenCreate(t *testing.T) {
	t.Parallel()
	secret := "token-test-secret-0123456789abcdef0123"

	t.Run("SignsWithTheConfiguredSecret", func(t *testing.T) {
		t.Parallel()
		c, stdout, _ := newTestCLI(map[string]string{"STEPGATE_JWT_SECRET": secret}, "")
		require.NoError(t, c.run(t.Context(), []string{"token", "create", "--sub", "ops", "--tenant", "acme", "--role", "runs:read", "--role", "admin,x"}))
		line := strings.TrimSpace(stdout.String())
		require.True(t, strings.HasPrefix(line, "STEPGATE_TOKEN="), line)
		v, err := auth.NewVerifier(auth.Config{Secrets: [][]byte{[]byte(secret)}})
		require.NoError(t, err)
		id, err := v.Verify(t.Context(), strings.TrimPrefix(line, "STEPGATE_TOKEN="))
		require.NoError(t, err)
		require.Equal(t, auth.Identity{Subject: "ops", Tenant: "acme", Roles: []string{"runs:read", "admin", "x"}}, id)
	})

	t.Run("UsesTheDevKey", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		st, err := loadDevState(dir)
		require.NoError(t, err)
		c, stdout, _ := newTestCLI(nil, "")
		require.NoError(t, c.run(t.Context(), []string{"token", "create", "--sub", "dev2", "--dir", dir}))
		v, err := auth.NewVerifier(auth.Config{Secrets: [][]byte{[]byte(st.JWTSecret)}})
		require.NoError(t, err)
		id, err := v.Verify(t.Context(), strings.TrimPrefix(strings.TrimSpace(stdout.String()), "STEPGATE_TOKEN="))
		require.NoError(t, err)
		require.Equal(t, auth.DefaultTenant, id.Tenant)
	})

	t.Run("UsesTheConfiguredIssuerAudienceAndClaims", func(t *testing.T) {
		t.Parallel()
		env := map[string]string{
			"STEPGATE_JWT_SECRET": "new-" + secret + ",old-" + secret, "STEPGATE_JWT_ISSUER": "https://idp.example/",
			"STEPGATE_JWT_AUDIENCE": "stepgate", "STEPGATE_TENANT_CLAIM": "org", "STEPGATE_ROLES_CLAIM": "groups",
		}
		c, stdout, _ := newTestCLI(env, "")
		require.NoError(t, c.run(t.Context(), []string{"token", "create", "--sub", "ci", "--tenant", "acme", "--role", "invoker"}))
		v, err := auth.NewVerifier(auth.Config{Secrets: [][]byte{[]byte("old-" + secret), []byte("new-" + secret)},
			Issuer: "https://idp.example/", Audience: "stepgate", TenantClaim: "org", RolesClaim: "groups"})
		require.NoError(t, err)
		id, err := v.Verify(t.Context(), strings.TrimPrefix(strings.TrimSpace(stdout.String()), "STEPGATE_TOKEN="))
		require.NoError(t, err)
		require.Equal(t, auth.Identity{Subject: "ci", Tenant: "acme", Roles: []string{"invoker"}}, id)
	})

	t.Run("NeedsAKeyAndASubject", func(t *testing.T) {
		t.Parallel()
		c, _, _ := newTestCLI(nil, "")
		err := c.run(t.Context(), []string{"token", "create", "--sub", "x", "--dir", t.TempDir()})
		require.ErrorContains(t, err, "STEPGATE_JWT_SECRET")
		err = c.run(t.Context(), []string{"token", "create"})
		require.ErrorContains(t, err, "--sub")
	})
}
