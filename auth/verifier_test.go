package auth_test

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
	"fmt"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stepgate/stepgate/auth"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
	)
}

var (
	secret       = []byte("auth-test-secret-0123456789abcdef0123")
	otherSecret  = []byte("auth-test-other-secret-0123456789abcdef")
	rsaKey       = mustKey(rsa.GenerateKey(rand.Reader, 2048))
	otherRSA     = mustKey(rsa.GenerateKey(rand.Reader, 2048))
	p256Key      = mustKey(ecdsa.GenerateKey(elliptic.P256(), rand.Reader))
	p384Key      = mustKey(ecdsa.GenerateKey(elliptic.P384(), rand.Reader))
	edPub, edKey = func() (ed25519.PublicKey, ed25519.PrivateKey) {
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			panic(err)
		}
		return pub, priv
	}()
)

func mustKey[K any](k K, err error) K {
	if err != nil {
		panic(err)
	}
	return k
}

// pemOf encodes pub as a PKIX PUBLIC KEY block.
func pemOf(t *testing.T, pub crypto.PublicKey) []byte {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// claims returns valid claims for subject "alice" of tenant "acme", which edit may change.
func claims(edit func(jwt.MapClaims)) jwt.MapClaims {
	now := time.Now()
	c := jwt.MapClaims{"sub": "alice", "tenant": "acme", "iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
	if edit != nil {
		edit(c)
	}
	return c
}

// sign signs c with key under method; a non-empty kid goes in the header.
func sign(t *testing.T, method jwt.SigningMethod, key any, kid string, c jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, c)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

func newVerifier(t *testing.T, cfg auth.Config) *auth.Verifier {
	t.Helper()
	v, err := auth.NewVerifier(cfg)
	require.NoError(t, err)
	t.Cleanup(v.Close)
	return v
}

func TestVerifierAcceptsEachAlgorithm(t *testing.T) {
	t.Parallel()
	var pubs []crypto.PublicKey
	for _, k := range []crypto.PublicKey{&rsaKey.PublicKey, &p256Key.PublicKey, &p384Key.PublicKey, edPub} {
		keys, err := auth.ParsePublicKeys(pemOf(t, k))
		require.NoError(t, err)
		pubs = append(pubs, keys...)
	}
	v := newVerifier(t, auth.Config{Secrets: [][]byte{secret, otherSecret}, PublicKeys: pubs})
	require.Equal(t, []string{"HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "EdDSA"}, v.Algorithms())

	for _, tc := range []struct {
		name   string
		method jwt.SigningMethod
		key    any
	}{
		{"HS256", jwt.SigningMethodHS256, secret},
		{"HS256RotatedSecret", jwt.SigningMethodHS256, otherSecret},
		{"HS384", jwt.SigningMethodHS384, secret},
		{"HS512", jwt.SigningMethodHS512, secret},
		{"RS256", jwt.SigningMethodRS256, rsaKey},
		{"RS384", jwt.SigningMethodRS384, rsaKey},
		{"RS512", jwt.SigningMethodRS512, rsaKey},
		{"PS256", jwt.SigningMethodPS256, rsaKey},
		{"ES256", jwt.SigningMethodES256, p256Key},
		{"ES384", jwt.SigningMethodES384, p384Key},
		{"EdDSA", jwt.SigningMethodEdDSA, edKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id, err := v.Verify(t.Context(), sign(t, tc.method, tc.key, "", claims(nil)))
			require.NoError(t, err)
			require.Equal(t, auth.Identity{Subject: "alice", Tenant: "acme", Roles: []string{}}, id)
		})
	}
}

func TestVerifierRefuses(t *testing.T) {
	t.Parallel()
	rsaPEM := pemOf(t, &rsaKey.PublicKey)
	hsAndRSA := newVerifier(t, auth.Config{
		Secrets: [][]byte{secret}, PublicKeys: []crypto.PublicKey{&rsaKey.PublicKey, &p256Key.PublicKey},
		Issuer: "https://idp.test/", Audience: "stepgate",
	})
	rsaOnly := newVerifier(t, auth.Config{PublicKeys: []crypto.PublicKey{&rsaKey.PublicKey}})
	noLeeway := newVerifier(t, auth.Config{Secrets: [][]byte{secret}, Leeway: -1})
	hsOnly := newVerifier(t, auth.Config{Secrets: [][]byte{secret}, Algorithms: []string{"HS256"}})

	good := func(edit func(jwt.MapClaims)) jwt.MapClaims {
		return claims(func(c jwt.MapClaims) {
			c["iss"], c["aud"] = "https://idp.test/", "stepgate"
			if edit != nil {
				edit(c)
			}
		})
	}
	valid := sign(t, jwt.SigningMethodRS256, rsaKey, "", good(nil))
	_, err := hsAndRSA.Verify(t.Context(), valid)
	require.NoError(t, err)
	parts := strings.Split(valid, ".")
	tampered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(mustJSON(t, good(func(c jwt.MapClaims) { c["sub"] = "mallory" }))) + "." + parts[2]
	none := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", good(nil))
	past := time.Now().Add(-2 * time.Hour).Unix()

	for _, tc := range []struct {
		name   string
		v      *auth.Verifier
		token  string
		reason string
	}{
		{"Garbage", hsAndRSA, "garbage", "token is malformed"},
		{"NotBase64", hsAndRSA, "a.b.c", "token is malformed"},
		{"TooLong", hsAndRSA, strings.Repeat("a", auth.MaxTokenBytes+1), "longer than"},
		{"Expired", hsAndRSA, sign(t, jwt.SigningMethodRS256, rsaKey, "", good(func(c jwt.MapClaims) { c["exp"] = past })), "token is expired (exp)"},
		{"ExpiredPastLeeway", noLeeway, sign(t, jwt.SigningMethodHS256, secret, "", claims(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-5 * time.Second).Unix() })), "expired"},
		{"NoExpiry", hsAndRSA, sign(t, jwt.SigningMethodRS256, rsaKey, "", good(func(c jwt.MapClaims) { delete(c, "exp") })), "token has no expiry (exp)"},
		{"NotYetValid", hsAndRSA, sign(t, jwt.SigningMethodRS256, rsaKey, "", good(func(c jwt.MapClaims) { c["nbf"] = time.Now().Add(time.Hour).Unix() })), "token is not valid yet (nbf)"},
		{"IssuedInTheFuture", hsAndRSA, sign(t, jwt.SigningMethodRS256, rsaKey, "", good(func(c jwt.MapClaims) { c["iat"] = time.Now().Add(time.Hour).Unix() })), "issued in the future (iat)"},
		{"WrongIssuer", hsAndRSA, sign(t, jwt.SigningMethodRS256, rsaKey, "", good(func(c jwt.MapClaims) { c["iss"] = "https://evil.test/" })), `token issuer (iss) is not "https://idp.test/"`},
		{"NoIssuer", hsAndRSA, sign(t, jwt.SigningMethodRS256, rsaKey, "", good(func(c jwt.MapClaims) { delete(c, "iss") })), "token has no issuer (iss)"},
		{"WrongAudience", hsAndRSA, sign(t, jwt.SigningMethodRS256, rsaKey, "", good(func(c jwt.MapClaims) { c["aud"] = []string{"other", "api"} })), `token audience (aud) does not include "stepgate"`},
		{"NoAudience", hsAndRSA, sign(t, jwt.SigningMethodRS256, rsaKey, "", good(func(c jwt.MapClaims) { delete(c, "aud") })), "token has no audience (aud)"},
		{"NoSubject", hsAndRSA, sign(t, jwt.SigningMethodRS256, rsaKey, "", good(func(c jwt.MapClaims) { delete(c, "sub") })), "token has no subject (sub)"},
		{"SubjectNotAString", hsAndRSA, sign(t, jwt.SigningMethodRS256, rsaKey, "", good(func(c jwt.MapClaims) { c["sub"] = 42 })), "token has no subject (sub)"},
		{"AlgNone", hsAndRSA, none, "token algorithm none is not accepted"},
		{"HSWithThePublicKeyAsSecret", hsAndRSA, sign(t, jwt.SigningMethodHS256, rsaPEM, "", good(nil)), "token signature is invalid"},
		{"HSWithThePublicKeyAsSecretRSAOnly", rsaOnly, sign(t, jwt.SigningMethodHS256, rsaPEM, "", claims(nil)), "token algorithm HS256 is not accepted"},
		{"AlgorithmNotConfigured", hsOnly, sign(t, jwt.SigningMethodHS512, secret, "", claims(nil)), "token algorithm HS512 is not accepted (accepted: HS256)"},
		{"ES384WithOnlyAP256Key", hsAndRSA, sign(t, jwt.SigningMethodES384, p384Key, "", good(nil)), "token algorithm ES384 is not accepted"},
		{"TamperedPayload", hsAndRSA, tampered, "token signature is invalid"},
		{"WrongKey", hsAndRSA, sign(t, jwt.SigningMethodRS256, otherRSA, "", good(nil)), "token signature is invalid"},
		{"WrongSecret", hsAndRSA, sign(t, jwt.SigningMethodHS256, otherSecret, "", good(nil)), "token signature is invalid"},
		{"TenantNotAString", hsAndRSA, sign(t, jwt.SigningMethodRS256, rsaKey, "", good(func(c jwt.MapClaims) { c["tenant"] = 7 })), "token tenant claim (tenant) is not a string"},
		{"TenantNotPrintable", hsAndRSA, sign(t, jwt.SigningMethodRS256, rsaKey, "", good(func(c jwt.MapClaims) { c["tenant"] = "a\nb" })), "is not a tenant"},
		{"NoTenant", hsAndRSA, sign(t, jwt.SigningMethodRS256, rsaKey, "", good(func(c jwt.MapClaims) { delete(c, "tenant") })), "token has no tenant claim (tenant)"},
		{"EmptyTenant", hsAndRSA, sign(t, jwt.SigningMethodRS256, rsaKey, "", good(func(c jwt.MapClaims) { c["tenant"] = "" })), "token has no tenant claim (tenant)"},
		{"TooLongLived", hsAndRSA, sign(t, jwt.SigningMethodRS256, rsaKey, "", good(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(48 * time.Hour).Unix() })),
			"token is valid for 48h0m0s (exp - iat), longer than the gateway's maximum of 24h0m0s"},
		{"TooLongLivedNoIat", hsAndRSA, sign(t, jwt.SigningMethodRS256, rsaKey, "", good(func(c jwt.MapClaims) {
			delete(c, "iat")
			c["exp"] = time.Now().Add(30 * 24 * time.Hour).Unix()
		})), "(exp - now), longer than the gateway's maximum"},
		{"UnknownCrit", hsAndRSA, func() string {
			tok := jwt.NewWithClaims(jwt.SigningMethodRS256, good(nil))
			tok.Header["crit"] = []string{"b64"}
			tok.Header["b64"] = false
			s, err := tok.SignedString(rsaKey)
			require.NoError(t, err)
			return s
		}(), "critical extensions (crit)"},
		{"RolesNotStrings", hsAndRSA, sign(t, jwt.SigningMethodRS256, rsaKey, "", good(func(c jwt.MapClaims) { c["roles"] = []any{"admin", 1} })), "token roles claim (roles) is not an array of strings"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			id, err := tc.v.Verify(t.Context(), tc.token)
			require.ErrorIs(t, err, auth.ErrUnauthorized)
			require.ErrorContains(t, err, tc.reason)
			require.NotContains(t, err.Error(), tc.token, "an error never echoes the token")
			require.Zero(t, id)
		})
	}

	t.Run("LeewayAllowsAFreshlyExpiredToken", func(t *testing.T) {
		t.Parallel()
		v := newVerifier(t, auth.Config{Secrets: [][]byte{secret}})
		_, err := v.Verify(t.Context(), sign(t, jwt.SigningMethodHS256, secret, "", claims(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-5 * time.Second).Unix() })))
		require.NoError(t, err)
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}

