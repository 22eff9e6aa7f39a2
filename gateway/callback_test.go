package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// approval is the data a callback is resolved with in these tests.
type approval struct {
	OK bool `json:"ok"`
}

// approvalOutcome is what an approving function answers.
type approvalOutcome struct {
	OK       bool   `json:"ok"`
	TimedOut bool   `json:"timed_out"`
	Rejected string `json:"rejected"`
	Resolver string `json:"resolver"`
	By       string `json:"by"`
}

// approvalOf waits for cb's result and says what came.
func approvalOf(cb *step.OpenCallback[approval]) (approvalOutcome, error) {
	res, err := cb.Result().Get()
	out := approvalOutcome{OK: res.OK, TimedOut: errors.Is(err, step.ErrTimedOut), Resolver: cb.Resolver}
	if out.TimedOut {
		return out, nil
	}
	if cb.ResolvedBy != nil {
		out.By = cb.ResolvedBy.Subject
	}
	var se *step.Error
	if errors.As(err, &se) {
		out.Rejected = se.Type + ": " + se.Message
		return out, nil
	}
	return out, err
}

// postNoAuth POSTs body to url with no Authorization header, as a third party would.
func postNoAuth(t *testing.T, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(raw)
}

// waitingForCallback waits until run id is suspended on an await_callback, and returns
// it with the callback's URL, which its function journaled as the output of its step
// "notify" (the API masks the callback entry's own).
func waitingForCallback(t *testing.T, c *protocol.ClientWithResponses, id string) (protocol.RunDetail, string) {
	t.Helper()
	var run protocol.RunDetail
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		run = tryGetRun(ct, c, id)
		if assert.NotNil(ct, run.Awaiting, "run %s awaits something", id) {
			assert.Equal(ct, protocol.AwaitingKindAwaitCallback, run.Awaiting.Kind)
		}
	}, 30*time.Second, 5*time.Millisecond)
	var url string
	require.NoError(t, json.Unmarshal(*run.Journal[1].Output, &url))
	return run, url
}

