package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/runevents"
	"github.com/stepgate/stepgate/protocol"
)

type sseEvent struct {
	name string
	run  protocol.Run // for event "run"
}

// stream is an open GET /v1/runs/stream.
type stream struct {
	events <-chan sseEvent
	close  func()
}

// openStream opens the run event stream at query with token, sent as a bearer header,
// or as access_token when asParam.
func openStream(t *testing.T, s *stack.Stack, token, query string, asParam bool) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	u := s.URL + "/v1/runs/stream?" + query
	if asParam {
		u += "&access_token=" + url.QueryEscape(token)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	require.NoError(t, err)
	if !asParam {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		cancel()
		require.NoError(t, err)
	}
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	require.Equal(t, "no-cache", resp.Header.Get("Cache-Control"))
	events := make(chan sseEvent, 1000)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		var name, data string
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				data = strings.TrimPrefix(line, "data: ")
			case line == "" && name != "":
				ev := sseEvent{name: name}
				if name == "run" {
					if err := json.Unmarshal([]byte(data), &ev.run); err != nil {
						t.Errorf("event data is not a run: %v: %s", err, data)
					}
				}
				events <- ev
				name, data = "", ""
			}
		}
	}()
	st := &stream{events: events}
	st.close = func() {
		cancel()
		resp.Body.Close()
		<-done
	}
	t.Cleanup(st.close)
	return st
}

// next returns the stream's next event, failing the test after 10s.
func (st *stream) next(t *testing.T) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-st.events:
		require.True(t, ok, "the stream ended")
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
		return sseEvent{}
	}
}

// nextOf returns the stream's next event of runID, skipping others.
func (st *stream) nextOf(t *testing.T, runID string) sseEvent {
	t.Helper()
	for {
		if ev := st.next(t); ev.run.ID == runID {
			return ev
		}
	}
}

// statusesOf reads the stream until runID's terminal event and returns the statuses of
// its events in order; events of other runs are skipped.
func (st *stream) statusesOf(t *testing.T, runID string) []protocol.RunStatus {
	t.Helper()
	var statuses []protocol.RunStatus
	for {
		ev := st.next(t)
		require.Equal(t, "run", ev.name)
		if ev.run.ID != runID {
			continue
		}
		statuses = append(statuses, ev.run.Status)
		switch ev.run.Status {
		case protocol.RunStatusCompleted, protocol.RunStatusFailed, protocol.RunStatusCancelled:
			return statuses
		}
	}
}

