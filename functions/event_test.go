package functions_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol"
)

func TestSendEvent(t *testing.T) {
	t.Parallel()

	t.Run("CheckpointedOnceAndReplayed", func(t *testing.T) {
		t.Parallel()
		passes := 0
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "signup", func(ctx context.Context, in map[string]any) (string, error) {
				if err := step.SendEvent(ctx, "user.signup", in); err != nil {
					return "", err
				}
				passes++
				return step.Run(ctx, "after", func(ctx context.Context) (string, error) { return "done", nil })
			}, functions.OnEvent("a", "b"), functions.OnEvent("c"))
		})

		r := g.Invoke(url+"/signup", g.Request("run-1", "signup", `{"email":"ada@example.com"}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		j := g.Journal("run-1")
		require.Len(t, j, 2)
		require.Equal(t, protocol.EntryKindEvent, j[0].Kind)
		require.Equal(t, "user.signup", j[0].Name)
		require.JSONEq(t, `{"name":"user.signup","data":{"email":"ada@example.com"},"id":"run-1:1"}`, string(*j[0].Output))

		// A new invocation replays the entry: nothing is checkpointed again.
		g.OnCheckpoint(func(string, protocol.JournalEntry) (int, string) {
			return http.StatusInternalServerError, "no checkpoint expected"
		})
		r = g.Invoke(url+"/signup", g.Request("run-1", "signup", `{"email":"ada@example.com"}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.Equal(t, 2, passes)

		m := g.Get(url + "/")
		require.Equal(t, http.StatusOK, m.Code)
		require.Contains(t, string(m.Body), `"triggers":[{"event":"a"},{"event":"b"},{"event":"c"}]`)
	})

	t.Run("AStepInTheJournalIsNondeterminism", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "f", func(ctx context.Context, _ empty) (empty, error) {
				return empty{}, step.SendEvent(ctx, "ping", nil)
			})
		})
		code, _ := g.Append("run-1", entry(1, "ping", `1`))
		require.Equal(t, http.StatusOK, code)
		r := g.Invoke(url+"/f", g.Request("run-1", "f", `{}`))
		require.Equal(t, protocol.AnswerStatusFailed, r.Answer.Status, string(r.Body))
		require.Equal(t, "nondeterminism", r.Answer.Error.Type)
	})

	t.Run("DataThatDoesNotEncodeTakesNoSeq", func(t *testing.T) {
		t.Parallel()
		var sendErr error
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "f", func(ctx context.Context, _ empty) (string, error) {
				sendErr = step.SendEvent(ctx, "ping", func() {})
				return step.Run(ctx, "next", func(ctx context.Context) (string, error) { return "ok", nil })
			})
		})
		r := g.Invoke(url+"/f", g.Request("run-1", "f", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.True(t, step.IsNonRetryable(sendErr), "%v", sendErr)
		require.Equal(t, 1, g.Journal("run-1")[0].Seq)
	})

	t.Run("OutsideAnInvocation", func(t *testing.T) {
		t.Parallel()
		require.ErrorIs(t, step.SendEvent(t.Context(), "ping", 1), step.ErrNoInvocation)
	})
}