func TestIdentity(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  auth.Config
		edit func(jwt.MapClaims)
		want auth.Identity
	}{
		{"Defaults", auth.Config{}, nil, auth.Identity{Subject: "alice", Tenant: "acme", Roles: []string{}}},
		{"TenantAndRoles", auth.Config{}, func(c jwt.MapClaims) { c["tenant"], c["roles"] = "globex", []string{"viewer", "invoker"} },
			auth.Identity{Subject: "alice", Tenant: "globex", Roles: []string{"viewer", "invoker"}}},
		{"NoTenantTakesTheDefaultTenant", auth.Config{DefaultTenant: "solo"}, func(c jwt.MapClaims) { delete(c, "tenant") },
			auth.Identity{Subject: "alice", Tenant: "solo", Roles: []string{}}},
		{"EmptyTenantTakesTheDefaultTenant", auth.Config{DefaultTenant: "solo"}, func(c jwt.MapClaims) { c["tenant"] = "" },
			auth.Identity{Subject: "alice", Tenant: "solo", Roles: []string{}}},
		{"RolesAsAString", auth.Config{}, func(c jwt.MapClaims) { c["roles"] = "viewer, runs:invoke  operator" },
			auth.Identity{Subject: "alice", Tenant: "acme", Roles: []string{"viewer", "runs:invoke", "operator"}}},
		{"ScopeGrantsNothingByDefault", auth.Config{}, func(c jwt.MapClaims) { c["roles"], c["scope"] = []string{"viewer"}, "admin runs:invoke" },
			auth.Identity{Subject: "alice", Tenant: "acme", Roles: []string{"viewer"}}},
		{"ScopeWithThePrefixGrantsRoles", auth.Config{ScopePrefix: "stepgate:"}, func(c jwt.MapClaims) {
			c["roles"], c["scope"] = []string{"viewer"}, "openid stepgate:runs:invoke admin stepgate:viewer stepgate:"
		}, auth.Identity{Subject: "alice", Tenant: "acme", Roles: []string{"viewer", "runs:invoke"}}},
		{"ConfiguredClaims", auth.Config{TenantClaim: "https://stepgate.dev/org", RolesClaim: "realm_access.roles"},
			func(c jwt.MapClaims) {
				c["https://stepgate.dev/org"] = "globex"
				c["realm_access"] = map[string]any{"roles": []string{"developer"}}
				c["tenant"], c["roles"] = "ignored", []string{"admin"}
			},
			auth.Identity{Subject: "alice", Tenant: "globex", Roles: []string{"developer"}}},
		{"AllowedClaimsOnly", auth.Config{IdentityClaims: []string{"email", "org.plan", "missing"}},
			func(c jwt.MapClaims) {
				c["email"], c["phone"] = "alice@example.com", "555"
				c["org"] = map[string]any{"plan": "pro"}
			},
			auth.Identity{Subject: "alice", Tenant: "acme", Roles: []string{}, Claims: map[string]any{"email": "alice@example.com", "org.plan": "pro"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := tc.cfg
			cfg.Secrets = [][]byte{secret}
			v := newVerifier(t, cfg)
			id, err := v.Verify(t.Context(), sign(t, jwt.SigningMethodHS256, secret, "", claims(tc.edit)))
			require.NoError(t, err)
			require.Equal(t, tc.want, id)
		})
	}

	t.Run("NewTokenRoundTrips", func(t *testing.T) {
		t.Parallel()
		cfg := auth.Config{Secrets: [][]byte{secret}, Issuer: "https://idp.test/", Audience: "stepgate", TenantClaim: "org", RolesClaim: "groups"}
		want := auth.Identity{Subject: "bob", Tenant: "acme", Roles: []string{"viewer"}}
		tok, err := cfg.NewToken(want, time.Minute)
		require.NoError(t, err)
		got, err := newVerifier(t, cfg).Verify(t.Context(), tok)
		require.NoError(t, err)
		require.Equal(t, want, got)

		_, err = auth.Config{Secrets: [][]byte{secret}, Algorithms: []string{"HS512"}}.NewToken(want, time.Minute)
		require.ErrorContains(t, err, "HS256 is not an accepted algorithm")
	})
}

