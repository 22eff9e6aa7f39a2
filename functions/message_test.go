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

const target = "0193a3c2-0000-7000-8000-000000000001"

func TestSendAndReceive(t *testing.T) {
	t.Parallel()

	t.Run("SendIsCheckpointedOnceAndReplayed", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "f", func(ctx context.Context, _ empty) (empty, error) {
				return empty{}, step.Send(ctx, target, "approval", map[string]bool{"ok": true})
			})
		})
		r := g.Invoke(url+"/f", g.Request("run-1", "f", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		j := g.Journal("run-1")
		require.Len(t, j, 1)
		require.Equal(t, protocol.EntryKindSend, j[0].Kind)
		require.Equal(t, "approval", j[0].Name)
		require.JSONEq(t, `{"run_id":"`+target+`","topic":"approval","data":{"ok":true},"id":"run-1:1"}`, string(*j[0].Output))

		g.OnCheckpoint(func(string, protocol.JournalEntry) (int, string) {
			return http.StatusInternalServerError, "no checkpoint expected"
		})
		r = g.Invoke(url+"/f", g.Request("run-1", "f", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
	})

	t.Run("ARefusedSendIsAnErrorTheFunctionHandles", func(t *testing.T) {
		t.Parallel()
		var sendErr error
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "f", func(ctx context.Context, _ empty) (string, error) {
				sendErr = step.Send(ctx, target, "approval", nil)
				return "went on", nil
			})
		})
		g.OnCheckpoint(func(_ string, e protocol.JournalEntry) (int, string) {
			return http.StatusOK, `{"seq":1,"error":{"type":"not_found","message":"run ` + target + ` is not a run of tenant acme"}}`
		})
		r := g.Invoke(url+"/f", g.Request("run-1", "f", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		var se *step.Error
		require.ErrorAs(t, sendErr, &se)
		require.Equal(t, step.ErrorTypeNotFound, se.Type)

		// Replayed from the journal, the error is the same.
		sendErr = nil
		e := protocol.JournalEntry{Seq: 1, Kind: protocol.EntryKindSend, Name: "approval",
			Error: &protocol.ErrorInfo{Type: step.ErrorTypeFinished, Message: "finished"}}
		code, _ := g.Append("run-2", e)
		require.Equal(t, http.StatusOK, code)
		r = g.Invoke(url+"/f", g.Request("run-2", "f", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.ErrorAs(t, sendErr, &se)
		require.Equal(t, step.ErrorTypeFinished, se.Type)
	})

	t.Run("ABadRunIDTakesNoSeq", func(t *testing.T) {
		t.Parallel()
		var sendErr error
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "f", func(ctx context.Context, _ empty) (string, error) {
				sendErr = step.Send(ctx, "not-a-run", "approval", nil)
				return step.Run(ctx, "next", func(ctx context.Context) (string, error) { return "ok", nil })
			})
		})
		r := g.Invoke(url+"/f", g.Request("run-1", "f", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.True(t, step.IsNonRetryable(sendErr), "%v", sendErr)
		require.Equal(t, "next", g.Journal("run-1")[0].Name)
	})

	t.Run("ReceiveSuspendsThenReturnsTheMessage", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "f", func(ctx context.Context, _ empty) (string, error) {
				got, err := step.Receive[map[string]string](ctx, "approval", step.Timeout(time.Hour)).Get()
				if err != nil {
					return "", err
				}
				return got.Data["by"] + " via " + got.Sender.Subject + " from " + got.SenderRun, nil
			})
		})
		var awaited protocol.Await
		g.OnReceive(func(_ string, aw protocol.Await) json.RawMessage {
			awaited = aw
			return json.RawMessage(`{"message":{"id":"m1","topic":"approval","data":{"by":"ada"},
				"identity":{"subject":"ops","tenant":"acme","roles":[]},"source_run_id":"r0","sent_at":"2026-12-01T01:02:03.5+00:00"}}`)
		})
		r, _ := g.Run(url+"/f", "run-1", "f", `{}`, 1)
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.JSONEq(t, `"ada via ops from r0"`, string(*r.Answer.Output))
		require.Equal(t, "approval", *awaited.Topic)
		require.Equal(t, "1h0m0s", *awaited.Timeout)
	})

	t.Run("ReceiveTimesOut", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "f", func(ctx context.Context, _ empty) (string, error) {
				_, err := step.Receive[string](ctx, "approval").Get()
				if !errors.Is(err, step.ErrTimedOut) {
					return "received", err
				}
				if !step.IsNonRetryable(err) {
					return "", errors.New("a time-out must be non-retryable")
				}
				return "timed out", nil
			})
		})
		r, _ := g.Run(url+"/f", "run-1", "f", `{}`, 1)
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.JSONEq(t, `"timed out"`, string(*r.Answer.Output))
	})
}
