package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal/retention"
	"github.com/stepgate/stepgate/protocol"
)

// TestTenantQuotas: a tenant filled to its storage quotas (stored runs, stream bytes,
// bytes waiting in mailboxes) has each write past one refused with an error naming it,
// while another tenant's writes go on; GET /v1/usage shows each tenant its own usage;
// retention's deletes give the room back.
func TestTenantQuotas(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Limits: invoker.Limits{
		MaxTenantRuns: 6, MaxTenantStreamBytes: 200, MaxTenantMailboxBytes: 100,
	}})
	alice := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	bob := s.Client(t, s.NewToken(t, auth.Identity{Subject: "bob", Tenant: "t2", Roles: []string{"developer"}}))

	app := s.NewApp()
	functions.Register(app, "work", func(ctx context.Context, _ struct{}) (int, error) { return 1, nil })
	functions.Register(app, "pinged", func(ctx context.Context, _ struct{}) (int, error) { return 1, nil }, functions.OnEvent("ping"))
	// announcer sends the event ping once told to.
	functions.Register(app, "announcer", func(ctx context.Context, _ struct{}) (int, error) {
		if _, err := step.Receive[string](ctx, "go", step.Timeout(time.Hour)).Get(); err != nil {
			return 0, err
		}
		return 1, step.SendEvent(ctx, "ping", nil)
	})
	// parent invokes work, and answers how the invoke went.
	functions.Register(app, "parent", func(ctx context.Context, _ struct{}) (sendAnswer, error) {
		_, err := step.Invoke[int](ctx, "child", "work", struct{}{}).Get()
		var se *step.Error
		if errors.As(err, &se) {
			return sendAnswer{ErrorType: se.Type, Message: se.Message}, nil
		}
		return sendAnswer{}, err
	})
	// inbox waits for a message that never comes: what is sent to it waits in its mailbox.
	functions.Register(app, "inbox", func(ctx context.Context, _ struct{}) (bool, error) {
		_, err := step.Receive[string](ctx, "never", step.Timeout(time.Hour)).Get()
		return timedOut(err)
	})
	functions.Register(app, "sender", func(ctx context.Context, in struct {
		RunID string `json:"run_id"`
	}) (sendAnswer, error) {
		err := step.Send(ctx, in.RunID, "later", strings.Repeat("x", 38))
		var se *step.Error
		if errors.As(err, &se) {
			return sendAnswer{ErrorType: se.Type, Message: se.Message}, nil
		}
		return sendAnswer{}, err
	})
	// streamer writes up to n chunks of 21 bytes ("0123456789012345678" as JSON) in a
	// step, which fails with the first refused write.
	functions.Register(app, "streamer", func(ctx context.Context, in struct {
		N int `json:"n"`
	}) (int, error) {
		return step.Run(ctx, "fill", func(ctx context.Context) (int, error) {
			w, err := step.Stream(ctx, "out")
			if err != nil {
				return 0, err
			}
			for i := range in.N {
				if err := w.WriteString("0123456789012345678"); err != nil {
					return i, err
				}
			}
			return in.N, nil
		})
	})
	appURL := s.ServeApp(t, app)
	for _, c := range []*protocol.ClientWithResponses{alice, bob} {
		synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: appURL})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
	}
	usage := func(c *protocol.ClientWithResponses) protocol.TenantUsage {
		t.Helper()
		u := usageOf(t, c)
		// Events and journals: TestEventAndJournalQuotas.
		u.EventBytes, u.MaxEventBytes, u.JournalBytes, u.MaxJournalBytes = 0, 0, 0, 0
		return u
	}
	data := ptr(protocol.AnyJSON(`"` + strings.Repeat("x", 38) + `"`)) // 40 bytes

	// Mailboxes: two messages of 40 bytes fit in 100, a third does not.
	aliceInbox := startAsync(t, alice, "inbox", `{}`)
	receivingOn(t, alice, aliceInbox, 1)
	mustSendMessage(t, alice, aliceInbox, protocol.MessageSend{Topic: "later", Data: data})
	mustSendMessage(t, alice, aliceInbox, protocol.MessageSend{Topic: "later", Data: data})
	full := sendMessage(t, alice, aliceInbox, protocol.MessageSend{Topic: "later", Data: data})
	require.Equal(t, http.StatusTooManyRequests, full.StatusCode(), string(full.Body))
	require.Contains(t, full.ApplicationProblemJSON429.Detail, "would hold 120 bytes, more than its limit of 100 (STEPGATE_MAX_TENANT_MAILBOX_BYTES)")
	// A run's send is refused too, and its journal says why.
	sent := mustComplete(t, alice, "sender", `{"run_id":"`+aliceInbox+`"}`)
	var answer sendAnswer
	require.NoError(t, json.Unmarshal(*sent.Output, &answer))
	require.Equal(t, "limit_exceeded", answer.ErrorType)
	require.Contains(t, answer.Message, "STEPGATE_MAX_TENANT_MAILBOX_BYTES")
	// Another tenant's mailbox is its own.
	bobInbox := startAsync(t, bob, "inbox", `{}`)
	receivingOn(t, bob, bobInbox, 1)
	mustSendMessage(t, bob, bobInbox, protocol.MessageSend{Topic: "later", Data: data})
	mustSendMessage(t, bob, bobInbox, protocol.MessageSend{Topic: "later", Data: data})

	// Streams: nine chunks of 21 bytes fit in 200, the tenth is refused; the function
	// sees the refusal, and the step that returned it is journaled with it.
	streamed := startRun(t, alice, "streamer", `{"n":100}`, nil)
	require.Equal(t, http.StatusOK, streamed.StatusCode(), string(streamed.Body))
	require.Equal(t, protocol.RunStatusFailed, streamed.JSON200.Status, string(streamed.Body))
	want := "the streams of tenant t1 would hold 210 bytes, more than its limit of 200 (STEPGATE_MAX_TENANT_STREAM_BYTES)"
	require.Contains(t, streamed.JSON200.Error.Message, want)
	j := getRun(t, alice, streamed.JSON200.ID).Journal
	require.Len(t, j, 1)
	require.Equal(t, "fill", j[0].Name)
	require.Contains(t, j[0].Error.Message, want)
	require.Equal(t, 9, chunksOf(t, alice, streamed.JSON200.ID), "nothing of the refused write is stored")
	// Another tenant's streams are its own.
	require.JSONEq(t, `5`, string(*mustComplete(t, bob, "streamer", `{"n":5}`).Output))

	// Usage: each tenant sees its own.
	require.Equal(t, protocol.TenantUsage{Tenant: "t1", Runs: 3, MaxRuns: 6, StreamBytes: 189, MaxStreamBytes: 200,
		MailboxBytes: 80, MaxMailboxBytes: 100}, usage(alice))
	require.Equal(t, protocol.TenantUsage{Tenant: "t2", Runs: 2, MaxRuns: 6, StreamBytes: 105, MaxStreamBytes: 200,
		MailboxBytes: 80, MaxMailboxBytes: 100}, usage(bob))

	// Runs: three more fit in 6, a child or a seventh start is refused; a start whose
	// idempotency key names a stored run still gets that run.
	announcer := startAsync(t, alice, "announcer", `{}`)
	receivingOn(t, alice, announcer, 1)
	keyed := startRun(t, alice, "work", `{}`, &protocol.StartRunParams{Wait: ptr("30s"), IdempotencyKey: ptr("k-1")})
	require.Equal(t, http.StatusOK, keyed.StatusCode(), string(keyed.Body))
	parent := mustComplete(t, alice, "parent", `{}`)
	var child sendAnswer
	require.NoError(t, json.Unmarshal(*parent.Output, &child))
	require.Equal(t, "limit_exceeded", child.ErrorType, "the child is refused, and the parent's journal says why")
	require.Contains(t, child.Message, "tenant t1 stores 6 runs, its limit of 6 (STEPGATE_MAX_TENANT_RUNS)")
	refused := startRun(t, alice, "work", `{}`, nil)
	require.Equal(t, http.StatusTooManyRequests, refused.StatusCode(), string(refused.Body))
	require.Contains(t, refused.ApplicationProblemJSON429.Detail, "tenant t1 stores 6 runs, its limit of 6 (STEPGATE_MAX_TENANT_RUNS)")
	again := startRun(t, alice, "work", `{}`, &protocol.StartRunParams{Wait: ptr("30s"), IdempotencyKey: ptr("k-1")})
	require.Equal(t, http.StatusOK, again.StatusCode(), string(again.Body))
	require.Equal(t, keyed.JSON200.ID, again.JSON200.ID)
	mustComplete(t, bob, "work", `{}`) // another tenant's starts go on
	// An event that would start runs is refused whole; another tenant's is not.
	event, err := alice.SendEventWithResponse(t.Context(), protocol.EventSend{Name: "ping"})
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, event.StatusCode(), string(event.Body))
	require.Contains(t, event.ApplicationProblemJSON429.Detail, "event ping would start runs past the limit of tenant t1, which stores 6 runs of at most 6 (STEPGATE_MAX_TENANT_RUNS)")
	event, err = bob.SendEventWithResponse(t.Context(), protocol.EventSend{Name: "ping"})
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, event.StatusCode(), string(event.Body))
	require.Len(t, event.JSON202.Runs, 1)
	stack.AwaitStatus(t, bob, event.JSON202.Runs[0], protocol.RunStatusCompleted)
	// A run's event past the quota fails the run, which says why. (The message that
	// wakes it is taken at once: no mailbox quota applies.)
	mustSendMessage(t, alice, announcer, protocol.MessageSend{Topic: "go", Data: data})
	stack.AwaitStatus(t, alice, announcer, protocol.RunStatusFailed)
	failed := getRun(t, alice, announcer)
	require.Equal(t, "limit_exceeded", failed.Error.Type)
	require.Contains(t, failed.Error.Message, "event ping would start runs past the limit of tenant t1, which stores 6 runs of at most 6 (STEPGATE_MAX_TENANT_RUNS)")

	// Retention deletes alice's finished runs (and, once cancelled, her inbox with its
	// mailbox): the room comes back.
	cancelled, err := alice.CancelRunWithResponse(t.Context(), aliceInbox)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, cancelled.StatusCode(), string(cancelled.Body))
	deleted, err := retention.DeleteExpiredRuns(t.Context(), s.Pool, -time.Hour, 500) // every finished run
	require.NoError(t, err)
	require.Equal(t, 6+3, deleted, "alice's 6 runs and bob's 3 finished ones")
	require.Equal(t, protocol.TenantUsage{Tenant: "t1", MaxRuns: 6, MaxStreamBytes: 200, MaxMailboxBytes: 100}, usage(alice))
	require.Equal(t, protocol.TenantUsage{Tenant: "t2", Runs: 1, MaxRuns: 6, MaxStreamBytes: 200,
		MailboxBytes: 80, MaxMailboxBytes: 100}, usage(bob), "bob's inbox, still waiting, keeps its mailbox")
	mustComplete(t, alice, "work", `{}`)
	require.JSONEq(t, `9`, string(*mustComplete(t, alice, "streamer", `{"n":9}`).Output))
}

