package gateway_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/signature"
)

// TestSigningKeys checks the keys the gateway signs requests to functions with: one key
// pair per tenant, handed out tenant-scoped, public keys to readers and HMAC secrets to
// writers only, rotated with an overlap in which both keys sign.
func TestSigningKeys(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	ctx := t.Context()
	acme := s.Client(t, s.NewToken(t, auth.Identity{Subject: "ada", Tenant: "acme", Roles: []string{"developer"}}))
	globex := s.Client(t, s.NewToken(t, auth.Identity{Subject: "gus", Tenant: "globex", Roles: []string{"developer"}}))
	viewer := s.Client(t, s.NewToken(t, auth.Identity{Subject: "val", Tenant: "acme", Roles: []string{"viewer"}}))

	a, err := acme.ListSigningKeysWithResponse(ctx)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, a.StatusCode(), string(a.Body))
	require.Equal(t, "acme", a.JSON200.Tenant)
	require.Len(t, a.JSON200.Keys, 1, "the first call makes the tenant's key")
	k := a.JSON200.Keys[0]
	require.Equal(t, protocol.OKP, k.Kty)
	require.Equal(t, protocol.Ed25519, k.Crv)
	require.Nil(t, k.RetiresAt)
	pub, err := signature.ParsePublicKeys(k.X)
	require.NoError(t, err)
	require.Len(t, pub[0], ed25519.PublicKeySize)

	g, err := globex.ListSigningKeysWithResponse(ctx)
	require.NoError(t, err)
	require.NotEqual(t, k.X, g.JSON200.Keys[0].X, "each tenant has its own key pair")
	v, err := viewer.ListSigningKeysWithResponse(ctx)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, v.StatusCode(), "public keys are for readers")
	require.Equal(t, k.X, v.JSON200.Keys[0].X)

	vs, err := viewer.ListSigningSecretsWithResponse(ctx)
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, vs.StatusCode(), "secrets are for writers")
	secrets, err := acme.ListSigningSecretsWithResponse(ctx)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, secrets.StatusCode(), string(secrets.Body))
	require.Equal(t, k.Kid, secrets.JSON200.Secrets[0].Kid)
	vr, err := viewer.RotateSigningKeyWithResponse(ctx, &protocol.RotateSigningKeyParams{})
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, vr.StatusCode())

	for _, bad := range []string{"soon", "-1h", "721h"} {
		r, err := acme.RotateSigningKeyWithResponse(ctx, &protocol.RotateSigningKeyParams{Overlap: ptr(bad)})
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, r.StatusCode(), bad)
		require.Contains(t, r.ApplicationProblemJSON400.Detail, "from 0s to 720h")
	}
	r, err := acme.RotateSigningKeyWithResponse(ctx, &protocol.RotateSigningKeyParams{Overlap: ptr("1h")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, r.StatusCode(), string(r.Body))
	require.Len(t, r.JSON200.Keys, 2)
	require.NotEqual(t, k.X, r.JSON200.Keys[0].X)
	require.Equal(t, k.X, r.JSON200.Keys[1].X, "the old key signs on during the overlap")
	require.NotNil(t, r.JSON200.Keys[1].RetiresAt)
	for range 1 {
		r, err = acme.RotateSigningKeyWithResponse(ctx, &protocol.RotateSigningKeyParams{})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, r.StatusCode())
	}
	r, err = acme.RotateSigningKeyWithResponse(ctx, &protocol.RotateSigningKeyParams{})
	require.NoError(t, err)
	require.Equal(t, http.StatusConflict, r.StatusCode(), "at most three keys sign at once")
	require.Contains(t, r.ApplicationProblemJSON409.Detail, "already has 3 keys that sign")
	g2, err := globex.ListSigningKeysWithResponse(ctx)
	require.NoError(t, err)
	require.Len(t, g2.JSON200.Keys, 1, "acme's rotations leave globex alone")
}

