package invocation

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/protocol"
)

// refuse is a transport that fails the test on any request, which a replay-only
// invocation never sends, and answers it 400 (which no request retries).
type refuse struct{ t *testing.T }

func (r refuse) RoundTrip(req *http.Request) (*http.Response, error) {
	r.t.Errorf("a replay-only invocation sent %s %s", req.Method, req.URL)
	return &http.Response{StatusCode: http.StatusBadRequest, Body: io.NopCloser(strings.NewReader("{}")), Header: http.Header{}, Request: req}, nil
}

func replayOnly(t *testing.T, on bool) *State {
	req := &protocol.InvocationRequest{
		Journal:    []protocol.JournalEntry{{Seq: 1, Kind: protocol.EntryKindSleep, Name: "nap"}},
		Deadline:   new(time.Now().Add(24 * time.Hour)),
		Checkpoint: protocol.Checkpoint{URL: "http://127.0.0.1:1/v1/runs/r/checkpoint", Token: "tok"},
		ReplayOnly: new(on),
	}
	ctx, cancel := context.WithCancelCause(t.Context())
	t.Cleanup(func() { cancel(nil) })
	return New(ctx, req, &http.Client{Transport: refuse{t}}, cancel)
}

// TestReplayOnlyGuards checks what a replay-only State does on the paths that the code
// past the journal never reaches (it halts first), as a guard: a checkpoint halts with
// next, a claim with a retryable failure, a stream write is skipped, and no sleep is
// waited out in the process (a journaled one whose end is ahead returns at once).
func TestReplayOnlyGuards(t *testing.T) {
	t.Parallel()

	t.Run("Checkpoint", func(t *testing.T) {
		s := replayOnly(t, true)
		stop, panicked, _ := s.Call(func() {
			_ = s.Checkpoint(&protocol.JournalEntry{Seq: 2, Kind: protocol.EntryKindValue, Name: "v"})
		})
		require.Nil(t, panicked)
		require.True(t, stop.IsReplayed())
		require.Equal(t, &protocol.ReplayStep{Seq: 2, Kind: "value", Name: "v"}, stop.Answer.Replay.Next)
	})

	t.Run("CheckOwner", func(t *testing.T) {
		s := replayOnly(t, true)
		stop, panicked, _ := s.Call(func() { _ = s.CheckOwner() })
		require.Nil(t, panicked)
		require.NotNil(t, stop.Error)
		require.Equal(t, "replay", stop.Error.Type)
	})

	t.Run("WriteStream", func(t *testing.T) {
		s := replayOnly(t, true)
		require.NoError(t, s.WriteStream(&protocol.StreamWrite{Key: "log", Seq: 1, Chunks: []protocol.AnyJSON{protocol.AnyJSON(`1`)}}))
		require.Nil(t, s.Stopped())
	})

	t.Run("SleepInProcess", func(t *testing.T) {
		s := replayOnly(t, true)
		s.SetSleepInProcess(time.Hour)
		require.False(t, s.SleepInProcess(time.Millisecond))

		normal := replayOnly(t, false)
		normal.SetSleepInProcess(time.Hour)
		require.True(t, normal.SleepInProcess(time.Millisecond), "the same sleep of a normal invocation is waited out in the process")
	})
}