// usageOf is c's tenant's GET /v1/usage.
func usageOf(t *testing.T, c *protocol.ClientWithResponses) protocol.TenantUsage {
	t.Helper()
	resp, err := c.GetUsageWithResponse(t.Context())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	return *resp.JSON200
}

// TestEventAndJournalQuotas: every byte a tenant stores counts. Its events' data counts
// as each event is stored (STEPGATE_MAX_TENANT_EVENT_BYTES: an event past it is a 429
// naming it, and nothing is stored); its runs' journals count as each run finishes,
// never per checkpoint (STEPGATE_MAX_TENANT_JOURNAL_BYTES: once reached, a start, and
// an event that would start runs, is a 429 naming it). GET /v1/usage shows both, equal
// to what the tables hold; another tenant is not affected; retention gives the room back.
func TestEventAndJournalQuotas(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Limits: invoker.Limits{MaxTenantEventBytes: 100, MaxTenantJournalBytes: 60}})
	alice := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	bob := s.Client(t, s.NewToken(t, auth.Identity{Subject: "bob", Tenant: "t2", Roles: []string{"developer"}}))
	app := s.NewApp()
	// big journals a step of 42 bytes ("yyyy…" as JSON).
	functions.Register(app, "big", func(ctx context.Context, _ struct{}) (int, error) {
		_, err := step.Run(ctx, "forty", func(ctx context.Context) (string, error) { return strings.Repeat("y", 40), nil })
		return 1, err
	})
	functions.Register(app, "pinged", func(ctx context.Context, _ struct{}) (int, error) { return 1, nil }, functions.OnEvent("ping"))
	appURL := s.ServeApp(t, app)
	for _, c := range []*protocol.ClientWithResponses{alice, bob} {
		synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: appURL})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
	}
	stored := func(tenant string) (events, journals int64) {
		t.Helper()
		require.NoError(t, s.Pool.QueryRow(t.Context(), `
			SELECT (SELECT coalesce(sum(octet_length(data::text)), 0) FROM stepgate.event WHERE tenant = $1),
				(SELECT coalesce(sum(journal_bytes), 0) FROM stepgate.run WHERE tenant = $1)`, tenant).Scan(&events, &journals))
		return events, journals
	}
	data := ptr(protocol.AnyJSON(`"` + strings.Repeat("x", 38) + `"`)) // 40 bytes

	// Events: two of 40 bytes fit in 100, a third does not, and is not stored.
	for _, c := range []*protocol.ClientWithResponses{alice, alice, bob, bob} {
		sent, err := c.SendEventWithResponse(t.Context(), protocol.EventSend{Name: "note", Data: data})
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, sent.StatusCode(), string(sent.Body))
	}
	full, err := alice.SendEventWithResponse(t.Context(), protocol.EventSend{Name: "note", Data: data})
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, full.StatusCode(), string(full.Body))
	require.Contains(t, full.ApplicationProblemJSON429.Detail, "whose events hold 80 bytes of at most 100 (STEPGATE_MAX_TENANT_EVENT_BYTES); nothing was stored")
	listed, err := alice.ListEventsWithResponse(t.Context(), &protocol.ListEventsParams{})
	require.NoError(t, err)
	require.Len(t, listed.JSON200.Events, 2, "the refused event is not stored")
	u := usageOf(t, alice)
	require.Equal(t, int64(80), u.EventBytes)
	require.Equal(t, int64(100), u.MaxEventBytes)
	events, _ := stored("t1")
	require.Equal(t, events, u.EventBytes, "the usage is what the table holds")

	// Journals: a run of 42 bytes counts once it has finished; a second passes 60; then
	// no start, nor event that would start a run, is taken; another tenant's are.
	mustComplete(t, alice, "big", `{}`)
	u = usageOf(t, alice)
	require.Equal(t, int64(42), u.JournalBytes)
	require.Equal(t, int64(60), u.MaxJournalBytes)
	mustComplete(t, alice, "big", `{}`)
	_, journals := stored("t1")
	require.Equal(t, int64(84), journals)
	require.Equal(t, journals, usageOf(t, alice).JournalBytes, "the usage is what the table holds")
	refused := startRun(t, alice, "big", `{}`, nil)
	require.Equal(t, http.StatusTooManyRequests, refused.StatusCode(), string(refused.Body))
	require.Contains(t, refused.ApplicationProblemJSON429.Detail, "the finished runs of tenant t1 hold 84 bytes of journal, its limit of 60 (STEPGATE_MAX_TENANT_JOURNAL_BYTES)")
	ping, err := alice.SendEventWithResponse(t.Context(), protocol.EventSend{Name: "ping"})
	require.NoError(t, err)
	require.Equal(t, http.StatusTooManyRequests, ping.StatusCode(), string(ping.Body))
	require.Contains(t, ping.ApplicationProblemJSON429.Detail, "STEPGATE_MAX_TENANT_JOURNAL_BYTES")
	mustComplete(t, bob, "big", `{}`)
	require.Equal(t, int64(42), usageOf(t, bob).JournalBytes)

	// Retention deletes alice's finished runs and old events: the room comes back.
	_, err = retention.DeleteExpiredRuns(t.Context(), s.Pool, -time.Hour, 500)
	require.NoError(t, err)
	_, err = s.Pool.Exec(t.Context(), `DELETE FROM stepgate.event WHERE tenant = 't1'`)
	require.NoError(t, err)
	u = usageOf(t, alice)
	require.Zero(t, u.JournalBytes)
	require.Zero(t, u.EventBytes)
	mustComplete(t, alice, "big", `{}`)
	sent, err := alice.SendEventWithResponse(t.Context(), protocol.EventSend{Name: "note", Data: data})
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, sent.StatusCode(), string(sent.Body))
}

// chunksOf returns the length of the stream "out" of run id.
func chunksOf(t *testing.T, c *protocol.ClientWithResponses, id string) int {
	t.Helper()
	resp, err := c.ListRunStreamsWithResponse(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	for _, st := range resp.JSON200.Streams {
		if st.Key == "out" {
			return st.Length
		}
	}
	return 0
}