// TestForgedRequests plays a function author of tenant acme who holds everything acme's
// functions are given (acme's public keys and HMAC secrets, and the invocation tokens of
// acme's runs) and tries to act as the gateway towards tenant globex's functions, or on
// runs that are not the one it was invoked for.
func TestForgedRequests(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	ctx := t.Context()
	acmeToken := s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "acme", Roles: []string{"developer"}})
	globexToken := s.NewToken(t, auth.Identity{Subject: "gus", Tenant: "globex", Roles: []string{"developer"}})

	// globex's function, verifying with globex's public keys only, as a real one would.
	var globexCalls atomic.Int32
	gk, err := s.Client(t, globexToken).ListSigningKeysWithResponse(ctx)
	require.NoError(t, err)
	globexPub, err := signature.ParsePublicKeys(gk.JSON200.Keys[0].X)
	require.NoError(t, err)
	globexApp := functions.New(functions.Config{PublicKeys: globexPub, Tenant: "globex"})
	functions.Register(globexApp, "payout", func(ctx context.Context, in struct{ To string }) (string, error) {
		globexCalls.Add(1)
		return "paid " + in.To, nil
	})
	globexURL := s.ServeApp(t, globexApp)

	// acme's malicious function, run once so acme has keys and a run.
	acmeApp := s.NewApp()
	functions.Register(acmeApp, "evil", func(ctx context.Context, _ struct{}) (string, error) {
		_, err := step.Run(ctx, "first", func(context.Context) (int, error) { return 1, nil })
		return "done", err
	})
	acme := s.Client(t, acmeToken)
	sync, err := acme.SyncAppWithResponse(ctx, nil, protocol.AppSync{URL: s.ServeApp(t, acmeApp)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, sync.StatusCode(), string(sync.Body))
	mustComplete(t, acme, "evil", `{}`)
	secrets, err := acme.ListSigningSecretsWithResponse(ctx)
	require.NoError(t, err)
	acmeSecret, err := signature.ParseSecrets(secrets.JSON200.Secrets[0].Secret)
	require.NoError(t, err)

	invocation := mustJSON(t, map[string]any{
		"protocol":   1,
		"run":        map[string]any{"id": "01a22695-0000-7000-8000-0000000000aa", "function": "payout", "revision": 1, "attempt": 1, "input": map[string]string{"To": "mallory"}, "created_at": time.Now()},
		"identity":   map[string]any{"subject": "gus", "tenant": "globex", "roles": []string{"admin"}},
		"journal":    []any{},
		"checkpoint": map[string]any{"url": "http://127.0.0.1:1/", "token": "x"},
	})
	post := func(sig string) int {
		req, err := http.NewRequestWithContext(ctx, "POST", globexURL+"payout", bytes.NewReader(invocation))
		require.NoError(t, err)
		req.Header.Set(signature.Header, sig)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	now := time.Now()
	u, err := url.Parse(globexURL + "payout")
	require.NoError(t, err)
	payout := signature.Request{Method: http.MethodPost, Path: signature.PathOf(u), Body: invocation} // what a version 2 signature binds
	msg := func(tenant string) []byte { return signature.Message(now.Unix(), tenant, payout) }
	hmacOf := func(secret []byte, m []byte) string {
		h := hmac.New(sha256.New, secret)
		h.Write(m)
		return "v1=" + hex.EncodeToString(h.Sum(nil))
	}
	for name, sig := range map[string]string{
		// acme's HMAC secret, the tenant named as globex or as acme.
		"AcmeSecretAsGlobex": "v=2,t=" + strconv.FormatInt(now.Unix(), 10) + ",tenant=globex," + hmacOf(acmeSecret[0], msg("globex")),
		"AcmeSecretAsAcme":   "v=2,t=" + strconv.FormatInt(now.Unix(), 10) + ",tenant=acme," + hmacOf(acmeSecret[0], msg("acme")),
		// A key pair of the attacker's own, with its signature in the Ed25519 slot.
		"OwnKeyPair": signature.Sign(now, "globex", payout, signature.SigningKey{Ed25519: ed25519.NewKeyFromSeed(make([]byte, 32))}),
		"Unsigned":   "",
	} {
		require.Equal(t, http.StatusUnauthorized, post(sig), name)
	}
	require.Zero(t, globexCalls.Load(), "globex's function never ran for the attacker")

	// The same function, reached by the gateway for globex, runs.
	globex := s.Client(t, globexToken)
	reg, err := globex.RegisterFunctionWithResponse(ctx, "payout", protocol.FunctionRegistration{URL: globexURL + "payout"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, reg.StatusCode(), string(reg.Body))
	out := mustComplete(t, globex, "payout", `{"To":"gus"}`)
	require.JSONEq(t, `"paid gus"`, string(*out.Output))

	// Invocation tokens: acme's function knows nothing that signs one for another run.
	other := mustComplete(t, globex, "payout", `{"To":"x"}`)
	for name, tok := range map[string]string{
		"AcmeSecretAsKey": forgeInvocationToken(acmeSecret[0], other.ID),
		"PublicKeyAsKey":  forgeInvocationToken(globexPub[0], other.ID),
	} {
		status, body := rawRequest(t, "POST", s.URL+"/v1/runs/"+other.ID+"/checkpoint", tok, "application/json",
			strings.NewReader(`{"seq":2,"kind":"step","name":"steal","output":1}`))
		require.Equal(t, http.StatusUnauthorized, status, "%s: %v", name, body)
	}
}

// forgeInvocationToken makes what an invocation token looks like, keyed with key.
func forgeInvocationToken(key []byte, runID string) string {
	payload := "k." + runID + ".1." + strconv.FormatInt(time.Now().Add(time.Minute).Unix(), 10)
	h := hmac.New(sha256.New, key)
	h.Write([]byte(payload))
	return payload + "." + base64.RawURLEncoding.EncodeToString(h.Sum(nil))
}

// TestGatewayKeys runs an app that fetches its tenant's public keys from the gateway and
// follows a rotation by itself.
func TestGatewayKeys(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	ctx := t.Context()
	token := s.NewToken(t, auth.Identity{Subject: "ada", Tenant: "acme", Roles: []string{"developer"}})
	keys, err := functions.GatewayKeys(s.URL, token, time.Millisecond, nil)
	require.NoError(t, err)
	app := functions.New(functions.Config{Keys: keys})
	functions.Register(app, "hello", func(ctx context.Context, _ struct{}) (string, error) { return "hi", nil })
	url := s.ServeApp(t, app)
	c := s.Client(t, token)
	reg, err := c.SyncAppWithResponse(ctx, nil, protocol.AppSync{URL: url})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, reg.StatusCode(), string(reg.Body))
	mustComplete(t, c, "hello", `{}`)

	// A rotation that retires the old key at once: the app fetches the new one.
	r, err := c.RotateSigningKeyWithResponse(ctx, &protocol.RotateSigningKeyParams{Overlap: ptr("0s")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, r.StatusCode())
	mustComplete(t, c, "hello", `{}`)

	// Another tenant that syncs the same app is refused: the app serves acme only.
	globex := s.Client(t, s.NewToken(t, auth.Identity{Subject: "gus", Tenant: "globex", Roles: []string{"developer"}}))
	sync, err := globex.SyncAppWithResponse(ctx, nil, protocol.AppSync{URL: url})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadGateway, sync.StatusCode())
	require.Contains(t, sync.ApplicationProblemJSON502.Detail, "401")
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return b
}