// jwksServer serves a JWK Set that a test can add keys to, and counts its fetches.
type jwksServer struct {
	t       *testing.T
	URL     string
	mu      sync.Mutex
	keys    []jwkset.JWK
	fetches atomic.Int32
}

func newJWKSServer(t *testing.T) *jwksServer {
	j := &jwksServer{t: t}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		j.fetches.Add(1)
		j.mu.Lock()
		defer j.mu.Unlock()
		set := jwkset.JWKSMarshal{Keys: []jwkset.JWKMarshal{}}
		for _, k := range j.keys {
			set.Keys = append(set.Keys, k.Marshal())
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(set)
	}))
	t.Cleanup(srv.Close)
	j.URL = srv.URL + "/.well-known/jwks.json"
	return j
}

// add publishes pub under kid for alg.
func (j *jwksServer) add(kid string, alg jwkset.ALG, pub any) {
	k, err := jwkset.NewJWKFromKey(pub, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid, ALG: alg, USE: jwkset.UseSig}})
	require.NoError(j.t, err)
	j.mu.Lock()
	defer j.mu.Unlock()
	j.keys = append(j.keys, k)
}

func TestJWKS(t *testing.T) {
	t.Parallel()

	t.Run("VerifiesByKidAndRefreshesOnAnUnknownOne", func(t *testing.T) {
		t.Parallel()
		js := newJWKSServer(t)
		js.add("rsa-1", jwkset.AlgRS256, &rsaKey.PublicKey)
		js.add("ed-1", jwkset.AlgEdDSA, edPub)
		v := newVerifier(t, auth.Config{JWKSURL: js.URL, JWKSRefreshLimit: time.Nanosecond})
		require.EqualValues(t, 1, js.fetches.Load(), "fetched once at start")

		for _, tok := range []string{
			sign(t, jwt.SigningMethodRS256, rsaKey, "rsa-1", claims(nil)),
			sign(t, jwt.SigningMethodEdDSA, edKey, "ed-1", claims(nil)),
			sign(t, jwt.SigningMethodRS256, rsaKey, "", claims(nil)), // no kid: every key of its family
		} {
			_, err := v.Verify(t.Context(), tok)
			require.NoError(t, err)
		}
		require.EqualValues(t, 1, js.fetches.Load(), "known keys need no fetch")

		later := sign(t, jwt.SigningMethodES256, p256Key, "ec-2", claims(nil))
		_, err := v.Verify(t.Context(), later)
		require.ErrorContains(t, err, "token key id (kid) is not in the JWKS")
		require.EqualValues(t, 2, js.fetches.Load(), "an unknown kid fetches again")

		js.add("ec-2", jwkset.AlgES256, &p256Key.PublicKey) // the provider rotates keys
		_, err = v.Verify(t.Context(), later)
		require.NoError(t, err)
		require.EqualValues(t, 3, js.fetches.Load())

		_, err = v.Verify(t.Context(), sign(t, jwt.SigningMethodRS256, rsaKey, "ed-1", claims(nil)))
		require.ErrorContains(t, err, "cannot verify its algorithm")
		_, err = v.Verify(t.Context(), sign(t, jwt.SigningMethodHS256, secret, "rsa-1", claims(nil)))
		require.ErrorContains(t, err, "token algorithm HS256 is not accepted", "a JWKS never verifies HMAC tokens")
	})

	t.Run("UnknownKidsAreRateLimited", func(t *testing.T) {
		t.Parallel()
		js := newJWKSServer(t)
		js.add("rsa-1", jwkset.AlgRS256, &rsaKey.PublicKey)
		v := newVerifier(t, auth.Config{JWKSURL: js.URL, JWKSRefreshLimit: time.Hour})
		for range 5 {
			_, err := v.Verify(t.Context(), sign(t, jwt.SigningMethodRS256, rsaKey, "junk", claims(nil)))
			require.ErrorContains(t, err, "not in the JWKS")
		}
		require.EqualValues(t, 2, js.fetches.Load(), "one fetch at start, one for the first unknown kid")
	})

	t.Run("AProviderDownAtStartIsFetchedLater", func(t *testing.T) {
		t.Parallel()
		var up atomic.Bool
		js := newJWKSServer(t)
		js.add("rsa-1", jwkset.AlgRS256, &rsaKey.PublicKey)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !up.Load() {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
			http.Redirect(w, r, js.URL, http.StatusFound)
		}))
		t.Cleanup(srv.Close)
		v := newVerifier(t, auth.Config{JWKSURL: srv.URL, JWKSRefreshLimit: time.Nanosecond})
		tok := sign(t, jwt.SigningMethodRS256, rsaKey, "rsa-1", claims(nil))
		_, err := v.Verify(t.Context(), tok)
		require.ErrorContains(t, err, "not in the JWKS")
		up.Store(true)
		_, err = v.Verify(t.Context(), tok)
		require.NoError(t, err)
	})
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	weak := mustKey(rsa.GenerateKey(rand.Reader, 1024))
	for _, tc := range []struct {
		name string
		cfg  auth.Config
		err  string
	}{
		{"NoKey", auth.Config{}, "no key to verify tokens"},
		{"ShortSecret", auth.Config{Secrets: [][]byte{[]byte("short")}}, "HS secret 1 is 5 bytes"},
		{"WeakRSA", auth.Config{PublicKeys: []crypto.PublicKey{&weak.PublicKey}}, "too weak"},
		{"NotAKey", auth.Config{PublicKeys: []crypto.PublicKey{"key"}}, "not a supported public key"},
		{"JWKSNotHTTP", auth.Config{JWKSURL: "file:///etc/jwks.json"}, "not an http(s) URL"},
		{"AlgNone", auth.Config{Secrets: [][]byte{secret}, Algorithms: []string{"HS256", "none"}}, `"none" is never accepted`},
		{"UnknownAlg", auth.Config{Secrets: [][]byte{secret}, Algorithms: []string{"HS257"}}, `"HS257" is not one of`},
		{"AlgWithoutKey", auth.Config{Secrets: [][]byte{secret}, Algorithms: []string{"HS256", "RS256"}}, "RS256 is accepted but no configured key can verify it"},
		{"SecretUnused", auth.Config{Secrets: [][]byte{secret}, PublicKeys: []crypto.PublicKey{&rsaKey.PublicKey}, Algorithms: []string{"RS256"}}, "no HS algorithm is accepted"},
		{"KeyUnused", auth.Config{Secrets: [][]byte{secret}, PublicKeys: []crypto.PublicKey{edPub}, Algorithms: []string{"HS256"}}, "public key 1 can verify only EdDSA"},
		{"LeewayTooLong", auth.Config{Secrets: [][]byte{secret}, Leeway: time.Hour}, "more than the 5m allowed"},
		{"EmptyClaimName", auth.Config{Secrets: [][]byte{secret}, IdentityClaims: []string{" "}}, "a claim name is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.ErrorContains(t, tc.cfg.Validate(), tc.err)
			_, err := auth.NewVerifier(tc.cfg)
			require.ErrorContains(t, err, tc.err)
		})
	}
	require.NoError(t, auth.Config{JWKSURL: "https://idp.example/.well-known/jwks.json", Algorithms: []string{"ES256"}}.Validate())
}

