package functionstest_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// exportTo writes the export of run id (GET /v1/runs/{id}/export) to a file of the
// test's and returns its path.
func exportTo(t *testing.T, c *protocol.ClientWithResponses, id string) string {
	t.Helper()
	resp, err := c.ExportRunWithResponse(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	file := filepath.Join(t.TempDir(), "run.json")
	require.NoError(t, os.WriteFile(file, resp.Body, 0o600))
	return file
}

// TestReplayAGatewaysExport replays runs that a real gateway ran and exported.
func TestReplayAGatewaysExport(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	var prod atomic.Int64
	app := s.NewApp()
	registerCheckout(app, "checkout", "reserve", "charge", 0, &prod)
	registerCheckout(app, "slow_checkout", "reserve", "charge", time.Hour, &prod)
	s.Sync(t, s.ServeApp(t, app))

	start := func(t *testing.T, function string) string {
		t.Helper()
		resp, err := c.StartRunWithBodyWithResponse(t.Context(), function, &protocol.StartRunParams{},
			"application/json", strings.NewReader(`{"item":"book"}`))
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
		return resp.JSON202.ID
	}
	completed := start(t, "checkout")
	res, err := c.GetRunResultWithResponse(t.Context(), completed, &protocol.GetRunResultParams{Wait: new("30s")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.Equal(t, protocol.RunStatusCompleted, res.JSON200.Status)
	completedFile := exportTo(t, c, completed)

	suspended := start(t, "slow_checkout")
	stack.AwaitStatus(t, c, suspended, protocol.RunStatusSuspended)
	suspendedFile := exportTo(t, c, suspended)

	// local is the code under test, in the test's process.
	local := func(a, b string, sleep time.Duration, ran *atomic.Int64) *functions.App {
		app := newApp(t)
		registerCheckout(app, "checkout", a, b, sleep, ran)
		return app
	}

	t.Run("TheSameCodeReplaysACompletedRunCleanlyRunningNoStep", func(t *testing.T) {
		t.Parallel()
		var ran atomic.Int64
		r := functionstest.Replay(t, local("reserve", "charge", 0, &ran), "checkout", completedFile)
		require.True(t, r.Clean, "%s", r)
		require.Nil(t, r.Divergence)
		require.Equal(t, functionstest.Next{Kind: "completed", Seq: 4}, r.Next)
		require.JSONEq(t, `"shipped book"`, string(*r.Answer.Output))
		require.Zero(t, ran.Load(), "no step function ran in the replay")
	})

	t.Run("StepsReorderedDivergeAtSeqOneNamingBoth", func(t *testing.T) {
		t.Parallel()
		var ran atomic.Int64
		r, err := functionstest.ReplayFile(local("charge", "reserve", 0, &ran), "checkout", completedFile)
		require.NoError(t, err)
		require.False(t, r.Clean)
		require.NotNil(t, r.Divergence, "%+v", r.Answer)
		require.Equal(t, functionstest.Divergence{Seq: 1, Journal: functionstest.Step{Kind: "step", Name: "reserve"},
			Asked: functionstest.Step{Kind: "step", Name: "charge"}, Message: r.Divergence.Message}, *r.Divergence)
		require.Zero(t, ran.Load())
	})

	t.Run("ACompletedRunWhoseCodeNowSleepsDiverges", func(t *testing.T) {
		t.Parallel()
		var ran atomic.Int64
		r, err := functionstest.ReplayFile(local("reserve", "charge", time.Hour, &ran), "checkout", completedFile)
		require.NoError(t, err)
		require.NotNil(t, r.Divergence)
		require.Equal(t, 3, r.Divergence.Seq, "the journal holds ship at 3")
		require.Equal(t, functionstest.Step{Kind: "step", Name: "ship"}, r.Divergence.Journal)
		require.Equal(t, functionstest.Step{Kind: "sleep", Name: "cool off"}, r.Divergence.Asked)
	})

	t.Run("ARunSuspendedInASleepReplaysCleanlyAndWouldWaitForIt", func(t *testing.T) {
		t.Parallel()
		var ran atomic.Int64
		r := functionstest.Replay(t, local("reserve", "charge", time.Hour, &ran), "checkout", suspendedFile)
		require.True(t, r.Clean, "%s", r)
		require.Equal(t, "wait", r.Next.Kind)
		require.Equal(t, 3, r.Next.Seq)
		require.Equal(t, functionstest.Step{Kind: "sleep", Name: "cool off"}, r.Next.Step)
		require.Zero(t, ran.Load())
	})

	t.Run("ARunSuspendedInASleepWhoseCodeNoLongerSleepsDiverges", func(t *testing.T) {
		t.Parallel()
		var ran atomic.Int64
		r, err := functionstest.ReplayFile(local("reserve", "charge", 0, &ran), "checkout", suspendedFile)
		require.NoError(t, err)
		require.NotNil(t, r.Divergence, "%s", r)
		require.Equal(t, functionstest.Divergence{Seq: 3, Journal: functionstest.Step{Kind: "sleep", Name: "cool off"},
			Asked: functionstest.Step{Kind: "step", Name: "ship"}}, *r.Divergence)
		require.Equal(t, `seq 3: the journal holds sleep "cool off" but the code asks for step "ship"`, r.Divergence.String())
		require.Zero(t, ran.Load(), "ship did not run")
	})

	require.Equal(t, int64(3+2), prod.Load(), "the gateway's runs ran their steps once each")
}
