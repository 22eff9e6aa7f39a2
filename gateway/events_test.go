package gateway_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// seen is what the event-triggered test functions answer: who they ran as, and their
// input.
type seen struct {
	Identity protocol.Identity `json:"identity"`
	Input    map[string]any    `json:"input"`
}

func sendEvent(t *testing.T, c *protocol.ClientWithResponses, ev protocol.EventSend) *protocol.SendEventResponse {
	t.Helper()
	resp, err := c.SendEventWithResponse(t.Context(), ev)
	require.NoError(t, err)
	return resp
}

func mustSendEvent(t *testing.T, c *protocol.ClientWithResponses, ev protocol.EventSend) protocol.EventReceipt {
	t.Helper()
	resp := sendEvent(t, c, ev)
	require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
	return *resp.JSON202
}

// mustResult waits for a run to finish and returns its result.
func mustResult(t *testing.T, c *protocol.ClientWithResponses, id string) protocol.RunResult {
	t.Helper()
	resp, err := c.GetRunResultWithResponse(t.Context(), id, &protocol.GetRunResultParams{Wait: ptr("30s")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	return *resp.JSON200
}

func mustSeen(t *testing.T, c *protocol.ClientWithResponses, runID string) seen {
	t.Helper()
	res := mustResult(t, c, runID)
	require.Equal(t, protocol.RunStatusCompleted, res.Status, string(*res.Output))
	var s seen
	require.NoError(t, json.Unmarshal(*res.Output, &s))
	return s
}

// eventsFrom returns the events of name the run sent.
func eventsFrom(t *testing.T, c *protocol.ClientWithResponses, name, runID string) []protocol.Event {
	t.Helper()
	resp, err := c.ListEventsWithResponse(t.Context(), &protocol.ListEventsParams{Name: &name, Limit: ptr(500)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	var out []protocol.Event
	for _, ev := range resp.JSON200.Events {
		if ev.SourceRunID != nil && *ev.SourceRunID == runID {
			out = append(out, ev)
		}
	}
	return out
}

// runsWithMarker returns the runs of function whose input has this marker.
func runsWithMarker(t *testing.T, c *protocol.ClientWithResponses, function, marker string) []protocol.Run {
	t.Helper()
	resp, err := c.ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{Function: &function, Limit: ptr(500), Include: ptr(protocol.Io)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	var out []protocol.Run
	for _, r := range resp.JSON200.Runs {
		var in struct{ Marker string }
		_ = json.Unmarshal(*r.Input, &in)
		if in.Marker == marker {
			out = append(out, r)
		}
	}
	return out
}

func newMarker() string { return rand.Text()[:10] }

func TestEvents(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Gateway: manyLongPolls, Auth: auth.Config{IdentityClaims: []string{"org"}}})
	app := s.NewApp()
	report := func(ctx context.Context, in map[string]any) (seen, error) {
		return seen{Identity: protocol.Identity(functions.IdentityFrom(ctx)), Input: in}, nil
	}
	functions.Register(app, "welcome", report, functions.OnEvent("user.signup"))
	functions.Register(app, "notify", report, functions.OnEvent("user.welcomed", "user.other"))
	functions.Register(app, "not-triggered", report, functions.OnEvent("user.signup.eu"))
	functions.Register(app, "signup", func(ctx context.Context, in map[string]any) (string, error) {
		if err := step.SendEvent(ctx, "user.welcomed", in); err != nil {
			return "", err
		}
		if in["fail_first"] == true && functions.RunFrom(ctx).Attempt == 1 {
			return "", errors.New("crashed after sending")
		}
		return "sent", nil
	}, functions.InvocationBackoff(10*time.Millisecond, 10*time.Millisecond))
	s.Sync(t, s.ServeApp(t, app))

	ada := auth.Identity{Subject: "ada", Tenant: auth.DefaultTenant, Roles: []string{"invoker"}, Claims: map[string]any{"org": "acme"}}
	asAda := s.Client(t, s.NewToken(t, ada))
	admin := s.Client(t, s.Token)

	t.Run("AnEventStartsARunWithTheSendersIdentity", func(t *testing.T) {
		t.Parallel()
		marker := newMarker()
		data := protocol.AnyJSON(`{"marker":"` + marker + `","email":"ada@example.com"}`)
		r := mustSendEvent(t, asAda, protocol.EventSend{Name: "user.signup", Data: &data})
		require.Equal(t, "user.signup", r.Name)
		require.NotEmpty(t, r.ID, "the gateway makes an id")
		require.Nil(t, r.Duplicate)
		require.Len(t, r.Runs, 1, "welcome only: not-triggered's trigger is another name")

		got := mustSeen(t, asAda, r.Runs[0])
		require.Equal(t, "ada", got.Identity.Subject)
		require.Equal(t, auth.DefaultTenant, got.Identity.Tenant)
		require.Equal(t, []string{"invoker"}, got.Identity.Roles)
		require.Equal(t, map[string]any{"org": "acme"}, got.Identity.Claims)
		require.Equal(t, map[string]any{"marker": marker, "email": "ada@example.com"}, got.Input, "the event's data is the input")

		run := getRun(t, asAda, r.Runs[0])
		require.Equal(t, "welcome", run.Function)
		require.Equal(t, got.Identity, run.Identity)
		require.Empty(t, runsWithMarker(t, admin, "not-triggered", marker))

		resp, err := asAda.ListEventsWithResponse(t.Context(), &protocol.ListEventsParams{Name: ptr("user.signup"), Limit: ptr(500)})
		require.NoError(t, err)
		var ev *protocol.Event
		for i := range resp.JSON200.Events {
			if resp.JSON200.Events[i].ID == r.ID {
				ev = &resp.JSON200.Events[i]
			}
		}
		require.NotNil(t, ev, "the event is listed")
		require.Equal(t, got.Identity, ev.Identity)
		require.Equal(t, r.Runs, ev.Runs)
		require.Nil(t, ev.SourceRunID)
		require.JSONEq(t, string(data), string(ev.Data))
	})

	t.Run("TheSameIDTwiceStartsOneRun", func(t *testing.T) {
		t.Parallel()
		marker := newMarker()
		data := protocol.AnyJSON(`{"marker":"` + marker + `"}`)
		id := "signup-" + marker
		first := mustSendEvent(t, asAda, protocol.EventSend{Name: "user.signup", Data: &data, ID: &id})
		require.Equal(t, id, first.ID)
		require.Len(t, first.Runs, 1)
		again := mustSendEvent(t, asAda, protocol.EventSend{Name: "user.signup", Data: &data, ID: &id})
		require.Equal(t, first.Runs, again.Runs, "the first event's runs")
		require.Equal(t, ptr(true), again.Duplicate)
		mustSeen(t, asAda, first.Runs[0])
		require.Len(t, runsWithMarker(t, admin, "welcome", marker), 1)
	})

	t.Run("AnotherTenantsEventTriggersNothingHere", func(t *testing.T) {
		t.Parallel()
		marker := newMarker()
		other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "eve", Tenant: "other-" + marker, Roles: []string{"invoker"}}))
		data := protocol.AnyJSON(`{"marker":"` + marker + `"}`)
		id := "signup-" + marker
		r := mustSendEvent(t, other, protocol.EventSend{Name: "user.signup", Data: &data, ID: &id})
		require.Empty(t, r.Runs, "tenant other has no function triggered by it")
		require.Nil(t, r.Duplicate)
		require.Empty(t, runsWithMarker(t, admin, "welcome", marker))

		// Ids are per tenant: the same id here is a new event.
		mine := mustSendEvent(t, asAda, protocol.EventSend{Name: "user.signup", Data: &data, ID: &id})
		require.Nil(t, mine.Duplicate)
		require.Len(t, mine.Runs, 1)

		// Each tenant lists its own events only.
		page, err := other.ListEventsWithResponse(t.Context(), nil)
		require.NoError(t, err)
		require.Len(t, page.JSON200.Events, 1)
		require.Equal(t, "eve", page.JSON200.Events[0].Identity.Subject)
	})

	t.Run("ARunsEventCarriesItsIdentity", func(t *testing.T) {
		t.Parallel()
		marker := newMarker()
		bob := s.Client(t, s.NewToken(t, auth.Identity{Subject: "bob", Tenant: auth.DefaultTenant, Roles: []string{"developer"}, Claims: map[string]any{"org": "initech"}}))
		res := mustComplete(t, bob, "signup", `{"marker":"`+marker+`"}`)

		evs := eventsFrom(t, bob, "user.welcomed", res.ID)
		require.Len(t, evs, 1)
		ev := evs[0]
		require.Equal(t, res.ID+":1", ev.ID, "the id is the run's and the entry's")
		require.Equal(t, "bob", ev.Identity.Subject, "the event carries the sending run's identity")
		require.JSONEq(t, `{"marker":"`+marker+`"}`, string(ev.Data))
		require.Len(t, ev.Runs, 1)

		got := mustSeen(t, bob, ev.Runs[0])
		require.Equal(t, "bob", got.Identity.Subject, "the triggered run carries the sending run's identity")
		require.Equal(t, []string{"developer"}, got.Identity.Roles)
		require.Equal(t, map[string]any{"org": "initech"}, got.Identity.Claims)
		require.Equal(t, marker, got.Input["marker"])
		triggered := getRun(t, bob, ev.Runs[0])
		require.Nil(t, triggered.ParentID, "a triggered run is not a child run")

		sender := getRun(t, bob, res.ID)
		require.Len(t, sender.Journal, 1)
		entry := sender.Journal[0]
		require.Equal(t, protocol.EntryKindEvent, entry.Kind)
		require.Equal(t, "user.welcomed", entry.Name)
		require.JSONEq(t, `{"name":"user.welcomed","data":{"marker":"`+marker+`"},"id":"`+res.ID+`:1"}`, string(*entry.Output))
	})

	t.Run("ARetriedInvocationSendsItsEventOnce", func(t *testing.T) {
		t.Parallel()
		marker := newMarker()
		res := mustComplete(t, admin, "signup", `{"marker":"`+marker+`","fail_first":true}`)
		sender := getRun(t, admin, res.ID)
		require.Equal(t, 2, sender.Invocations, "the first invocation failed after the send")
		require.Len(t, sender.Failures, 1)
		require.Len(t, sender.Journal, 1, "the second replayed the event entry")

		evs := eventsFrom(t, admin, "user.welcomed", res.ID)
		require.Len(t, evs, 1)
		require.Len(t, evs[0].Runs, 1)
		mustSeen(t, admin, evs[0].Runs[0])
		require.Len(t, runsWithMarker(t, admin, "notify", marker), 1, "one run of notify")
	})

	t.Run("SendingNeedsEventsSend", func(t *testing.T) {
		t.Parallel()
		marker := newMarker()
		viewer := s.Client(t, s.NewToken(t, auth.Identity{Subject: "v", Tenant: auth.DefaultTenant, Roles: []string{"viewer", "operator"}}))
		data := protocol.AnyJSON(`{"marker":"` + marker + `"}`)
		resp := sendEvent(t, viewer, protocol.EventSend{Name: "user.signup", Data: &data})
		require.Equal(t, http.StatusForbidden, resp.StatusCode())
		require.Equal(t, "this operation needs the events:send permission; the token's roles (viewer, operator) do not grant it",
			resp.ApplicationProblemJSON403.Detail)
		require.Empty(t, runsWithMarker(t, admin, "welcome", marker))

		list, err := viewer.ListEventsWithResponse(t.Context(), nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, list.StatusCode(), "listing needs runs:read")

		sender := s.Client(t, s.NewToken(t, auth.Identity{Subject: "s", Tenant: auth.DefaultTenant, Roles: []string{"events:send"}}))
		list, err = sender.ListEventsWithResponse(t.Context(), nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, list.StatusCode())
		require.Len(t, mustSendEvent(t, sender, protocol.EventSend{Name: "user.signup", Data: &data}).Runs, 1)
	})

	t.Run("InvokeRolesBindSenders", func(t *testing.T) {
		t.Parallel()
		marker := newMarker()
		reg, err := admin.RegisterFunctionWithResponse(t.Context(), "payout-"+marker, protocol.FunctionRegistration{
			URL:    "http://127.0.0.1:1/payout",
			Config: &protocol.FunctionConfig{InvokeRoles: &[]string{"billing"}, Triggers: &[]protocol.EventTrigger{{Event: "pay-" + marker}}},
		})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, reg.StatusCode(), string(reg.Body))
		r := mustSendEvent(t, asAda, protocol.EventSend{Name: "pay-" + marker})
		require.Empty(t, r.Runs, "ada (invoker) may not start payout, so her event does not")
		billing := s.Client(t, s.NewToken(t, auth.Identity{Subject: "b", Tenant: auth.DefaultTenant, Roles: []string{"invoker", "billing"}}))
		require.Len(t, mustSendEvent(t, billing, protocol.EventSend{Name: "pay-" + marker}).Runs, 1)
	})

	t.Run("BadEventsAre400", func(t *testing.T) {
		t.Parallel()
		for _, body := range []string{
			`{}`,
			`{"name":""}`,
			`{"name":"` + strings.Repeat("n", 256) + `"}`,
			`{"name":"n","id":""}`,
			`{"name":"n","data":{`,
		} {
			resp, err := admin.SendEventWithBodyWithResponse(t.Context(), "application/json", strings.NewReader(body))
			require.NoError(t, err)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode(), body)
		}
		reg, err := admin.RegisterFunctionWithResponse(t.Context(), "bad-trigger", protocol.FunctionRegistration{
			URL: "http://127.0.0.1:1/x", Config: &protocol.FunctionConfig{Triggers: &[]protocol.EventTrigger{{Event: ""}}},
		})
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, reg.StatusCode())
		require.Contains(t, reg.ApplicationProblemJSON400.Detail, "config.triggers[0].event")
		list, err := admin.ListEventsWithResponse(t.Context(), &protocol.ListEventsParams{Cursor: ptr("nope")})
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, list.StatusCode())
	})

	t.Run("ListingPages", func(t *testing.T) {
		t.Parallel()
		name := "page-" + newMarker()
		var sent []string
		for range 3 {
			sent = append(sent, mustSendEvent(t, admin, protocol.EventSend{Name: name}).ID)
		}
		var got []string
		params := &protocol.ListEventsParams{Name: &name, Limit: ptr(2)}
		for {
			resp, err := admin.ListEventsWithResponse(t.Context(), params)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
			for _, ev := range resp.JSON200.Events {
				got = append(got, ev.ID)
			}
			if resp.JSON200.NextCursor == nil {
				break
			}
			params.Cursor = resp.JSON200.NextCursor
		}
		require.Equal(t, []string{sent[2], sent[1], sent[0]}, got, "newest first")
	})
}

