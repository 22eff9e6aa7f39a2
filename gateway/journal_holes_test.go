package gateway_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// TestAnswerWithHoles: without the SDK, a function that checkpointed out of order within
// a window cannot complete or fail its run while a seq below its journal's last is
// missing: the answer is a bad_answer naming the missing seqs, and the run fails at once,
// without a retry, as for any bad answer; the entries of its steps are kept. They count,
// and a suspended answer may still leave holes within its await's window.
func TestAnswerWithHoles(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	for _, tc := range []struct {
		name, checkpoint, answer string
		message                  string   // of the bad_answer
		journal                  []string // names, after the run failed
	}{
		{
			"Completed", `{"seq":3,"kind":"step","name":"c","output":3,"window":3}`,
			`{"status":"completed","output":"done"}`,
			`the answer is "completed", but seqs 1, 2 are not journaled below seq 3, the journal's last`, []string{"c"},
		},
		{
			"Failed", `{"seq":2,"kind":"step","name":"b","output":2,"window":2}`,
			`{"status":"failed","error":{"type":"oops","message":"gave up"}}`,
			`the answer is "failed" (error oops "gave up"), but seq 1 is not journaled below seq 2, the journal's last`, []string{"b"},
		},
		{
			// Ten missing seqs are named, and how many more.
			"ManyHoles", `{"seq":12,"kind":"step","name":"l","output":12,"window":12}`,
			`{"status":"completed","output":"done"}`,
			`seqs 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 1 more are not journaled below seq 12`, []string{"l"},
		},
		{
			// The answer's last step follows the journal, but the holes below stay.
			"CompletedWithNextStep", `{"seq":3,"kind":"step","name":"c","output":3,"window":3}`,
			`{"status":"completed","output":"done","steps":[{"seq":4,"kind":"step","name":"d","output":4}]}`,
			`seqs 1, 2 are not journaled below seq 4`, []string{"c", "d"},
		},
		{
			// Its steps fill one hole of two.
			"CompletedFillingOneHole", `{"seq":3,"kind":"step","name":"c","output":3,"window":3}`,
			`{"status":"completed","output":"done","steps":[{"seq":1,"kind":"step","name":"a","output":1,"window":3}]}`,
			`seq 2 is not journaled below seq 3`, []string{"a", "c"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkpointed := make(chan int, 1)
			f := &rawFunction{answer: func(_ *protocol.InvocationRequest, checkpoint func(string) (int, string)) string {
				code, _ := checkpoint(tc.checkpoint)
				checkpointed <- code
				return tc.answer
			}}
			register(t, s, c, "holes."+tc.name, f, fastRetries)
			resp := startRun(t, c, "holes."+tc.name, `{}`, nil)
			require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
			require.Equal(t, http.StatusOK, <-checkpointed, "the checkpoint within its window is journaled")
			res := *resp.JSON200
			require.Equal(t, protocol.RunStatusFailed, res.Status, string(resp.Body))
			require.Equal(t, "bad_answer", res.Error.Type, res.Error.Message)
			require.Contains(t, res.Error.Message, tc.message)
			require.EqualValues(t, 1, f.calls.Load(), "not retried")
			run := getRun(t, c, res.ID)
			require.Equal(t, 1, run.Invocations)
			require.Equal(t, 1, run.FailedInvocations, "a bad answer is a failed invocation")
			require.Equal(t, tc.journal, entryNames(run.Journal))
		})
	}

	// Steps that fill every hole let the run complete; so do checkpoints after a
	// suspension that left a hole within its await's window.
	t.Run("StepsFillTheHoles", func(t *testing.T) {
		t.Parallel()
		f := &rawFunction{answer: func(_ *protocol.InvocationRequest, checkpoint func(string) (int, string)) string {
			checkpoint(`{"seq":3,"kind":"step","name":"c","output":3,"window":3}`)
			return `{"status":"completed","output":"done","steps":[
				{"seq":1,"kind":"step","name":"a","output":1,"window":3},
				{"seq":2,"kind":"step","name":"b","output":2,"window":2}]}`
		}}
		register(t, s, c, "holes.filled", f, fastRetries)
		res := mustComplete(t, c, "holes.filled", `{}`)
		require.Equal(t, []string{"a", "b", "c"}, entryNames(getRun(t, c, res.ID).Journal))
	})
	t.Run("SuspendedThenFilled", func(t *testing.T) {
		t.Parallel()
		f := &rawFunction{}
		f.answer = func(_ *protocol.InvocationRequest, checkpoint func(string) (int, string)) string {
			if f.calls.Load() == 1 {
				// Seq 1 is a step still running in parallel: seq 3 sleeps past its hole.
				checkpoint(`{"seq":2,"kind":"step","name":"b","output":2,"window":2}`)
				return `{"status":"suspended","await":{"type":"sleep","seq":3,"name":"nap","duration":"1ms","window":3}}`
			}
			checkpoint(`{"seq":1,"kind":"step","name":"a","output":1,"window":3}`)
			return `{"status":"completed","output":"done"}`
		}
		register(t, s, c, "holes.suspended", f, fastRetries)
		res := mustComplete(t, c, "holes.suspended", `{}`)
		require.Equal(t, []string{"a", "b", "nap"}, entryNames(getRun(t, c, res.ID).Journal))
		require.EqualValues(t, 2, f.calls.Load())
	})
}