// TestCallbacks runs functions that wait for callbacks through a real gateway.
func TestCallbacks(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Gateway: manyLongPolls})
	alice := auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}
	c := s.Client(t, s.NewToken(t, alice))
	viewer := s.Client(t, s.NewToken(t, auth.Identity{Subject: "vic", Tenant: "t1", Roles: []string{"viewer"}}))
	other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"admin"}}))

	app := s.NewApp()
	// approve makes a callback, hands its URL out in a step, and waits for it for the
	// timeout in its input.
	functions.Register(app, "approve", func(ctx context.Context, in struct {
		Timeout string `json:"timeout"`
	}) (approvalOutcome, error) {
		var opts []step.Option
		if timeout, _ := time.ParseDuration(in.Timeout); timeout > 0 {
			opts = append(opts, step.Timeout(timeout))
		}
		cb, err := step.Callback[approval](ctx, "approval", opts...)
		if err != nil {
			return approvalOutcome{}, err
		}
		if _, err := step.Run(ctx, "notify", func(context.Context) (string, error) { return cb.URL, nil }); err != nil {
			return approvalOutcome{}, err
		}
		return approvalOf(cb)
	})
	// early hands its callback's URL to the test and waits to be let go before it
	// awaits the callback, in its first invocation: the human is faster than the run.
	type handoff struct {
		url     string
		release chan struct{}
	}
	early := make(chan handoff, 1)
	functions.Register(app, "early", func(ctx context.Context, _ struct{}) (approvalOutcome, error) {
		cb, err := step.Callback[approval](ctx, "approval", step.Timeout(time.Hour))
		if err != nil {
			return approvalOutcome{}, err
		}
		if functions.RunFrom(ctx).Attempt == 1 {
			h := handoff{cb.URL, make(chan struct{})}
			early <- h
			<-h.release
		}
		return approvalOf(cb)
	})
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	t.Run("ResolvedByTokenTheRunResumesWithTheData", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "approve", `{"timeout":"1h"}`)
		run, url := waitingForCallback(t, c, id)
		require.Equal(t, "approval", run.Awaiting.Name)
		require.Equal(t, 1, *run.Awaiting.CallbackSeq)
		require.Equal(t, 3, run.Awaiting.Seq)
		require.NotNil(t, run.WakeAt, "the timeout is the run's wake time")
		require.True(t, strings.HasPrefix(url, s.URL+"/v1/callbacks/"), url)
		token := strings.TrimPrefix(url, s.URL+"/v1/callbacks/")
		require.Len(t, token, 43, "256 bits, base64url")
		// The API never shows the token.
		var cbOut map[string]any
		require.NoError(t, json.Unmarshal(*run.Journal[0].Output, &cbOut))
		require.Equal(t, protocol.EntryKindCallback, run.Journal[0].Kind)
		require.Equal(t, "xxxxx", cbOut["token"])
		require.Equal(t, s.URL+"/v1/callbacks/xxxxx", cbOut["url"])

		code, body := postNoAuth(t, url, `{"ok":true}`)
		require.Equal(t, http.StatusOK, code, body)
		var res protocol.CallbackResolution
		require.NoError(t, json.Unmarshal([]byte(body), &res))
		require.True(t, res.Resumed)
		require.Equal(t, protocol.CallbackResolution{Name: "approval", Seq: 1, State: "resolved", Resolver: "token",
			ResolvedAt: res.ResolvedAt, Resumed: true}, res)

		out := mustResult(t, c, id)
		require.Equal(t, protocol.RunStatusCompleted, out.Status)
		require.JSONEq(t, `{"ok":true,"timed_out":false,"rejected":"","resolver":"token","by":""}`, string(*out.Output))
		entry := getRun(t, c, id).Journal[2]
		require.Equal(t, protocol.EntryKindAwaitCallback, entry.Kind)
		var journaled map[string]any
		require.NoError(t, json.Unmarshal(*entry.Output, &journaled))
		require.Equal(t, map[string]any{"ok": true}, journaled["data"])
		require.Equal(t, "token", journaled["resolver"])
		require.NotContains(t, journaled, "resolved_by")

		// Once: a second resolution or a rejection is a 409.
		code, body = postNoAuth(t, url, `{"ok":false}`)
		require.Equal(t, http.StatusConflict, code, body)
		require.Contains(t, body, "this callback is already resolved; a callback is resolved once")
		code, body = postNoAuth(t, url+"/reject", `{"message":"too late"}`)
		require.Equal(t, http.StatusConflict, code, body)
		require.Contains(t, body, "already resolved")
	})

	t.Run("RejectedByTokenTheAwaitReturnsTheError", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "approve", `{"timeout":"1h"}`)
		_, url := waitingForCallback(t, c, id)
		code, body := postNoAuth(t, url+"/reject", `{"type":"declined","message":"over budget"}`)
		require.Equal(t, http.StatusOK, code, body)
		out := mustResult(t, c, id)
		require.JSONEq(t, `{"ok":false,"timed_out":false,"rejected":"declined: over budget","resolver":"token","by":""}`, string(*out.Output))

		id = startAsync(t, c, "approve", `{"timeout":"1h"}`)
		_, url = waitingForCallback(t, c, id)
		code, body = postNoAuth(t, url+"/reject", `{"message":"no"}`)
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, string(*mustResult(t, c, id).Output), `"rejected":"rejected: no"`)
	})

	t.Run("ResolvedBeforeTheAwaitItReturnsAtOnce", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "early", `{}`)
		h := <-early // the run made its callback and does not await it yet
		code, body := postNoAuth(t, h.url, `{"ok":true}`)
		require.Equal(t, http.StatusOK, code, body)
		require.Contains(t, body, `"resumed":false`)
		close(h.release)
		out := mustResult(t, c, id)
		require.Equal(t, protocol.RunStatusCompleted, out.Status)
		require.JSONEq(t, `{"ok":true,"timed_out":false,"rejected":"","resolver":"token","by":""}`, string(*out.Output))
	})

	t.Run("AnExpiredCallbackIsA409", func(t *testing.T) {
		t.Parallel()
		// The callback expires 2s after it is made: the run waits for it before then.
		id := startAsync(t, c, "approve", `{"timeout":"2s"}`)
		_, url := waitingForCallback(t, c, id)
		out := mustResult(t, c, id)
		require.JSONEq(t, `{"ok":false,"timed_out":true,"rejected":"","resolver":"","by":""}`, string(*out.Output))
		require.JSONEq(t, `{"timed_out":true}`, string(*getRun(t, c, id).Journal[2].Output))
		code, body := postNoAuth(t, url, `{"ok":true}`)
		require.Equal(t, http.StatusConflict, code, body)
		require.Contains(t, body, "this callback expired, unresolved")
		require.NotContains(t, body, id)
	})

	t.Run("TheTokensConflictNamesNoRunAndNoResolver", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "approve", `{"timeout":"1h"}`)
		_, url := waitingForCallback(t, c, id)
		resp, err := c.ResolveRunCallbackWithResponse(t.Context(), id, "approval", protocol.AnyJSON(`{"ok":true}`))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))

		// The token's holder learns only that the callback is closed.
		for _, u := range []string{url, url + "/reject"} {
			code, body := postNoAuth(t, u, `{"message":"late"}`)
			require.Equal(t, http.StatusConflict, code, body)
			require.Contains(t, body, "this callback is already resolved")
			require.NotContains(t, body, id)
			require.NotContains(t, body, alice.Subject)
		}
		// A caller of the run's tenant is told when and by whom; another tenant, nothing.
		rej, err := c.RejectRunCallbackWithResponse(t.Context(), id, "approval", protocol.CallbackRejection{Message: "x"})
		require.NoError(t, err)
		require.Equal(t, http.StatusConflict, rej.StatusCode(), string(rej.Body))
		require.Contains(t, string(rej.Body), "by alice")
		rej, err = other.RejectRunCallbackWithResponse(t.Context(), id, "approval", protocol.CallbackRejection{Message: "x"})
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, rej.StatusCode(), string(rej.Body))
		require.NotContains(t, string(rej.Body), alice.Subject)
	})

	t.Run("BadRequests", func(t *testing.T) {
		t.Parallel()
		code, body := postNoAuth(t, s.URL+"/v1/callbacks/"+strings.Repeat("A", 43), `{}`)
		require.Equal(t, http.StatusNotFound, code, body)
		require.Contains(t, body, "no callback has this token")
		code, body = postNoAuth(t, s.URL+"/v1/callbacks/nope/reject", `{"message":"x"}`)
		require.Equal(t, http.StatusNotFound, code, body)

		id := startAsync(t, c, "approve", `{"timeout":"1h"}`)
		_, url := waitingForCallback(t, c, id)
		code, body = postNoAuth(t, url, `{"ok":`)
		require.Equal(t, http.StatusBadRequest, code, body)
		require.Contains(t, body, "not valid JSON")
		code, body = postNoAuth(t, url, `{"s":"`+strings.Repeat("x", 1<<20)+`"}`)
		require.Equal(t, http.StatusRequestEntityTooLarge, code, body)
		code, body = postNoAuth(t, url+"/reject", `{"type":"x"}`)
		require.Equal(t, http.StatusBadRequest, code, body)
		require.Contains(t, body, "needs a message")
		code, body = postNoAuth(t, url, `{"s":"\u0000"}`)
		require.Equal(t, http.StatusBadRequest, code, body)
		// None of them resolved it.
		require.Equal(t, protocol.RunStatusSuspended, getRun(t, c, id).Status)
		resp, err := c.CancelRunWithResponse(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		// A cancelled run's callback can no longer be resolved.
		code, body = postNoAuth(t, url, `{"ok":true}`)
		require.Equal(t, http.StatusConflict, code, body)
		require.Contains(t, body, "can no longer be resolved: its run has finished")
	})

	t.Run("ByRunIDAsTheCaller", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "approve", `{"timeout":"1h"}`)
		waitingForCallback(t, c, id)

		// Another tenant does not see the run; a viewer may not manage it.
		resp, err := other.ResolveRunCallbackWithResponse(t.Context(), id, "approval", protocol.AnyJSON(`{"ok":true}`))
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, resp.StatusCode(), string(resp.Body))
		rej, err := other.RejectRunCallbackWithResponse(t.Context(), id, "approval", protocol.CallbackRejection{Message: "x"})
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, rej.StatusCode(), string(rej.Body))
		resp, err = viewer.ResolveRunCallbackWithResponse(t.Context(), id, "approval", protocol.AnyJSON(`{"ok":true}`))
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, resp.StatusCode(), string(resp.Body))
		require.Contains(t, string(resp.Body), "runs:manage")
		resp, err = c.ResolveRunCallbackWithResponse(t.Context(), id, "nope", protocol.AnyJSON(`{"ok":true}`))
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, resp.StatusCode(), string(resp.Body))
		// With no token at all, the route is refused.
		code, body := postNoAuth(t, s.URL+"/v1/runs/"+id+"/callbacks/approval", `{"ok":true}`)
		require.Equal(t, http.StatusUnauthorized, code, body)

		resp, err = c.ResolveRunCallbackWithResponse(t.Context(), id, "approval", protocol.AnyJSON(`{"ok":true}`))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Equal(t, id, *resp.JSON200.RunID)
		require.Equal(t, protocol.CallbackResolutionResolverIdentity, resp.JSON200.Resolver)
		require.Equal(t, "alice", resp.JSON200.ResolvedBy.Subject)
		out := mustResult(t, c, id)
		require.JSONEq(t, `{"ok":true,"timed_out":false,"rejected":"","resolver":"identity","by":"alice"}`, string(*out.Output))

		rej, err = c.RejectRunCallbackWithResponse(t.Context(), id, "approval", protocol.CallbackRejection{Message: "x"})
		require.NoError(t, err)
		require.Equal(t, http.StatusConflict, rej.StatusCode(), string(rej.Body))
		require.Contains(t, string(rej.Body), "already resolved")
		require.Contains(t, string(rej.Body), "by alice")
	})

	t.Run("AFunctionCannotTouchAnotherRunsCallback", func(t *testing.T) {
		t.Parallel()
		victim := startAsync(t, c, "approve", `{"timeout":"1h"}`)
		waitingForCallback(t, c, victim)
		results := make(chan [3]int, 1)
		f := &rawFunction{answer: func(req *protocol.InvocationRequest, checkpoint func(string) (int, string)) string {
			// The checkpoint token binds this run: a callback checkpointed for the
			// victim's run is refused, and one for this run is this run's.
			real := req.Checkpoint.URL
			req.Checkpoint.URL = strings.Replace(real, req.Run.ID, victim, 1)
			stolen, _ := checkpoint(`{"seq":4,"kind":"callback","name":"approval"}`)
			req.Checkpoint.URL = real
			own, _ := checkpoint(`{"seq":1,"kind":"step","name":"a","output":1}`)
			// Nor can it choose its token: the gateway makes it.
			chosen, _ := checkpoint(`{"seq":2,"kind":"callback","name":"c","output":{"token":"mine"}}`)
			results <- [3]int{stolen, own, chosen}
			// The await names the victim's callback seq: here it is a step.
			return `{"status":"suspended","await":{"type":"await_callback","seq":2,"name":"approval","callback_seq":1}}`
		}}
		register(t, s, c, "thief", f, fastRetries)
		e := mustFail(t, c, "thief")
		require.Equal(t, [3]int{http.StatusUnauthorized, http.StatusOK, http.StatusBadRequest}, <-results)
		require.Equal(t, "bad_answer", e.Type, e.Message)
		require.Contains(t, e.Message, "not a callback of this run")
		require.Equal(t, protocol.RunStatusSuspended, getRun(t, c, victim).Status, "the victim still waits")
	})
}

