package gateway_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// signRaw signs payload, as it is, with HS256 and secret: a JSON encoder cannot write an
// object with a key twice.
func signRaw(t *testing.T, secret []byte, payload string) string {
	t.Helper()
	unsigned := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(payload))
	sig, err := jwt.SigningMethodHS256.Sign(unsigned, secret)
	require.NoError(t, err)
	return unsigned + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// TestDuplicateClaimsAreRefused: a token that names its tenant twice, once for each of
// two tenants, is a 401 that says so, not an identity in the tenant named last.
func TestDuplicateClaimsAreRefused(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	t2 := s.Client(t, s.NewToken(t, auth.Identity{Subject: "bob", Tenant: "t2", Roles: []string{"admin"}}))
	reg, err := t2.RegisterFunctionWithResponse(t.Context(), "payroll", protocol.FunctionRegistration{URL: "http://127.0.0.1:1/payroll"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, reg.StatusCode(), string(reg.Body))

	now := time.Now().Unix()
	payload := func(claims string) string {
		return fmt.Sprintf(`{"sub":"mallory","iat":%d,"exp":%d,%s}`, now, now+3600, claims)
	}
	list := func(token string) *protocol.ListFunctionsResponse {
		resp, err := s.Client(t, token).ListFunctionsWithResponse(t.Context())
		require.NoError(t, err)
		return resp
	}

	// The same payload with each claim once is accepted: the signature is the stack's.
	ok := list(signRaw(t, s.JWTSecret, payload(`"tenant":"t1","roles":["admin"]`)))
	require.Equal(t, http.StatusOK, ok.StatusCode(), string(ok.Body))
	require.Empty(t, ok.JSON200.Functions)

	for claim, claims := range map[string]string{
		"tenant": `"tenant":"t1","roles":["admin"],"tenant":"t2"`,
		"sub":    `"tenant":"t2","sub":"bob","roles":["admin"]`,
		"roles":  `"tenant":"t2","roles":["viewer"],"roles":["admin"]`,
		"exp":    fmt.Sprintf(`"tenant":"t2","roles":["admin"],"exp":%d`, now+10*365*24*3600),
	} {
		resp := list(signRaw(t, s.JWTSecret, payload(claims)))
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode(), claim+": "+string(resp.Body))
		var p struct{ Detail string }
		require.NoError(t, json.Unmarshal(resp.Body, &p))
		require.Contains(t, p.Detail, fmt.Sprintf("token payload names the claim %q more than once", claim))
		require.NotContains(t, string(resp.Body), "payroll")
	}
}
