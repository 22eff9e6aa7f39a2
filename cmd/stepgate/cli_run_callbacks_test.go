package main

import (
	"context"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// TestRunsCallbacks runs "stepgate runs callbacks ID" against a real gateway: a manager
// gets the callback's whole URL, which resolves it (with "callbacks resolve"); a viewer
// is refused, naming the permission; another tenant finds no run.
func TestRunsCallbacks(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	manager := s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}})
	viewer := s.NewToken(t, auth.Identity{Subject: "vic", Tenant: "t1", Roles: []string{"viewer"}})
	other := s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"admin"}})
	a := s.NewApp()
	functions.Register(a, "approve", func(ctx context.Context, _ struct{}) (bool, error) {
		cb, err := step.Callback[bool](ctx, "approval", step.Timeout(time.Hour))
		if err != nil {
			return false, err
		}
		return cb.Result().Get()
	})
	api := s.Client(t, manager)
	synced, err := api.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, a)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
	started, err := api.StartRunWithBodyWithResponse(t.Context(), "approve", &protocol.StartRunParams{}, "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, started.StatusCode(), string(started.Body))
	id := started.JSON202.ID
	stack.AwaitStatus(t, api, id, protocol.RunStatusSuspended)

	run := func(token string, args ...string) (string, error) {
		c, stdout, _ := newTestCLI(map[string]string{"STEPGATE_URL": s.URL, "STEPGATE_TOKEN": token}, "")
		err := c.run(t.Context(), args)
		return stdout.String(), err
	}
	out, err := run(manager, "runs", "callbacks", id)
	require.NoError(t, err)
	require.Regexp(t, `(?m)^SEQ +NAME +AWAITED +EXPIRES +URL$`, out)
	url := regexp.MustCompile(`(?m)^1 +approval +yes +.* (` + regexp.QuoteMeta(s.URL) + `/v1/callbacks/[A-Za-z0-9_-]{43})$`).FindStringSubmatch(out)
	require.NotNil(t, url, out)

	_, err = run(viewer, "runs", "callbacks", id)
	require.ErrorContains(t, err, "needs the runs:manage permission")
	_, err = run(other, "runs", "callbacks", id)
	require.ErrorContains(t, err, "404")

	_, err = run("", "callbacks", "resolve", url[1], "true")
	require.NoError(t, err)
	stack.AwaitStatus(t, api, id, protocol.RunStatusCompleted)
	out, err = run(manager, "runs", "callbacks", id)
	require.NoError(t, err)
	require.Equal(t, "no open callbacks\n", out)
}