func TestStream(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	c := s.Client(t, s.Token)
	otherToken := s.NewToken(t, auth.Identity{Subject: "eve", Tenant: "other", Roles: []string{"admin"}})

	// The first subtest runs alone: while it checks that no notification is sent, no
	// stream may be open.
	t.Run("NoNotificationWhileNobodyWatches", func(t *testing.T) {
		ctx := t.Context()
		pc, err := s.Pool.Acquire(ctx)
		require.NoError(t, err)
		conn := pc.Hijack() // it listens: never back to the pool
		defer conn.Close(context.WithoutCancel(ctx))
		_, err = conn.Exec(ctx, "LISTEN "+runevents.EventChannel)
		require.NoError(t, err)

		mustComplete(t, c, "orders.checkout", `{}`)
		_, err = s.Pool.Exec(ctx, `SELECT pg_notify($1, 'marker')`, runevents.EventChannel)
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		n, err := conn.WaitForNotification(wctx)
		require.NoError(t, err)
		require.Equal(t, "marker", n.Payload, "the run's changes sent no notification")

		// A stream makes them notify; its end stops them again.
		st := openStream(t, s, s.Token, "", false)
		res := mustComplete(t, c, "hello", `{}`)
		for _, want := range []journal.Status{journal.StatusRunning, journal.StatusCompleted} {
			n, err = conn.WaitForNotification(wctx)
			require.NoError(t, err)
			ev, err := runevents.ParseRunEvent(n.Payload)
			require.NoError(t, err)
			require.Equal(t, runevents.RunEvent{ID: res.ID, Tenant: auth.DefaultTenant, Function: "hello", Status: want, Invocations: 1},
				runevents.RunEvent{ID: ev.ID, Tenant: ev.Tenant, Function: ev.Function, Status: ev.Status, Invocations: ev.Invocations})
		}
		st.close()
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			var watches int
			assert.NoError(ct, s.Pool.QueryRow(ctx, `SELECT count(*) FROM stepgate.run_watch`).Scan(&watches))
			assert.Zero(ct, watches)
		}, 10*time.Second, 5*time.Millisecond, "the watch goes with the last stream")
	})

	t.Run("QueuedRunsRunsCompletes", func(t *testing.T) {
		t.Parallel()
		st := openStream(t, s, s.Token, "", false)
		id := startAsync(t, c, "orders.checkout", `{"amount":42}`)
		var events []protocol.Run
		for {
			ev := st.next(t)
			require.Equal(t, "run", ev.name)
			if ev.run.ID != id {
				continue
			}
			events = append(events, ev.run)
			if ev.run.Status == protocol.RunStatusCompleted {
				break
			}
		}
		var statuses []protocol.RunStatus
		for _, r := range events {
			statuses = append(statuses, r.Status)
			require.Equal(t, "orders.checkout", r.Function)
			require.Nil(t, r.Input, "a stream carries no inputs or outputs: a page of runs stays small")
			require.Equal(t, "tester", r.Identity.Subject)
		}
		require.Equal(t, []protocol.RunStatus{protocol.RunStatusQueued, protocol.RunStatusRunning, protocol.RunStatusCompleted}, statuses)
		require.Nil(t, events[0].Error, "an early event does not carry the outcome")
		require.Nil(t, events[0].FinishedAt)
		last := events[len(events)-1]
		require.Nil(t, last.Output, "outputs are read from the run, not the stream")
		require.NotNil(t, last.FinishedAt)
		require.Equal(t, 1, last.Invocations)
	})

	t.Run("SleepCancelAndRerun", func(t *testing.T) {
		t.Parallel()
		st := openStream(t, s, s.Token, "function=orders.checkout", true)
		id := startAsync(t, c, "orders.checkout", `{"sleep_ms":60000}`)
		var statuses []protocol.RunStatus
		for len(statuses) < 3 {
			ev := st.next(t)
			require.Equal(t, "orders.checkout", ev.run.Function, "the function filter")
			if ev.run.ID == id {
				statuses = append(statuses, ev.run.Status)
			}
		}
		require.Equal(t, []protocol.RunStatus{protocol.RunStatusQueued, protocol.RunStatusRunning, protocol.RunStatusSuspended}, statuses)
		resp, err := c.CancelRunWithResponse(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode())
		require.Equal(t, []protocol.RunStatus{protocol.RunStatusCancelled}, st.statusesOf(t, id))

		rerun, err := c.RerunRunWithResponse(t.Context(), id, protocol.RerunRunJSONRequestBody{})
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, rerun.StatusCode())
		ev := st.nextOf(t, rerun.JSON202.ID)
		require.Equal(t, &id, ev.run.RerunOf)
		require.Equal(t, protocol.RunStatusQueued, ev.run.Status)
		resp, err = c.CancelRunWithResponse(t.Context(), rerun.JSON202.ID)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode())
	})

	t.Run("RunFilter", func(t *testing.T) {
		t.Parallel()
		id := startAsync(t, c, "orders.checkout", `{"sleep_ms":60000}`)
		st := openStream(t, s, s.Token, "run="+id, false)
		mustComplete(t, c, "hello", `{}`)
		resp, err := c.CancelRunWithResponse(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode())
		for {
			ev := st.next(t)
			require.Equal(t, id, ev.run.ID, "only the run asked for")
			if ev.run.Status == protocol.RunStatusCancelled {
				break
			}
		}
	})

	t.Run("OtherTenantSeesNothing", func(t *testing.T) {
		t.Parallel()
		mine := openStream(t, s, s.Token, "", false)
		theirs := openStream(t, s, otherToken, "", false)
		res := mustComplete(t, c, "hello", `{}`)
		mine.statusesOf(t, res.ID)

		// The other tenant's first event is its own run's: nothing of the first run
		// came before it.
		oc := s.Client(t, otherToken)
		reg, err := oc.RegisterFunctionWithResponse(t.Context(), "theirs", protocol.FunctionRegistration{URL: "http://127.0.0.1:1/"})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, reg.StatusCode())
		own := startAsync(t, oc, "theirs", `{}`)
		ev := theirs.next(t)
		require.Equal(t, own, ev.run.ID)
		require.Equal(t, "other", ev.run.Identity.Tenant)
		cancel, err := oc.CancelRunWithResponse(t.Context(), own)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, cancel.StatusCode())
	})
}

func TestStreamRefusals(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	for _, tc := range []struct {
		name, query, token string
		status             int
	}{
		{"NoToken", "", "", http.StatusUnauthorized},
		{"BadAccessToken", "access_token=garbage", "", http.StatusUnauthorized},
		{"BadRunID", "run=nope", s.Token, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			status, body := rawRequest(t, http.MethodGet, s.URL+"/v1/runs/stream?"+tc.query, tc.token, "", nil)
			require.Equal(t, tc.status, status, body)
		})
	}
}

// TestStreamResyncsAfterListenerReconnect drops the gateway's listener connection: the
// notifications sent meanwhile are lost, so streams are told to resync, and events flow
// again once it reconnected.
func TestStreamResyncsAfterListenerReconnect(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	c := s.Client(t, s.Token)
	st := openStream(t, s, s.Token, "", false)

	// As the login user (a superuser): the gateway's roles may not see or end the
	// sessions of others.
	admin, err := pgx.Connect(t.Context(), s.Pool.Config().ConnString())
	require.NoError(t, err)
	defer admin.Close(context.WithoutCancel(t.Context()))
	var terminated bool
	require.NoError(t, admin.QueryRow(t.Context(), `
		SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query LIKE '%LISTEN ' || $1 || '%'`, runevents.EventChannel).Scan(&terminated))
	require.True(t, terminated)
	ev := st.next(t)
	require.Equal(t, "resync", ev.name)

	res := mustComplete(t, c, "hello", `{}`)
	require.Equal(t, []protocol.RunStatus{protocol.RunStatusRunning, protocol.RunStatusCompleted}, st.statusesOf(t, res.ID))
}
