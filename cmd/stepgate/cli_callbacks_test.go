package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCallbacksCommands(t *testing.T) {
	t.Parallel()
	type seen struct{ path, auth, body string }
	got := make(chan seen, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- seen{r.URL.Path, r.Header.Get("Authorization"), string(body)}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/callbacks/gone" {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, `{"title":"Conflict","status":409,"detail":"callback \"ok\" (seq 1) of run r1 is already resolved: at 2026-12-01T10:00:00Z by ada; a callback is resolved once"}`)
			return
		}
		_, _ = io.WriteString(w, `{"name":"ok","seq":1,"state":"resolved","resolver":"token","resolved_at":"2026-12-01T10:00:00Z","resumed":true}`)
	}))
	t.Cleanup(srv.Close)

	c, stdout, _ := newTestCLI(map[string]string{"STEPGATE_URL": srv.URL}, "")
	require.NoError(t, c.run(t.Context(), []string{"callbacks", "resolve", "http://elsewhere/v1/callbacks/tok123", `{"approved":true}`}))
	require.Equal(t, seen{"/v1/callbacks/tok123", "", `{"approved":true}`}, <-got)
	require.Equal(t, "callback ok (seq 1) resolved; the run resumed\n", stdout.String())

	c, _, _ = newTestCLI(map[string]string{"STEPGATE_URL": srv.URL}, "")
	require.NoError(t, c.run(t.Context(), []string{"callbacks", "reject", "tok123", "over budget", "--type", "declined"}))
	s := <-got
	require.Equal(t, "/v1/callbacks/tok123/reject", s.path)
	require.JSONEq(t, `{"type":"declined","message":"over budget"}`, s.body)

	c, _, _ = newTestCLI(map[string]string{"STEPGATE_URL": srv.URL}, "")
	err := c.run(t.Context(), []string{"callbacks", "resolve", "gone"})
	require.ErrorContains(t, err, "409 Conflict: callback \"ok\" (seq 1) of run r1 is already resolved")
	require.Equal(t, "null", (<-got).body)

	c, _, _ = newTestCLI(map[string]string{"STEPGATE_URL": srv.URL}, "")
	require.ErrorContains(t, c.run(t.Context(), []string{"callbacks", "resolve", "tok", "{nope"}), "JSON is not JSON")
	require.ErrorContains(t, c.run(t.Context(), []string{"callbacks", "reject", "tok"}), "missing MESSAGE")
}
