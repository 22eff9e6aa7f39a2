package gateway_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/internal/wiring/stack"
)

func mustGenerate[K any](k K, err error) K {
	if err != nil {
		panic(err)
	}
	return k
}

// writePEM writes the public keys into one PEM file in dir and returns its path.
func writePEM(t *testing.T, dir string, keys ...crypto.PublicKey) string {
	t.Helper()
	var b []byte
	for _, k := range keys {
		der, err := x509.MarshalPKIXPublicKey(k)
		require.NoError(t, err)
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})...)
	}
	path := filepath.Join(dir, "keys.pem")
	require.NoError(t, os.WriteFile(path, b, 0o600))
	return path
}

// publishedKeys is a JWKS endpoint whose keys a test adds to, as an identity provider
// rotating its keys would.
type publishedKeys struct {
	mu   sync.Mutex
	keys []jwkset.JWKMarshal
	URL  string
}

func publishKeys(t *testing.T) *publishedKeys {
	p := &publishedKeys{keys: []jwkset.JWKMarshal{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		defer p.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(jwkset.JWKSMarshal{Keys: p.keys})
	}))
	t.Cleanup(srv.Close)
	p.URL = srv.URL + "/.well-known/jwks.json"
	return p
}

func (p *publishedKeys) add(t *testing.T, kid string, alg jwkset.ALG, pub any) {
	k, err := jwkset.NewJWKFromKey(pub, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid, ALG: alg, USE: jwkset.UseSig}})
	require.NoError(t, err)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.keys = append(p.keys, k.Marshal())
}

