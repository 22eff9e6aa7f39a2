package functions_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol"
)

func chunkStrings(t *testing.T, chunks []json.RawMessage) []string {
	t.Helper()
	out := make([]string, len(chunks))
	for i, c := range chunks {
		require.NoError(t, json.Unmarshal(c, &out[i]))
	}
	return out
}

func TestValuesAndStreams(t *testing.T) {
	t.Parallel()

	t.Run("SetValueIsAnEntryNotSentAgainOnReplay", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "progress", func(ctx context.Context, _ empty) (string, error) {
				if err := step.SetValue(ctx, "progress", 50); err != nil {
					return "", err
				}
				if err := step.Sleep(ctx, "pause", time.Millisecond); err != nil {
					return "", err
				}
				return "done", step.SetValue(ctx, "progress", 100)
			})
		})
		r, invocations := g.Run(url+"/progress", "run-1", "progress", `{}`, 1)
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.Equal(t, 2, invocations)
		j := g.Journal("run-1")
		require.Len(t, j, 3, "the replay sent the first value again: %+v", j)
		require.Equal(t, protocol.EntryKindValue, j[0].Kind)
		require.Equal(t, "progress", j[0].Name)
		require.JSONEq(t, `50`, string(*j[0].Output))
		require.JSONEq(t, `100`, string(*j[2].Output))
	})

	t.Run("SetValueRefusesABadKeyAndNests", func(t *testing.T) {
		t.Parallel()
		var badKey, nested error
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "bad", func(ctx context.Context, _ empty) (int, error) {
				badKey = step.SetValue(ctx, "a b", 1)
				_, err := step.Run(ctx, "s", func(ctx context.Context) (int, error) {
					nested = step.SetValue(ctx, "k", 1)
					return 1, nil
				})
				return 0, err
			})
		})
		r := g.Invoke(url+"/bad", g.Request("run-1", "bad", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.ErrorContains(t, badKey, "value key")
		require.True(t, step.IsNonRetryable(badKey))
		require.ErrorIs(t, nested, step.ErrNested)
	})

	t.Run("ChunksAreNotWrittenTwiceByReplays", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "llm", func(ctx context.Context, _ empty) (int, error) {
				out, err := step.Stream(ctx, "tokens")
				if err != nil {
					return 0, err
				}
				if _, err := out.Write([]byte("thinking")); err != nil { // between steps: replayed
					return 0, err
				}
				_, err = step.Run(ctx, "answer", func(ctx context.Context) (int, error) {
					for _, tok := range []string{"Hel", "lo"} {
						if err := out.WriteString(tok); err != nil {
							return 0, err
						}
					}
					if step.Attempt(ctx) == 1 {
						return 0, errors.New("model overloaded")
					}
					return 2, nil
				})
				if err != nil {
					return 0, err
				}
				if err := step.Sleep(ctx, "pause", time.Millisecond); err != nil {
					return 0, err
				}
				if err := out.WriteString("!"); err != nil {
					return 0, err
				}
				return 0, out.Close()
			})
		})
		r, invocations := g.Run(url+"/llm", "run-1", "llm", `{}`, 1)
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.Equal(t, 3, invocations, "a retry and a sleep")
		chunks, closed := g.Stream("run-1", "tokens")
		require.True(t, closed)
		// The failed attempt's chunks, then the retry's; "thinking" once however many
		// replays; nothing of the finished step again after the sleep.
		require.Equal(t, []string{"thinking", "Hel", "lo", "Hel", "lo", "!"}, chunkStrings(t, chunks))
	})

	t.Run("RefusedWriteIsAnErrorNotAStop", func(t *testing.T) {
		t.Parallel()
		var writeErr error
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "closed", func(ctx context.Context, _ empty) (string, error) {
				out, err := step.Stream(ctx, "log")
				if err != nil {
					return "", err
				}
				if err := out.Close(); err != nil {
					return "", err
				}
				writeErr = out.WriteString("late")
				return "went on", nil
			})
		})
		r := g.Invoke(url+"/closed", g.Request("run-1", "closed", `{}`))
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.ErrorIs(t, writeErr, step.ErrStreamRefused)
		require.ErrorContains(t, writeErr, "closed")
	})

	t.Run("StreamOutsideAnInvocation", func(t *testing.T) {
		t.Parallel()
		_, err := step.Stream(t.Context(), "k")
		require.ErrorIs(t, err, step.ErrNoInvocation)
		require.ErrorIs(t, step.SetValue(t.Context(), "k", 1), step.ErrNoInvocation)
	})
}
