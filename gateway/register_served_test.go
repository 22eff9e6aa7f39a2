package gateway_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// TestRegisterWhereAnotherFunctionIsServed: registering a function at the URL where its
// app's manifest serves another function is a 400 naming the functions served there,
// since the SDK would refuse every run of it (401); the function the URL serves, a URL
// the manifest does not list, and an app mounted under a path are accepted as they
// should be. A tenant whose signature the app refuses learns nothing of its manifest:
// its registration is accepted, as its sync is refused.
func TestRegisterWhereAnotherFunctionIsServed(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	a := s.Client(t, s.Token)
	b := s.Client(t, s.NewToken(t, auth.Identity{Subject: "bob", Tenant: "tenant-b", Roles: []string{"admin"}}))
	twoFunctions := func(cfg functions.Config) *functions.App {
		app := functions.New(cfg)
		for _, name := range []string{"pay.charge", "pay.refund"} {
			functions.Register(app, name, func(context.Context, struct{}) (string, error) { return name, nil })
		}
		return app
	}
	// Any tenant of the gateway may call this app; the other is tenant A's only.
	shared := s.ServeApp(t, twoFunctions(functions.Config{Keys: s.Keys.Verification}))
	mux := http.NewServeMux()
	mux.Handle("/stepgate/", http.StripPrefix("/stepgate", twoFunctions(functions.Config{Keys: s.Keys.Verification, Tenant: auth.DefaultTenant})))
	owned := s.ServeApp(t, mux) + "stepgate/"

	register := func(c *protocol.ClientWithResponses, name, url string) *protocol.RegisterFunctionResponse {
		t.Helper()
		resp, err := c.RegisterFunctionWithResponse(t.Context(), name, protocol.FunctionRegistration{URL: url})
		require.NoError(t, err)
		return resp
	}
	refused := func(resp *protocol.RegisterFunctionResponse) string {
		t.Helper()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
		return resp.ApplicationProblemJSON400.Detail
	}

	detail := refused(register(a, "refund", shared+"pay.refund"))
	require.Equal(t, `function refund: the manifest of the app at `+shared+` serves "pay.refund" at this URL, not "refund", `+
		`so its SDK would refuse every run of "refund" (401): register the function under the name it is served as, `+
		`or sync the app (stepgate apps sync `+shared+`)`, detail)
	got, err := a.GetFunctionWithResponse(t.Context(), "refund")
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, got.StatusCode(), "nothing was registered")
	require.Contains(t, refused(register(a, "pay.charge", owned+"pay.refund?key=1")), `the app at `+owned+` serves "pay.refund" at this URL, not "pay.charge"`)

	// What the manifest serves at the URL, and a URL it does not list, are registered.
	ok := register(a, "pay.refund", shared+"pay.refund")
	require.Equal(t, http.StatusOK, ok.StatusCode(), string(ok.Body))
	require.Equal(t, protocol.RunStatusCompleted, mustComplete(t, a, "pay.refund", `{}`).Status)
	ok = register(a, "elsewhere", shared+"pay/refund")
	require.Equal(t, http.StatusOK, ok.StatusCode(), string(ok.Body))

	// Tenant B reads the shared app's manifest, as its sync would; not tenant A's app's.
	require.Contains(t, refused(register(b, "refund", shared+"pay.refund")), `serves "pay.refund" at this URL`)
	ok = register(b, "refund", owned+"pay.refund")
	require.Equal(t, http.StatusOK, ok.StatusCode(), string(ok.Body))
	require.NotContains(t, string(ok.Body), "pay.charge")
	sync, err := b.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: owned})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadGateway, sync.StatusCode(), string(sync.Body))
}