func TestParsePublicKeys(t *testing.T) {
	t.Parallel()
	rsaPEM := pemOf(t, &rsaKey.PublicKey)
	pkcs1 := pem.EncodeToMemory(&pem.Block{Type: "RSA PUBLIC KEY", Bytes: x509.MarshalPKCS1PublicKey(&rsaKey.PublicKey)})
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &p256Key.PublicKey, p256Key)
	require.NoError(t, err)
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	privDER, err := x509.MarshalPKCS8PrivateKey(edKey)
	require.NoError(t, err)
	priv := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: privDER})

	keys, err := auth.ParsePublicKeys(append(append(append([]byte{}, rsaPEM...), pkcs1...), cert...))
	require.NoError(t, err)
	require.Len(t, keys, 3)
	require.True(t, rsaKey.PublicKey.Equal(keys[0]))
	require.True(t, rsaKey.PublicKey.Equal(keys[1]))
	require.True(t, p256Key.PublicKey.Equal(keys[2]))

	_, err = auth.ParsePublicKeys(priv)
	require.ErrorContains(t, err, "private key")
	_, err = auth.ParsePublicKeys([]byte("not pem"))
	require.ErrorContains(t, err, "no PEM block")
	_, err = auth.ParsePublicKeys(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: []byte("junk")}))
	require.ErrorContains(t, err, "PEM block 1 (PUBLIC KEY)")
}

