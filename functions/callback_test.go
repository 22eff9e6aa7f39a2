package functions_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol"
)

func TestCallback(t *testing.T) {
	t.Parallel()

	type approval struct {
		OK bool `json:"ok"`
	}
	type outcome struct {
		URL      string `json:"url"`
		OK       bool   `json:"ok"`
		TimedOut bool   `json:"timed_out"`
		Rejected string `json:"rejected"`
		By       string `json:"by"`
	}
	register := func(app *functions.App, sent *[]string) {
		functions.Register(app, "approve", func(ctx context.Context, _ empty) (outcome, error) {
			cb, err := step.Callback[approval](ctx, "approval", step.Timeout(48*time.Hour))
			if err != nil {
				return outcome{}, err
			}
			if _, err := step.Run(ctx, "notify", func(context.Context) (string, error) {
				*sent = append(*sent, cb.URL)
				return cb.URL, nil
			}); err != nil {
				return outcome{}, err
			}
			res, err := cb.Result().Get()
			var se *step.Error
			if errors.As(err, &se) {
				return outcome{URL: cb.URL, Rejected: se.Type + ": " + se.Message, By: cb.Resolver}, nil
			}
			if errors.Is(err, step.ErrTimedOut) {
				return outcome{URL: cb.URL, TimedOut: true}, nil
			}
			if err != nil {
				return outcome{}, err
			}
			by := cb.Resolver
			if cb.ResolvedBy != nil {
				by += ":" + cb.ResolvedBy.Subject
			}
			return outcome{URL: cb.URL, OK: res.OK, By: by}, nil
		})
	}

	t.Run("TheGatewayMakesTheTokenAndTheAwaitReturnsTheData", func(t *testing.T) {
		t.Parallel()
		var sent []string
		g, url := serve(t, func(app *functions.App) { register(app, &sent) })
		var awaited protocol.Await
		g.OnCallback(func(_ string, aw protocol.Await) json.RawMessage {
			awaited = aw
			return json.RawMessage(`{"data":{"ok":true},"resolver":"identity","resolved_by":{"subject":"ada","tenant":"acme","roles":[]},"resolved_at":"2026-12-01T10:00:00+00:00"}`)
		})
		r, invocations := g.Run(url+"/approve", "run-1", "approve", `{}`, 1)
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.Equal(t, 2, invocations)
		var got outcome
		require.NoError(t, json.Unmarshal(*r.Answer.Output, &got))
		require.Equal(t, outcome{URL: sent[0], OK: true, By: "identity:ada"}, got)
		require.Len(t, sent, 1, "the notify step ran once")
		require.True(t, strings.HasSuffix(sent[0], "/v1/callbacks/cb-run-1-1"), sent[0])

		j := g.Journal("run-1")
		require.Equal(t, protocol.EntryKindCallback, j[0].Kind)
		require.Equal(t, protocol.AwaitTypeAwaitCallback, awaited.Type)
		require.Equal(t, 3, awaited.Seq)
		require.Equal(t, "approval", awaited.Name)
		require.Equal(t, 1, *awaited.CallbackSeq)
		require.Nil(t, awaited.Timeout, "the wait ends when the callback expires: its Timeout option, journaled with it")
	})

	t.Run("ARejectionIsAStepError", func(t *testing.T) {
		t.Parallel()
		var sent []string
		g, url := serve(t, func(app *functions.App) { register(app, &sent) })
		g.OnCallback(func(string, protocol.Await) json.RawMessage {
			return json.RawMessage(`{"error":{"type":"rejected","message":"no"},"resolver":"token","resolved_at":"2026-12-01T10:00:00+00:00"}`)
		})
		r, _ := g.Run(url+"/approve", "run-1", "approve", `{}`, 1)
		var got outcome
		require.NoError(t, json.Unmarshal(*r.Answer.Output, &got))
		require.Equal(t, "rejected: no", got.Rejected)
		require.Equal(t, step.ResolverToken, got.By)
	})

	t.Run("ATimeout", func(t *testing.T) {
		t.Parallel()
		var sent []string
		g, url := serve(t, func(app *functions.App) { register(app, &sent) })
		r, _ := g.Run(url+"/approve", "run-1", "approve", `{}`, 1)
		var got outcome
		require.NoError(t, json.Unmarshal(*r.Answer.Output, &got))
		require.True(t, got.TimedOut)
	})

	t.Run("ACallbackWithoutATokenHaltsTheInvocation", func(t *testing.T) {
		t.Parallel()
		var sent []string
		g, url := serve(t, func(app *functions.App) { register(app, &sent) })
		g.OnCheckpoint(func(_ string, e protocol.JournalEntry) (int, string) {
			return http.StatusOK, `{"seq":1}` // an old gateway: no output
		})
		r := g.Invoke(url+"/approve", g.Request("run-1", "approve", `{}`))
		require.Equal(t, http.StatusInternalServerError, r.Code, string(r.Body))
		require.Contains(t, r.Error.Message, "the gateway gave no token")
		require.Empty(t, sent)
	})
}
