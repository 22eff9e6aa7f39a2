package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// invocationRecorder serves an app and keeps the last invocation request the gateway
// sent for each run, as the function received it.
type invocationRecorder struct {
	app  http.Handler
	mu   sync.Mutex
	last map[string]protocol.InvocationRequest
}

func (r *invocationRecorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method == http.MethodPost {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var inv protocol.InvocationRequest
		if json.Unmarshal(body, &inv) == nil && inv.Run.ID != "" {
			r.mu.Lock()
			r.last[inv.Run.ID] = inv
			r.mu.Unlock()
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	r.app.ServeHTTP(w, req)
}

func (r *invocationRecorder) lastOf(id string) (protocol.InvocationRequest, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	inv, ok := r.last[id]
	return inv, ok
}

// replayRequest makes the InvocationRequest that replays an export's run, as
// openapi.yaml's RunExport says: the harness's own checkpoint and deadline left out.
func replayRequest(x protocol.RunExport) protocol.InvocationRequest {
	input := protocol.AnyJSON("null")
	if x.Run.Input != nil {
		input = *x.Run.Input
	}
	return protocol.InvocationRequest{
		Protocol: 1,
		Run: protocol.InvocationRun{
			ID: x.Run.ID, Function: x.Run.Function, Revision: x.Run.Revision, Attempt: x.Run.Invocations,
			Input: input, ParentID: x.Run.ParentID, CreatedAt: x.Run.CreatedAt,
		},
		Identity:     x.Run.Identity,
		Journal:      x.Journal,
		StepAttempts: x.StepAttempts,
	}
}

func exportRun(t *testing.T, c *protocol.ClientWithResponses, id string) protocol.RunExport {
	t.Helper()
	resp, err := c.ExportRunWithResponse(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	return *resp.JSON200
}

// TestExportRun exports runs through a real gateway: GET /v1/runs/{id}/export.
func TestExportRun(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Gateway: manyLongPolls})
	alice := auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}
	c := s.Client(t, s.NewToken(t, alice))
	reader := s.Client(t, s.NewToken(t, auth.Identity{Subject: "rita", Tenant: "t1", Roles: []string{"runs:read"}}))
	invoker := s.Client(t, s.NewToken(t, auth.Identity{Subject: "ivan", Tenant: "t1", Roles: []string{"runs:invoke"}}))
	other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"admin"}}))

	app := s.NewApp()
	urls := make(chan string, 1)
	// exported takes a step, sleeps, and waits for a callback whose URL it hands to the
	// test outside its journal.
	functions.Register(app, "exported", func(ctx context.Context, in struct {
		Item string `json:"item"`
	}) (map[string]any, error) {
		reserved, err := step.Run(ctx, "reserve", func(context.Context) (string, error) { return "r-" + in.Item, nil })
		if err != nil {
			return nil, err
		}
		if err := step.Sleep(ctx, "nap", 10*time.Millisecond); err != nil {
			return nil, err
		}
		cb, err := step.Callback[approval](ctx, "approval", step.Timeout(time.Hour))
		if err != nil {
			return nil, err
		}
		select {
		case urls <- cb.URL:
		default:
		}
		res, err := cb.Result().Get()
		if err != nil {
			return nil, err
		}
		return map[string]any{"reserved": reserved, "ok": res.OK}, nil
	})
	functions.Register(app, "doomed", func(ctx context.Context, _ struct{}) (string, error) {
		return step.Run(ctx, "charge", func(ctx context.Context) (string, error) {
			return "", errors.New("card declined, attempt " + strconv.Itoa(step.Attempt(ctx)))
		}, step.MaxAttempts(2), step.Backoff(time.Millisecond, time.Millisecond))
	})
	functions.Register(app, "patient", func(ctx context.Context, _ struct{}) (string, error) {
		return step.Run(ctx, "poll", func(ctx context.Context) (string, error) {
			return "", errors.New("not yet")
		}, step.MaxAttempts(3), step.Backoff(time.Hour, time.Hour))
	})
	// bulky journals more than a page of the run detail (8 MiB): three steps of 3 MiB.
	functions.Register(app, "bulky", func(ctx context.Context, _ struct{}) (int, error) {
		for i := range 3 {
			if _, err := step.Run(ctx, "blob "+strconv.Itoa(i+1), func(context.Context) (string, error) {
				return strings.Repeat(strconv.Itoa(i+1), 3<<20), nil
			}); err != nil {
				return 0, err
			}
		}
		return 3, nil
	})
	rec := &invocationRecorder{app: app, last: map[string]protocol.InvocationRequest{}}
	appURL := s.ServeApp(t, rec)
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: appURL})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	start := func(t *testing.T, name, input string) string {
		t.Helper()
		resp := startRun(t, c, name, input, &protocol.StartRunParams{})
		require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
		return resp.JSON202.ID
	}

	// One completed run with a step, a sleep and a callback, shared by the subtests.
	completed := start(t, "exported", `{"item":"book"}`)
	var cbURL string
	select {
	case cbURL = <-urls:
	case <-time.After(30 * time.Second):
		t.Fatal("the run never made its callback")
	}
	token := cbURL[strings.LastIndex(cbURL, "/")+1:]
	code, body := postNoAuth(t, cbURL, `{"ok":true}`)
	require.Less(t, code, 300, body)
	res := mustResult(t, c, completed)
	require.Equal(t, protocol.RunStatusCompleted, res.Status, "%+v", res.Error)

	t.Run("ACompletedRunExportsItsWholeJournalWithTheCallbackTokenMasked", func(t *testing.T) {
		t.Parallel()
		resp, err := c.ExportRunWithResponse(t.Context(), completed)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.NotContains(t, string(resp.Body), token, "the callback's token is nowhere in the export")
		x := *resp.JSON200
		require.Equal(t, "stepgate.run/1", x.Format)
		require.WithinDuration(t, time.Now(), x.ExportedAt, time.Hour)

		detail := getRun(t, c, completed)
		require.Nil(t, detail.JournalNextCursor, "the run's journal is one page of the run detail")
		require.Equal(t, completed, x.Run.ID)
		require.Equal(t, protocol.RunStatusCompleted, x.Run.Status)
		require.JSONEq(t, `{"item":"book"}`, string(*x.Run.Input))
		require.JSONEq(t, `{"reserved":"r-book","ok":true}`, string(*x.Run.Output))
		require.Equal(t, alice.Subject, x.Run.Identity.Subject)
		require.Equal(t, detail.Invocations, x.Run.Invocations)
		require.Equal(t, detail.Journal, x.Journal, "the journal as the run detail shows it")
		require.Equal(t, detail.Failures, x.Failures)
		require.Nil(t, x.StepAttempts)

		kinds := map[protocol.EntryKind]protocol.JournalEntry{}
		for _, e := range x.Journal {
			kinds[e.Kind] = e
		}
		require.Contains(t, kinds, protocol.EntryKindStep)
		require.Contains(t, kinds, protocol.EntryKindSleep)
		require.Contains(t, kinds, protocol.EntryKindCallback)
		var cb journal.CallbackOutput
		require.NoError(t, json.Unmarshal(*kinds[protocol.EntryKindCallback].Output, &cb))
		require.Equal(t, journal.MaskedToken, cb.Token)
		require.True(t, strings.HasSuffix(cb.URL, "/"+journal.MaskedToken), cb.URL)

		require.NotNil(t, x.Function, "a developer may read functions")
		require.Equal(t, "exported", x.Function.Name)
		require.Equal(t, x.Run.Revision, x.Function.Revision)
		require.Equal(t, appURL[:len(appURL)-1]+"/xxxxx", x.Function.URL, "the URL is masked even for a caller who may write functions")
	})

	t.Run("TheExportMakesTheInvocationRequestTheGatewaySent", func(t *testing.T) {
		t.Parallel()
		x := exportRun(t, c, completed)
		sent, ok := rec.lastOf(completed)
		require.True(t, ok)
		got := replayRequest(x)

		require.Equal(t, sent.Protocol, got.Protocol)
		require.Equal(t, sent.Run.ID, got.Run.ID)
		require.Equal(t, sent.Run.Function, got.Run.Function)
		require.Equal(t, sent.Run.Revision, got.Run.Revision)
		require.Equal(t, sent.Run.Attempt, got.Run.Attempt, "run.attempt of the last invocation is the run's invocations")
		require.JSONEq(t, string(sent.Run.Input), string(got.Run.Input))
		require.Equal(t, sent.Run.ParentID, got.Run.ParentID)
		require.True(t, sent.Run.CreatedAt.Equal(got.Run.CreatedAt), "%s %s", sent.Run.CreatedAt, got.Run.CreatedAt)
		require.Equal(t, sent.Identity, got.Identity)
		require.Equal(t, sent.StepAttempts, got.StepAttempts)
		// The journal is the same, but for the callback's token, which the export masks.
		require.Len(t, got.Journal, len(sent.Journal))
		for i := range sent.Journal {
			s, g := sent.Journal[i], got.Journal[i]
			require.Equal(t, s.Output == nil, g.Output == nil, "entry %d", s.Seq)
			if s.Output != nil {
				require.JSONEq(t, strings.ReplaceAll(string(*s.Output), token, journal.MaskedToken), string(*g.Output), "entry %d", s.Seq)
			}
			s.Output, g.Output = nil, nil
			require.Equal(t, s, g, "entry %d", s.Seq)
		}
	})

	t.Run("AFailedRunExportsItsErrorAndFailures", func(t *testing.T) {
		t.Parallel()
		id := start(t, "doomed", `{}`)
		res := mustResult(t, c, id)
		require.Equal(t, protocol.RunStatusFailed, res.Status)
		x := exportRun(t, c, id)
		detail := getRun(t, c, id)
		require.Equal(t, protocol.RunStatusFailed, x.Run.Status)
		require.NotNil(t, x.Run.Error)
		require.Equal(t, *res.Error, *x.Run.Error)
		require.Nil(t, x.Run.Output)
		require.NotEmpty(t, x.Failures)
		require.Equal(t, detail.Failures, x.Failures, "the failures as the run detail lists them")
		require.Equal(t, detail.Journal, x.Journal)
		require.Equal(t, "card declined, attempt 1", x.Failures[0].Error.Message)
	})

	t.Run("AStepBeingRetriedExportsItsNextAttempt", func(t *testing.T) {
		t.Parallel()
		id := start(t, "patient", `{}`)
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			run := tryGetRun(ct, c, id)
			if assert.NotNil(ct, run.Awaiting) {
				assert.Equal(ct, protocol.AwaitingKindRetry, run.Awaiting.Kind)
			}
		}, 30*time.Second, 5*time.Millisecond)
		x := exportRun(t, c, id)
		require.Equal(t, &map[string]int{"1": 2}, x.StepAttempts, "the next invocation makes attempt 2 of step 1")
		require.Len(t, x.Failures, 1)
		require.Empty(t, x.Journal)
	})

	t.Run("AJournalOfManyPagesExportsWhole", func(t *testing.T) {
		t.Parallel()
		id := start(t, "bulky", `{}`)
		require.Equal(t, protocol.RunStatusCompleted, mustResult(t, c, id).Status)
		require.NotNil(t, getRun(t, c, id).JournalNextCursor, "the run detail's first page does not hold the whole journal")
		x := exportRun(t, c, id)
		require.Equal(t, []string{"blob 1", "blob 2", "blob 3"}, entryNames(x.Journal))
		for i, e := range x.Journal {
			var out string
			require.NoError(t, json.Unmarshal(*e.Output, &out))
			require.Equal(t, strings.Repeat(strconv.Itoa(i+1), 3<<20), out, "entry %d", e.Seq)
		}
	})

	t.Run("AReaderWithoutFunctionsReadGetsNoFunction", func(t *testing.T) {
		t.Parallel()
		x := exportRun(t, reader, completed)
		require.Nil(t, x.Function)
		require.Equal(t, completed, x.Run.ID)
		require.NotEmpty(t, x.Journal)
	})

	t.Run("ACallerWithoutRunsReadIsRefused", func(t *testing.T) {
		t.Parallel()
		resp, err := invoker.ExportRunWithResponse(t.Context(), completed)
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, resp.StatusCode(), string(resp.Body))
		require.Contains(t, string(resp.Body), "runs:read")
	})

	t.Run("AnotherTenantsRunIsNotFound", func(t *testing.T) {
		t.Parallel()
		resp, err := other.ExportRunWithResponse(t.Context(), completed)
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, resp.StatusCode(), string(resp.Body))
		require.NotContains(t, string(resp.Body), "book")
	})

	t.Run("AnUnknownRunIsNotFound", func(t *testing.T) {
		t.Parallel()
		for _, id := range []string{"0192f0c4-0000-7000-8000-000000000000", "not-a-uuid"} {
			resp, err := c.ExportRunWithResponse(t.Context(), id)
			require.NoError(t, err)
			require.Equal(t, http.StatusNotFound, resp.StatusCode(), string(resp.Body))
		}
	})
}