// FuzzVerify feeds the verifier arbitrary tokens, and tokens correctly signed over
// arbitrary claims: it never panics, every refusal wraps ErrUnauthorized without
// echoing the token, and an accepted token has a subject, a tenant and roles.
func FuzzVerify(f *testing.F) {
	f.Add("garbage", []byte(`{"sub":"a","exp":9999999999}`))
	f.Add("a.b.c", []byte(`{"sub":"a","exp":9999999999,"roles":"x, y","scope":["z"],"tenant":"t","org":{"tenant":1}}`))
	f.Add("eyJhbGciOiJub25lIn0.e30.", []byte(`{"sub":"","exp":"soon","aud":[1],"iss":{}}`))
	v, err := auth.NewVerifier(auth.Config{Secrets: [][]byte{secret}, RolesClaim: "realm.roles", TenantClaim: "org.tenant", IdentityClaims: []string{"a.b", "email"}})
	require.NoError(f, err)
	f.Cleanup(v.Close)
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	f.Fuzz(func(t *testing.T, raw string, payload []byte) {
		signed := header + "." + base64.RawURLEncoding.EncodeToString(payload)
		sig, err := jwt.SigningMethodHS256.Sign(signed, secret)
		require.NoError(t, err)
		for _, tok := range []string{raw, signed + "." + base64.RawURLEncoding.EncodeToString(sig)} {
			id, err := v.Verify(t.Context(), tok)
			if err != nil {
				require.ErrorIs(t, err, auth.ErrUnauthorized)
				if len(tok) > 16 {
					require.NotContains(t, err.Error(), tok)
				}
				continue
			}
			require.NotEmpty(t, id.Subject)
			require.NotEmpty(t, id.Tenant)
			require.NotNil(t, id.Roles)
		}
	})
}