// TestAuthentication drives tokens through the real gateway: keys from PEM files, a
// JWKS, HS secrets, issuer and audience, and every way a token can be bad, each a 401
// problem naming the check that failed.
func TestAuthentication(t *testing.T) {
	t.Parallel()
	var (
		rsaKey    = mustGenerate(rsa.GenerateKey(rand.Reader, 2048))
		ecKey     = mustGenerate(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
		jwksKey   = mustGenerate(rsa.GenerateKey(rand.Reader, 2048))
		laterKey  = mustGenerate(ecdsa.GenerateKey(elliptic.P384(), rand.Reader))
		strange   = mustGenerate(rsa.GenerateKey(rand.Reader, 2048))
		edPub, ed = func() (ed25519.PublicKey, ed25519.PrivateKey) {
			pub, priv, err := ed25519.GenerateKey(rand.Reader)
			require.NoError(t, err)
			return pub, priv
		}()
	)
	pemPath := writePEM(t, t.TempDir(), &rsaKey.PublicKey, &ecKey.PublicKey, edPub)
	pemBytes, err := os.ReadFile(pemPath)
	require.NoError(t, err)
	publicKeys, err := auth.ParsePublicKeys(pemBytes)
	require.NoError(t, err)
	idp := publishKeys(t)
	idp.add(t, "jwks-1", jwkset.AlgRS256, &jwksKey.PublicKey)

	const issuer, audience = "https://idp.test/", "stepgate"
	s := stack.Start(t, stack.Options{Auth: auth.Config{
		PublicKeys: publicKeys, JWKSURL: idp.URL, JWKSRefreshLimit: time.Nanosecond,
		Issuer: issuer, Audience: audience, IdentityClaims: []string{"email"}, ScopePrefix: "stepgate:",
	}})

	claims := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		now := time.Now()
		c := jwt.MapClaims{"sub": "alice", "iss": issuer, "aud": audience, "iat": now.Unix(),
			"exp": now.Add(time.Hour).Unix(), "roles": []string{"viewer"}, "tenant": "acme"}
		if edit != nil {
			edit(c)
		}
		return c
	}
	sign := func(method jwt.SigningMethod, key any, kid string, c jwt.MapClaims) string {
		tok := jwt.NewWithClaims(method, c)
		if kid != "" {
			tok.Header["kid"] = kid
		}
		out, err := tok.SignedString(key)
		require.NoError(t, err)
		return out
	}
	functions := s.URL + "/v1/functions"

	t.Run("Accepted", func(t *testing.T) {
		t.Parallel()
		for name, tok := range map[string]string{
			"HS256":      s.NewToken(t, auth.Identity{Subject: "alice", Tenant: auth.DefaultTenant, Roles: []string{"viewer"}}),
			"RS256":      sign(jwt.SigningMethodRS256, rsaKey, "", claims(nil)),
			"PS256":      sign(jwt.SigningMethodPS256, rsaKey, "", claims(nil)),
			"ES256":      sign(jwt.SigningMethodES256, ecKey, "", claims(nil)),
			"EdDSA":      sign(jwt.SigningMethodEdDSA, ed, "", claims(nil)),
			"JWKSByKid":  sign(jwt.SigningMethodRS256, jwksKey, "jwks-1", claims(nil)),
			"JWKSNoKid":  sign(jwt.SigningMethodRS256, jwksKey, "", claims(nil)),
			"StaticKid":  sign(jwt.SigningMethodRS256, rsaKey, "pem-key-1", claims(nil)), // a kid the JWKS lacks, a PEM key verifies
			"ScopeRoles": sign(jwt.SigningMethodES256, ecKey, "", claims(func(c jwt.MapClaims) { delete(c, "roles"); c["scope"] = "openid stepgate:functions:read" })),
		} {
			status, detail := call(t, "GET", functions, tok, "")
			require.Equal(t, http.StatusOK, status, "%s: %s", name, detail)
		}
	})

	t.Run("ScopesGrantOnlyWithThePrefix", func(t *testing.T) {
		t.Parallel()
		tok := sign(jwt.SigningMethodES256, ecKey, "", claims(func(c jwt.MapClaims) { delete(c, "roles"); c["scope"] = "functions:read admin" }))
		status, detail := call(t, "GET", functions, tok, "")
		require.Equal(t, http.StatusForbidden, status, detail)
		require.Contains(t, detail, "roles (none)")
	})

	t.Run("AKeyAddedToTheJWKSLaterIsPickedUp", func(t *testing.T) {
		t.Parallel()
		tok := sign(jwt.SigningMethodES384, laterKey, "jwks-2", claims(nil))
		status, detail := call(t, "GET", functions, tok, "")
		require.Equal(t, http.StatusUnauthorized, status)
		require.Equal(t, "token key id (kid) is not in the JWKS", detail)
		idp.add(t, "jwks-2", jwkset.AlgES384, &laterKey.PublicKey)
		status, detail = call(t, "GET", functions, tok, "")
		require.Equal(t, http.StatusOK, status, detail)
	})

	valid := sign(jwt.SigningMethodRS256, rsaKey, "", claims(nil))
	parts := strings.Split(valid, ".")
	payload, err := json.Marshal(claims(func(c jwt.MapClaims) { c["roles"] = []string{"admin"} }))
	require.NoError(t, err)
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload) + "." + parts[2]
	rsaPEM := pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: mustGenerate(x509.MarshalPKIXPublicKey(&rsaKey.PublicKey))})
	past, future := time.Now().Add(-time.Hour).Unix(), time.Now().Add(time.Hour).Unix()

	for _, tc := range []struct {
		name, header, reason string
	}{
		{"Expired", sign(jwt.SigningMethodRS256, rsaKey, "", claims(func(c jwt.MapClaims) { c["exp"] = past })), "token is expired (exp)"},
		{"NoTenant", sign(jwt.SigningMethodRS256, rsaKey, "", claims(func(c jwt.MapClaims) { delete(c, "tenant") })),
			"token has no tenant claim (tenant), and this gateway has no default tenant (STEPGATE_DEFAULT_TENANT)"},
		{"LivesTooLong", sign(jwt.SigningMethodRS256, rsaKey, "", claims(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(90 * 24 * time.Hour).Unix() })),
			"token is valid for 2160h0m0s (exp - iat), longer than the gateway's maximum of 24h0m0s (STEPGATE_JWT_MAX_LIFETIME)"},
		{"NotYetValid", sign(jwt.SigningMethodES256, ecKey, "", claims(func(c jwt.MapClaims) { c["nbf"] = future })), "token is not valid yet (nbf)"},
		{"WrongIssuer", sign(jwt.SigningMethodEdDSA, ed, "", claims(func(c jwt.MapClaims) { c["iss"] = "https://evil.test/" })), `token issuer (iss) is not "https://idp.test/"`},
		{"WrongAudience", sign(jwt.SigningMethodRS256, jwksKey, "jwks-1", claims(func(c jwt.MapClaims) { c["aud"] = "another-api" })), `token audience (aud) does not include "stepgate"`},
		{"AlgNone", sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", claims(nil)), "token algorithm none is not accepted"},
		{"HS256SignedWithTheRSAPublicKey", sign(jwt.SigningMethodHS256, rsaPEM, "", claims(nil)), "token signature is invalid"},
		{"UnknownKid", sign(jwt.SigningMethodRS256, strange, "nobody", claims(nil)), "token key id (kid) is not in the JWKS, and no configured public key verifies its signature"},
		{"TamperedPayload", tampered, "token signature is invalid"},
		{"WrongSignature", sign(jwt.SigningMethodRS256, strange, "", claims(nil)), "token signature is invalid"},
		{"MissingSubject", sign(jwt.SigningMethodRS256, rsaKey, "", claims(func(c jwt.MapClaims) { delete(c, "sub") })), "token has no subject (sub)"},
		{"Garbage", "garbage", "token is malformed"},
		{"NoExpiry", sign(jwt.SigningMethodRS256, rsaKey, "", claims(func(c jwt.MapClaims) { delete(c, "exp") })), "token has no expiry (exp)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequestWithContext(t.Context(), "GET", functions, nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+tc.header)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
			require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
			require.Equal(t, `Bearer realm="stepgate"`, resp.Header.Get("WWW-Authenticate"))
			var p struct {
				Status int    `json:"status"`
				Detail string `json:"detail"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
			require.Equal(t, http.StatusUnauthorized, p.Status)
			require.True(t, strings.HasPrefix(p.Detail, tc.reason), "detail %q, want it to begin %q", p.Detail, tc.reason)
			require.NotContains(t, p.Detail, tc.header, "a problem never echoes the token")
		})
	}

	t.Run("HeaderProblems", func(t *testing.T) {
		t.Parallel()
		for header, reason := range map[string]string{
			"":                       "missing Authorization header",
			"Basic YWxhZGRpbjpvcGVu": "Authorization header is not a bearer token",
			"Bearer ":                "Authorization header is not a bearer token",
		} {
			req, err := http.NewRequestWithContext(t.Context(), "GET", functions, nil)
			require.NoError(t, err)
			if header != "" {
				req.Header.Set("Authorization", header)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			var p struct{ Detail string }
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
			resp.Body.Close()
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, header)
			require.Contains(t, p.Detail, reason)
		}
	})
}