// TestEventCheckpoints drives the checkpoint endpoint with a function written without
// the SDK: an event entry checkpointed twice (a retried request) sends one event, and
// another event at that seq is nondeterminism, which fails the run: the invocation
// that was refused cannot complete it, whatever it answers.
func TestEventCheckpoints(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	type result struct{ first, again, other, noOutput int }
	results := make(chan result, 1)
	fn := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req protocol.InvocationRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		checkpoint := func(body string) int {
			// Not the request's context: the gateway hangs up on an invocation whose run
			// a checkpoint failed, and this one reads the answers after that.
			hreq, _ := http.NewRequestWithContext(context.WithoutCancel(r.Context()), "POST", req.Checkpoint.URL, strings.NewReader(body))
			hreq.Header.Set("Authorization", "Bearer "+req.Checkpoint.Token)
			resp, err := http.DefaultClient.Do(hreq)
			if err != nil {
				return 0
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
			return resp.StatusCode
		}
		entry := `{"seq":1,"kind":"event","name":"raw.ping","output":{"name":"raw.ping","data":{"n":1}}}`
		var res result
		res.first, res.again = checkpoint(entry), checkpoint(entry)
		res.other = checkpoint(`{"seq":1,"kind":"event","name":"raw.ping","output":{"name":"raw.ping","data":{"n":2}}}`)
		res.noOutput = checkpoint(`{"seq":2,"kind":"event","name":"raw.ping"}`)
		select {
		case results <- res:
		default: // a retried invocation; the first one's results count
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"completed","output":"ok"}`))
	})
	c := s.Client(t, s.Token)
	reg, err := c.RegisterFunctionWithResponse(t.Context(), "raw", protocol.FunctionRegistration{URL: s.ServeApp(t, fn)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, reg.StatusCode(), string(reg.Body))
	app := s.NewApp()
	functions.Register(app, "pinged", func(ctx context.Context, in map[string]any) (map[string]any, error) { return in, nil },
		functions.OnEvent("raw.ping"))
	s.Sync(t, s.ServeApp(t, app))

	resp := startRun(t, c, "raw", `{}`, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	got := <-results
	require.Equal(t, result{first: 200, again: 200, other: 409, noOutput: 400}, got)
	res := *resp.JSON200
	require.Equal(t, protocol.RunStatusFailed, res.Status, "the answer after the 409 does not complete the run")
	require.Equal(t, "nondeterminism", res.Error.Type)
	require.Contains(t, res.Error.Message, `{"n":1}`, "the message names what differs")
	require.Contains(t, res.Error.Message, `{"n":2}`)

	evs := eventsFrom(t, c, "raw.ping", res.ID)
	require.Len(t, evs, 1)
	require.Equal(t, res.ID+":1", evs[0].ID, "the gateway's default id")
	require.Len(t, evs[0].Runs, 1)
	out := mustResult(t, c, evs[0].Runs[0])
	require.JSONEq(t, `{"n":1}`, string(*out.Output))

	run := getRun(t, c, res.ID)
	require.Len(t, run.Journal, 1)
	require.JSONEq(t, `{"name":"raw.ping","data":{"n":1},"id":"`+res.ID+`:1"}`, string(*run.Journal[0].Output))
}