// TestVerifierRefusesDuplicateClaims: a payload that names a key twice in one object, at
// any depth, is refused whichever copy a reader would keep; the same key in two objects
// is not a duplicate.
func TestVerifierRefusesDuplicateClaims(t *testing.T) {
	t.Parallel()
	v := newVerifier(t, auth.Config{Secrets: [][]byte{secret}, RolesClaim: "realm_access.roles"})
	now := time.Now().Unix()
	raw := func(claims string) string {
		unsigned := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." +
			base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"sub":"alice","iat":%d,"exp":%d,%s}`, now, now+3600, claims))
		sig, err := jwt.SigningMethodHS256.Sign(unsigned, secret)
		require.NoError(t, err)
		return unsigned + "." + base64.RawURLEncoding.EncodeToString(sig)
	}

	id, err := v.Verify(t.Context(), raw(`"tenant":"acme","realm_access":{"roles":["viewer"]},"other":{"roles":["x"],"tenant":"y"}`))
	require.NoError(t, err)
	require.Equal(t, auth.Identity{Subject: "alice", Tenant: "acme", Roles: []string{"viewer"}}, id)

	for claim, claims := range map[string]string{
		"tenant": `"tenant":"acme","tenant":"evil"`,
		"sub":    `"tenant":"acme","sub":"root"`,
		"roles":  `"tenant":"acme","realm_access":{"roles":["viewer"],"roles":["admin"]}`,
		"iss":    `"tenant":"acme","iss":"a","iss":"b"`,
		"aud":    `"tenant":"acme","aud":"a","aud":["b"]`,
		"nbf":    `"tenant":"acme","nbf":1,"nbf":2`,
		"x":      `"tenant":"acme","extra":[{"x":1,"x":2}]`,
	} {
		token := raw(claims)
		id, err := v.Verify(t.Context(), token)
		require.ErrorIs(t, err, auth.ErrUnauthorized, claim)
		require.ErrorContains(t, err, fmt.Sprintf("token payload names the claim %q more than once", claim))
		require.NotContains(t, err.Error(), token)
		require.Zero(t, id)
	}
}
