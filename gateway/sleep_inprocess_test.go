package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// TestSleepInProcess: a function that waits out a short sleep in its process
// (functions.SleepInProcess) is invoked once, not twice; the sleep is journaled with its
// wake time, the run stays running meanwhile, and the step after it starts at that time
// or later. A sleep longer than the limit still suspends the run.
func TestSleepInProcess(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	var calls atomic.Int32
	asleep := make(chan string, 3)
	app := s.NewApp()
	functions.Register(app, "napper", func(ctx context.Context, in struct{ MS int }) (string, error) {
		calls.Add(1)
		if _, err := step.Run(ctx, "before", func(context.Context) (int, error) { return 1, nil }); err != nil {
			return "", err
		}
		go func() { asleep <- functions.RunFrom(ctx).ID }()
		if err := step.Sleep(ctx, "nap", time.Duration(in.MS)*time.Millisecond); err != nil {
			return "", err
		}
		return step.Run(ctx, "after", func(context.Context) (string, error) { return "rested", nil })
	}, functions.SleepInProcess(time.Second), functions.InvocationTimeout(30*time.Second))
	s.Sync(t, s.ServeApp(t, app))

	resp := startRun(t, c, "napper", `{"MS":400}`, &protocol.StartRunParams{Wait: ptr("20s")})
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	require.Equal(t, protocol.RunStatusCompleted, resp.JSON200.Status)
	require.Equal(t, int32(1), calls.Load(), "one invocation: the sleep was waited out in the process")
	run := getRun(t, c, resp.JSON200.ID)
	require.Len(t, run.Journal, 3)
	nap, after := run.Journal[1], run.Journal[2]
	require.Equal(t, protocol.EntryKindSleep, nap.Kind)
	require.NotNil(t, nap.Until, "journaled with its wake time")
	require.NotNil(t, after.StartedAt)
	require.False(t, after.StartedAt.Before(*nap.Until), "the step after the sleep started at %s, before its end %s", after.StartedAt, nap.Until)
	require.GreaterOrEqual(t, nap.Until.Sub(*run.Journal[0].FinishedAt), 350*time.Millisecond, "the sleep lasted its duration")

	// While it sleeps, the run is running (its invocation is in flight).
	resp2 := startRun(t, c, "napper", `{"MS":900}`, &protocol.StartRunParams{})
	require.Equal(t, http.StatusAccepted, resp2.StatusCode(), string(resp2.Body))
	<-asleep
	<-asleep
	require.Equal(t, protocol.RunStatusRunning, getRun(t, c, resp2.JSON202.ID).Status)
	require.Equal(t, protocol.RunStatusCompleted, awaitRunResult(t, c, resp2.JSON202.ID).Status)

	// Longer than the limit: the run suspends, and is invoked again after the sleep.
	calls.Store(0)
	long := startRun(t, c, "napper", `{"MS":1500}`, &protocol.StartRunParams{Wait: ptr("20s")})
	require.Equal(t, protocol.RunStatusCompleted, long.JSON200.Status, string(long.Body))
	require.Equal(t, int32(2), calls.Load(), "a sleep past the limit suspends the run")
}

// TestSleepInProcessSurvivesItsProcess: a function that checkpoints a sleep and then
// dies (its connection dropped mid-sleep) is not called again before the sleep's end:
// the gateway's retry of the failed invocation waits for the journaled wake time, and
// the run then completes.
func TestSleepInProcessSurvivesItsProcess(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	var until atomic.Pointer[time.Time]
	var again atomic.Pointer[time.Time]
	f := &rawFunction{answer: func(req *protocol.InvocationRequest, checkpoint func(string) (int, string)) string {
		if len(req.Journal) == 0 {
			code, body := checkpoint(`{"seq":1,"kind":"sleep","name":"nap","output":{"duration":"1500ms"}}`)
			if code != http.StatusOK {
				return fmt.Sprintf(`{"status":"failed","error":{"type":"test","message":%q}}`, body)
			}
			var ack protocol.CheckpointAck
			if err := json.Unmarshal([]byte(body), &ack); err != nil || ack.Until == nil {
				return `{"status":"failed","error":{"type":"test","message":"no until"}}`
			}
			until.Store(ack.Until)
			panic(http.ErrAbortHandler) // the process dies mid-sleep: the connection drops
		}
		now := time.Now()
		again.Store(&now)
		return `{"status":"completed","output":"woke"}`
	}}
	register(t, s, c, "dier", f, fastRetries)
	res := mustComplete(t, c, "dier", `{}`)
	require.JSONEq(t, `"woke"`, string(*res.Output))
	require.NotNil(t, until.Load())
	require.False(t, again.Load().Before(*until.Load()), "called again at %s, before the sleep's end %s", again.Load(), until.Load())
	run := getRun(t, c, res.ID)
	require.Equal(t, protocol.EntryKindSleep, run.Journal[0].Kind)
	require.Equal(t, until.Load().UTC(), run.Journal[0].Until.UTC())
}
