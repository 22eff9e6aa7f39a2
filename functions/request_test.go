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

// TestRequestReply: ReceiveRequest is a receive of the topic "request:<name>" whose
// message is the request, and Reply and ReplyError checkpoint an entry of kind reply
// named after the request's id, once: a replay checkpoints nothing.
func TestRequestReply(t *testing.T) {
	t.Parallel()
	const request = `{"message":{"id":"rq-1","topic":"request:price","data":{"qty":2},
		"identity":{"subject":"ops","tenant":"acme","roles":[]},"sent_at":"2026-12-01T01:02:03.5+00:00"}}`

	t.Run("ReplyAnswersTheRequestOnce", func(t *testing.T) {
		t.Parallel()
		var got step.Request[struct{ Qty int }]
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "f", func(ctx context.Context, _ empty) (string, error) {
				r, err := step.ReceiveRequest[struct{ Qty int }](ctx, "price", step.Timeout(time.Hour)).Get()
				if err != nil {
					return "", err
				}
				got = r
				return "replied", step.Reply(ctx, r.ID, map[string]int{"total": 3 * r.Data.Qty})
			})
		})
		var awaited protocol.Await
		g.OnReceive(func(_ string, aw protocol.Await) json.RawMessage {
			awaited = aw
			return json.RawMessage(request)
		})
		r, _ := g.Run(url+"/f", "run-1", "f", `{}`, 1)
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.Equal(t, protocol.AwaitTypeReceive, awaited.Type)
		require.Equal(t, "request:price", awaited.Name)
		require.Equal(t, "request:price", *awaited.Topic)
		require.Equal(t, "1h0m0s", *awaited.Timeout)
		require.Equal(t, "rq-1", got.ID)
		require.Equal(t, "price", got.Name)
		require.Equal(t, 2, got.Data.Qty)
		require.Equal(t, "ops", got.Sender.Subject)
		require.True(t, got.SentAt.Equal(time.Date(2026, 12, 1, 1, 2, 3, 5e8, time.UTC)), "%v", got.SentAt)

		j := g.Journal("run-1")
		require.Len(t, j, 2)
		require.Equal(t, protocol.JournalEntry{Seq: 2, Kind: protocol.EntryKindReply, Name: "rq-1"},
			protocol.JournalEntry{Seq: j[1].Seq, Kind: j[1].Kind, Name: j[1].Name})
		require.JSONEq(t, `{"total":6}`, string(*j[1].Output))
		require.Nil(t, j[1].Error)

		// Replayed, the reply is not checkpointed again.
		g.OnCheckpoint(func(string, protocol.JournalEntry) (int, string) {
			return http.StatusBadRequest, `{"status":400,"detail":"no checkpoint expected"}`
		})
		r = g.Invoke(url+"/f", g.Request("run-1", "f", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
	})

	t.Run("ReplyErrorSendsTheErrorsTypeAndMessage", func(t *testing.T) {
		t.Parallel()
		replyTo := func(ctx context.Context, err error) error {
			r, rerr := step.ReceiveRequest[json.RawMessage](ctx, "price").Get()
			if rerr != nil {
				return rerr
			}
			return step.ReplyError(ctx, r.ID, err)
		}
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "plain", func(ctx context.Context, _ empty) (empty, error) {
				return empty{}, replyTo(ctx, errors.New("out of stock"))
			})
			functions.Register(app, "typed", func(ctx context.Context, _ empty) (empty, error) {
				return empty{}, replyTo(ctx, &step.Error{Type: "sold_out", Message: "sold out"})
			})
		})
		g.OnReceive(func(string, protocol.Await) json.RawMessage { return json.RawMessage(request) })
		for fn, want := range map[string]protocol.ErrorInfo{
			"plain": {Type: step.ErrorTypeReply, Message: "out of stock"},
			"typed": {Type: "sold_out", Message: "sold out"},
		} {
			r, _ := g.Run(url+"/"+fn, "run-"+fn, fn, `{}`, 1)
			require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
			j := g.Journal("run-" + fn)
			require.Len(t, j, 2)
			require.Equal(t, protocol.EntryKindReply, j[1].Kind)
			require.Equal(t, "rq-1", j[1].Name)
			require.Nil(t, j[1].Output)
			require.Equal(t, want.Type, j[1].Error.Type)
			require.Equal(t, want.Message, j[1].Error.Message)
		}
	})

	t.Run("ARefusedReplyFailsTheRunSayingWhy", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "f", func(ctx context.Context, _ empty) (empty, error) {
				return empty{}, step.Reply(ctx, "rq-9", "hi")
			})
		})
		g.OnCheckpoint(func(string, protocol.JournalEntry) (int, string) {
			return http.StatusBadRequest, `{"status":400,"detail":"run run-1 has no request with id \"rq-9\""}`
		})
		r := g.Invoke(url+"/f", g.Request("run-1", "f", `{}`))
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
		require.Equal(t, protocol.AnswerStatusFailed, r.Answer.Status, string(r.Body))
		require.False(t, *r.Answer.Error.Retryable)
		require.Contains(t, r.Answer.Error.Message, `has no request with id "rq-9"`)
	})

	t.Run("BadArgumentsTakeNoSeq", func(t *testing.T) {
		t.Parallel()
		var errs []error
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "f", func(ctx context.Context, _ empty) (string, error) {
				errs = []error{
					step.Reply(ctx, "rq-1", func() {}),
					step.ReplyError(ctx, "rq-1", nil),
					step.Reply(ctx, "", "hi"),
				}
				_, err := step.ReceiveRequest[string](ctx, "").Get()
				errs = append(errs, err)
				_, err = step.ReceiveRequest[string](ctx, "price", step.Lazy()).Get()
				errs = append(errs, err)
				return step.Run(ctx, "next", func(ctx context.Context) (string, error) { return "ok", nil })
			})
		})
		r := g.Invoke(url+"/f", g.Request("run-1", "f", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		for i, err := range errs {
			require.True(t, step.IsNonRetryable(err), "%d: %v", i, err)
		}
		require.Contains(t, errs[4].Error(), "option Lazy does not apply to ReceiveRequest")
		require.Equal(t, "next", g.Journal("run-1")[0].Name)
	})

	t.Run("WaitFirstOfARequestAndATimer", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "f", func(ctx context.Context, _ empty) (string, error) {
				req := step.ReceiveRequest[json.RawMessage](ctx, "price")
				i, err := step.WaitFirst(ctx, "first", req, step.After(ctx, "late", time.Hour))
				if err != nil || i != 0 {
					return "timer", err
				}
				r, err := req.Get()
				if err != nil {
					return "", err
				}
				return r.ID, step.Reply(ctx, r.ID, "ok")
			})
		})
		var awaited protocol.Await
		g.OnWaitEvent(func(_ string, aw protocol.Await) json.RawMessage {
			awaited = aw
			return json.RawMessage(`{"index":0,"kind":"receive","output":` + request + `}`)
		})
		r, _ := g.Run(url+"/f", "run-1", "f", `{}`, 1)
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.JSONEq(t, `"rq-1"`, string(*r.Answer.Output))
		require.Equal(t, protocol.AwaitTypeWaitAny, awaited.Type)
		require.Equal(t, "request:price", *(*awaited.Of)[0].Topic)
		j := g.Journal("run-1")
		require.Len(t, j, 2)
		require.Equal(t, protocol.EntryKindReply, j[1].Kind)
	})
}
