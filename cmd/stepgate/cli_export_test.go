package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// TestRunsExport runs "stepgate runs export" against a real gateway: -o writes the
// export to a file only its owner reads, without -o it goes to stdout, and another
// tenant's run is a 404 that writes no file.
func TestRunsExport(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	token := s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}})
	api := s.Client(t, token)
	app := s.NewApp()
	functions.Register(app, "greet", func(ctx context.Context, in struct {
		Name string `json:"name"`
	}) (string, error) {
		return step.Run(ctx, "greeting", func(context.Context) (string, error) { return "Hello, " + in.Name, nil })
	})
	synced, err := api.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
	started, err := api.StartRunWithBodyWithResponse(t.Context(), "greet", &protocol.StartRunParams{Wait: new("30s")}, "application/json", strings.NewReader(`{"name":"Ada"}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, started.StatusCode(), string(started.Body))
	runID := started.JSON200.ID

	run := func(token string, args ...string) (string, string, error) {
		c, stdout, stderr := newTestCLI(map[string]string{"STEPGATE_URL": s.URL, "STEPGATE_TOKEN": token}, "")
		err := c.run(t.Context(), args)
		return stdout.String(), stderr.String(), err
	}

	// An existing file anyone may read is replaced by one only its owner reads.
	file := filepath.Join(t.TempDir(), "run.json")
	require.NoError(t, os.WriteFile(file, []byte("old"), 0o644))
	out, msg, err := run(token, "runs", "export", runID, "-o", file)
	require.NoError(t, err)
	require.Empty(t, out)
	require.Equal(t, "run "+runID+" exported to "+file+"\n", msg)
	info, err := os.Stat(file)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), info.Mode().Perm())
	raw, err := os.ReadFile(file)
	require.NoError(t, err)
	var x protocol.RunExport
	require.NoError(t, json.Unmarshal(raw, &x))
	require.Equal(t, "stepgate.run/1", x.Format)
	require.Equal(t, runID, x.Run.ID)
	require.Equal(t, protocol.RunStatusCompleted, x.Run.Status)
	require.JSONEq(t, `{"name":"Ada"}`, string(*x.Run.Input))
	require.JSONEq(t, `"Hello, Ada"`, string(*x.Run.Output))
	require.Equal(t, "alice", x.Run.Identity.Subject)
	require.Len(t, x.Journal, 1)
	require.Equal(t, "greeting", x.Journal[0].Name)

	out, _, err = run(token, "runs", "export", runID)
	require.NoError(t, err)
	var y protocol.RunExport
	require.NoError(t, json.Unmarshal([]byte(out), &y))
	require.Equal(t, x.Run, y.Run)
	require.Equal(t, x.Journal, y.Journal)

	other := s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"admin"}})
	missing := filepath.Join(t.TempDir(), "other.json")
	_, _, err = run(other, "runs", "export", runID, "-o", missing)
	require.ErrorContains(t, err, "404")
	require.NoFileExists(t, missing)
}
