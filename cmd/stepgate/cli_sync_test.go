package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/internal/wiring/stack"
)

// TestAppsSyncChanged runs "stepgate apps sync URL" twice against a real gateway: the
// first sync makes revision 1 of each function, the second changes nothing and says
// so, in its summary and in the table's CHANGED column.
func TestAppsSyncChanged(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	token := s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}})
	a := s.NewApp()
	functions.Register(a, "hello", func(ctx context.Context, _ struct{}) (string, error) { return "hi", nil }, functions.InvocationTimeout(5*time.Second))
	appURL := s.ServeApp(t, a)
	run := func(args ...string) string {
		c, stdout, _ := newTestCLI(map[string]string{"STEPGATE_URL": s.URL, "STEPGATE_TOKEN": token}, "")
		require.NoError(t, c.run(t.Context(), args))
		return stdout.String()
	}
	out := run("apps", "sync", appURL)
	require.Contains(t, out, "synced 1 function from "+appURL+": 1 changed (new revision), 0 unchanged")
	require.Regexp(t, `(?m)^NAME +REVISION +CHANGED +URL +TIMEOUT$`, out)
	require.Regexp(t, `(?m)^hello +1 +yes +`, out)

	out = run("apps", "sync", appURL)
	require.Contains(t, out, "synced 1 function from "+appURL+": 0 changed (new revision), 1 unchanged")
	require.Regexp(t, `(?m)^hello +1 +no +`, out)
}
