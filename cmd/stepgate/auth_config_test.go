package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
)

const testSecret = "config-test-secret-0123456789abcdef0123"

func writeECKey(t *testing.T) string {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "idp.pem")
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o600))
	return path
}

func TestServeConfig(t *testing.T) {
	t.Parallel()
	base := map[string]string{"DATABASE_URL": "postgres://localhost/stepgate"}
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	pemPath := writeECKey(t)

	for _, tc := range []struct {
		name string
		env  func(string) string
		err  string // empty: valid
	}{
		{"NoKey", env(), "STEPGATE_JWT_SECRET (HS secrets of at least 32 bytes"},
		{"HSSecret", env("STEPGATE_JWT_SECRET", testSecret), ""},
		{"RotatedSecrets", env("STEPGATE_JWT_SECRET", "new-"+testSecret+", old-"+testSecret), ""},
		{"ShortSecret", env("STEPGATE_JWT_SECRET", "new-"+testSecret+",short"), "STEPGATE_JWT_SECRET: secret 2 is 5 bytes"},
		{"PublicKeysOnly", env("STEPGATE_JWT_PUBLIC_KEYS", pemPath), ""},
		{"MissingPEM", env("STEPGATE_JWT_PUBLIC_KEYS", pemPath+",/nonexistent.pem"), "STEPGATE_JWT_PUBLIC_KEYS: open /nonexistent.pem"},
		{"NotPEM", env("STEPGATE_JWT_PUBLIC_KEYS", "auth_config_test.go"), "STEPGATE_JWT_PUBLIC_KEYS: auth_config_test.go: no PEM block found"},
		{"JWKS", env("STEPGATE_JWKS_URL", "https://idp.example/.well-known/jwks.json", "STEPGATE_JWT_ISSUER", "https://idp.example/", "STEPGATE_JWT_AUDIENCE", "stepgate"), ""},
		{"JWKSNotHTTP", env("STEPGATE_JWKS_URL", "idp.example/jwks"), `JWKS URL "idp.example/jwks" is not an http(s) URL`},
		{"AlgorithmWithoutKey", env("STEPGATE_JWT_PUBLIC_KEYS", pemPath, "STEPGATE_JWT_ALGORITHMS", "ES256,RS256"), "RS256 is accepted but no configured key can verify it"},
		{"AlgNone", env("STEPGATE_JWT_SECRET", testSecret, "STEPGATE_JWT_ALGORITHMS", "none"), `"none" is never accepted`},
		{"Leeway", env("STEPGATE_JWT_SECRET", testSecret, "STEPGATE_JWT_LEEWAY", "0s"), ""},
		{"BadLeeway", env("STEPGATE_JWT_SECRET", testSecret, "STEPGATE_JWT_LEEWAY", "1h"), `STEPGATE_JWT_LEEWAY "1h" is not a duration from 0s to 5m`},
		{"ShortInvocationKey", env("STEPGATE_JWT_SECRET", testSecret, "STEPGATE_INVOCATION_KEY", testSecret+",short"),
			"STEPGATE_INVOCATION_KEY: key 2 is 5 bytes; each needs at least 32"},
		{"InvocationKeys", env("STEPGATE_JWT_SECRET", testSecret, "STEPGATE_INVOCATION_KEY", "new-"+testSecret+",old-"+testSecret), ""},
		// The HMAC key every tenant's functions held is gone; a leftover says so.
		{"SigningKeysRefused", env("STEPGATE_JWT_SECRET", testSecret, "STEPGATE_SIGNING_KEYS", "sign-key"), "STEPGATE_SIGNING_KEYS is no longer read"},
		{"AllowedNetworks", env("STEPGATE_JWT_SECRET", testSecret, "STEPGATE_ALLOWED_NETWORKS", "10.0.0.0/8, fd00::/8", "STEPGATE_ALLOWED_FUNCTION_HOSTS", "functions,*.svc.cluster.local"), ""},
		{"BadNetwork", env("STEPGATE_JWT_SECRET", testSecret, "STEPGATE_ALLOWED_NETWORKS", "10.0.0.0/33"), "STEPGATE_ALLOWED_NETWORKS: "},
		{"TenantNetworks", env("STEPGATE_JWT_SECRET", testSecret, "STEPGATE_TENANT_NETWORKS", "acme=10.1.0.0/16 10.2.0.0/16; globex=fd00::/8", "STEPGATE_PRIVATE_ERROR_DETAIL", "true"), ""},
		{"BadTenantNetworks", env("STEPGATE_JWT_SECRET", testSecret, "STEPGATE_TENANT_NETWORKS", "acme 10.1.0.0/16"), `STEPGATE_TENANT_NETWORKS: tenant networks "acme 10.1.0.0/16" are not tenant=networks`},
		{"BadPrivateErrorDetail", env("STEPGATE_JWT_SECRET", testSecret, "STEPGATE_PRIVATE_ERROR_DETAIL", "yes"), "STEPGATE_PRIVATE_ERROR_DETAIL=yes: want true or false"},
		{"BadHost", env("STEPGATE_JWT_SECRET", testSecret, "STEPGATE_ALLOWED_FUNCTION_HOSTS", "a*b"), "STEPGATE_ALLOWED_FUNCTION_HOSTS: "},
		{"Recovery", env("STEPGATE_JWT_SECRET", testSecret, "STEPGATE_LEASE_TTL", "2s", "STEPGATE_DRAIN_TIMEOUT", "1m", "STEPGATE_MAX_RECOVERIES", "10"), ""},
		{"ShortLease", env("STEPGATE_JWT_SECRET", testSecret, "STEPGATE_LEASE_TTL", "100ms"), "STEPGATE_LEASE_TTL 100ms is shorter than 500ms"},
		{"BadDrain", env("STEPGATE_JWT_SECRET", testSecret, "STEPGATE_DRAIN_TIMEOUT", "soon"), `STEPGATE_DRAIN_TIMEOUT "soon" is not a positive duration`},
		{"BadRecoveries", env("STEPGATE_JWT_SECRET", testSecret, "STEPGATE_MAX_RECOVERIES", "0"), `STEPGATE_MAX_RECOVERIES "0" is not a positive whole number`},
		{"DatabaseTimeout", env("STEPGATE_JWT_SECRET", testSecret, "STEPGATE_DATABASE_TIMEOUT", "30s"), ""},
		{"ShortDatabaseTimeout", env("STEPGATE_JWT_SECRET", testSecret, "STEPGATE_DATABASE_TIMEOUT", "500ms"), "STEPGATE_DATABASE_TIMEOUT 500ms is not between 1s and 10m"},
		{"LongDatabaseTimeout", env("STEPGATE_JWT_SECRET", testSecret, "STEPGATE_DATABASE_TIMEOUT", "1h"), "STEPGATE_DATABASE_TIMEOUT 1h0m0s is not between 1s and 10m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := readServerConfig(tc.env)
			if err == nil {
				err = c.validate()
			}
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}

	t.Run("RecoveryDefaults", func(t *testing.T) {
		t.Parallel()
		c, err := readServerConfig(env("STEPGATE_JWT_SECRET", testSecret))
		require.NoError(t, err)
		require.Equal(t, 5*time.Second, c.leaseTTL)
		require.Equal(t, 30*time.Second, c.drainTimeout)
		require.Equal(t, 100, c.maxRecoveries)
	})

	t.Run("SettingsReachTheVerifier", func(t *testing.T) {
		t.Parallel()
		c, err := readServerConfig(env("STEPGATE_JWT_SECRET", testSecret, "STEPGATE_JWT_PUBLIC_KEYS", pemPath,
			"STEPGATE_JWT_ISSUER", "https://idp.example/", "STEPGATE_JWT_AUDIENCE", "stepgate", "STEPGATE_JWT_LEEWAY", "10s",
			"STEPGATE_TENANT_CLAIM", "org", "STEPGATE_ROLES_CLAIM", "groups", "STEPGATE_IDENTITY_CLAIMS", "email, plan"))
		require.NoError(t, err)
		cfg, err := c.jwt.authConfig(nil)
		require.NoError(t, err)
		require.Len(t, cfg.PublicKeys, 1)
		require.Equal(t, "https://idp.example/", cfg.Issuer)
		require.Equal(t, "stepgate", cfg.Audience)
		require.Equal(t, 10*time.Second, cfg.Leeway)
		require.Equal(t, []string{"email", "plan"}, cfg.IdentityClaims)

		tok, err := cfg.NewToken(auth.Identity{Subject: "s", Tenant: "acme", Roles: []string{"viewer"}, Claims: map[string]any{"email": "s@example.com"}}, time.Minute)
		require.NoError(t, err)
		v, err := auth.NewVerifier(cfg)
		require.NoError(t, err)
		id, err := v.Verify(t.Context(), tok)
		require.NoError(t, err)
		require.Equal(t, auth.Identity{Subject: "s", Tenant: "acme", Roles: []string{"viewer"}, Claims: map[string]any{"email": "s@example.com"}}, id)
	})
}