// TestCallbackTokenNotStored: a callback's token is nowhere in the database in clear,
// in any row of any table, while the run waits for it and after it resumed; the token
// still resolves the callback (any other is a 404), the API shows it masked, and the
// run's function gets the same token when its journal is replayed.
func TestCallbackTokenNotStored(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.DBURL(t)
	s := stack.Start(t, stack.Options{DatabaseURL: dbURL})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"admin"}}))
	app := s.NewApp()
	made, replayed := make(chan string, 1), make(chan string, 1)
	functions.Register(app, "sealed", func(ctx context.Context, _ struct{}) (approvalOutcome, error) {
		cb, err := step.Callback[approval](ctx, "approval", step.Timeout(time.Hour))
		if err != nil {
			return approvalOutcome{}, err
		}
		// Handed out of the run's process only: the function journals no token itself.
		if functions.RunFrom(ctx).Attempt == 1 {
			made <- cb.Token
		} else {
			replayed <- cb.Token
		}
		return approvalOf(cb)
	})
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	id := startAsync(t, c, "sealed", `{}`)
	var token string
	select {
	case token = <-made:
	case <-time.After(30 * time.Second):
		t.Fatal("no callback after 30s")
	}
	require.Len(t, token, 43, "256 bits, base64url")
	run := waitingForCallbackOnly(t, c, id)

	conn, err := pgx.Connect(t.Context(), dbURL) // a superuser: no row is hidden from it
	require.NoError(t, err)
	defer conn.Close(context.Background())
	// rowsHolding returns the tables, and how many of their rows, whose text holds s.
	rowsHolding := func(s string) map[string]int {
		rows, err := conn.Query(t.Context(), `
			SELECT format('%I.%I', table_schema, table_name) FROM information_schema.tables
			WHERE table_schema NOT IN ('pg_catalog', 'information_schema') AND table_type = 'BASE TABLE'`)
		require.NoError(t, err)
		tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Contains(t, tables, "stepgate.journal_entry")
		found := map[string]int{}
		for _, table := range tables {
			var n int
			require.NoError(t, conn.QueryRow(t.Context(), `SELECT count(*) FROM `+table+` t WHERE strpos(t::text, $1) > 0`, s).Scan(&n))
			if n > 0 {
				found[table] = n
			}
		}
		return found
	}
	require.Contains(t, rowsHolding(id), "stepgate.journal_entry", "the scan finds the run's id in its entries")
	require.Empty(t, rowsHolding(token), "the token, in clear, while the run waits")

	// The API shows the entry masked, with nothing sealed.
	cbEntry := run.Journal[0]
	require.Equal(t, protocol.EntryKindCallback, cbEntry.Kind)
	require.NotContains(t, string(*cbEntry.Output), token)
	require.NotContains(t, string(*cbEntry.Output), "sealed")
	require.Contains(t, string(*cbEntry.Output), `/v1/callbacks/xxxxx"`)

	// Another token, a token one character off, another tenant's resolve: 404s.
	wrong := token[:42] + "A"
	if token[42] == 'A' {
		wrong = token[:42] + "B"
	}
	for _, bad := range []string{wrong, strings.Repeat("A", 43)} {
		status, body := postNoAuth(t, s.URL+"/v1/callbacks/"+bad, `{"ok":false}`)
		require.Equal(t, http.StatusNotFound, status, body)
	}
	byOther, err := other.ResolveRunCallbackWithResponse(t.Context(), id, "approval", json.RawMessage(`{"ok":false}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, byOther.StatusCode(), string(byOther.Body))

	status, body := postNoAuth(t, s.URL+"/v1/callbacks/"+token, `{"ok":true}`)
	require.Equal(t, http.StatusOK, status, body)
	res, err := c.GetRunResultWithResponse(t.Context(), id, &protocol.GetRunResultParams{Wait: ptr("30s")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.Equal(t, protocol.RunStatusCompleted, res.JSON200.Status, string(res.Body))
	require.JSONEq(t, `{"ok":true,"timed_out":false,"rejected":"","resolver":"token","by":""}`, string(*res.JSON200.Output))
	select {
	case again := <-replayed:
		require.Equal(t, token, again, "a replay returns the same handle")
	default:
		t.Fatal("the run's second invocation did not replay its callback")
	}
	require.Empty(t, rowsHolding(token), "the token, in clear, after the run resumed")
}

// waitingForCallbackOnly waits until run id is suspended on an await_callback, and
// returns it.
func waitingForCallbackOnly(t *testing.T, c *protocol.ClientWithResponses, id string) protocol.RunDetail {
	t.Helper()
	var run protocol.RunDetail
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		run = tryGetRun(ct, c, id)
		if assert.NotNil(ct, run.Awaiting, "run %s awaits something", id) {
			assert.Equal(ct, protocol.AwaitingKindAwaitCallback, run.Awaiting.Kind)
		}
	}, 30*time.Second, 5*time.Millisecond)
	return run
}
