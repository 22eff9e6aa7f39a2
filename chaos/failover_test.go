package chaos_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/internal/wiring/pgserver"
)

// testFailoverKill kills the primary with SIGKILL mid-load and promotes its synchronous
// standby: the machine of the primary dies, and a failover manager promotes the standby.
func testFailoverKill(t *testing.T) { testFailover(t, false) }

// testFailoverSwitchover stops the primary with a fast shutdown mid-load, then promotes
// the standby: a planned switchover.
func testFailoverSwitchover(t *testing.T) { testFailover(t, true) }

// testFailover runs two gateways on a primary and a synchronous standby of it, given a
// multi-host URL (target_session_attrs=read-write) of both; under load it loses the
// primary (SIGKILL, or a fast shutdown when clean), waits a moment (a failover manager
// noticing), and promotes the standby. With synchronous replication nothing
// acknowledged may be lost: every start the API answered with a run id exists
// afterwards, every checkpoint acknowledged is in the journal, every event and message
// acknowledged is stored, no (run, seq) twice, no gap, and every run (chains, durable
// sleeps, waits for events, a schedule's ticks) completes with no failed attempt; no
// gateway exits; the API answers 503 with Retry-After, never 500, while no primary is
// reachable; no lease is reaped from an invocation still running. On the new primary,
// waits for a run's result on every gateway are told of its end (the notify hub) and
// the schedule ticks again (River and the timers). It measures the time from the loss of the primary, and from the promotion
// (pg_promote called), to the first start the API acknowledged, and to the first run
// completed, on the new primary.
func testFailover(t *testing.T, clean bool) {
	primary, standby, url := ownReplicatedPostgres(t)
	r := newRand(t)
	failoverUnderLoad(t, url, fnChain, func(s *scenario) failover {
		fo := failover{what: "SIGKILL", since: "the promotion (pg_promote called)", lost: time.Now()}
		if clean {
			fo.what = "fast shutdown"
			if err := primary.Stop(); err != nil {
				t.Errorf("stop the primary: %v", err)
			}
		} else if err := primary.Kill(); err != nil {
			t.Fatal(err)
		}
		// A failover manager notices the loss, then promotes the standby.
		pause(s.ctx, between(r, 500*time.Millisecond, 1500*time.Millisecond))
		fo.promoting = time.Now()
		if err := standby.Promote(s.ctx); err != nil {
			t.Fatal(err)
		}
		fo.promoted = time.Now()
		fo.detail = fmt.Sprintf("the standby promoted %s later, taking %s",
			fo.promoting.Sub(fo.lost).Round(10*time.Millisecond), fo.promoted.Sub(fo.promoting).Round(10*time.Millisecond))
		return fo
	})
}

// failover is what a failover scenario's fault did, and when.
type failover struct {
	what   string // the fault, for the report: "SIGKILL"
	detail string // how the new primary came, for the report
	since  string // what promoting is, for the report: "the promotion (pg_promote called)"
	// timeoutsOK: the outage may outlast the functions' timeouts (Patroni's restart of a
	// crashed leader, or a leader key's ttl): an invocation in flight may time out and be
	// retried (its run must complete all the same). They are counted, not failed.
	timeoutsOK bool
	// lost is when the primary was lost; promoting, when its replacement began to take
	// over (the checks want the schedule to tick after it); promoted, when it took
	// writes (the API may answer 503 until then, never 500).
	lost, promoting, promoted time.Time
}

// failoverUnderLoad runs two gateways on the database of url (a multi-host URL with
// target_session_attrs=read-write) under the failover load, its chains runs of chain
// (fnChain, or fnPatient where the outage may outlast chain's timeout), calls fault amid
// it, and checks and measures what testFailover says.
func failoverUnderLoad(t *testing.T, url, chain string, fault func(s *scenario) failover) {
	s := newScenario(t, fleetConfig{DatabaseURL: url})
	r := newRand(t)
	loadFor := size(8*time.Second, 30*time.Second)
	every := size(100*time.Millisecond, 50*time.Millisecond)

	// Of every 10 runs: a long chain, which is sent a message, 6 short ones, a nap (a
	// durable sleep: the timers) and 2 awaits of an event.
	sent := &sentRecord{}
	l := s.startMixedLoad(every, func(i int) (string, any) {
		switch i % 10 {
		case 0:
			return chain, midRun
		case 3:
			return fnNap, struct{}{}
		case 5, 8:
			return fnAwait, awaitInput{Key: rand.Text()}
		}
		return chain, shortRun
	}, func(ctx context.Context, id string, input any) error {
		switch in := input.(type) {
		case awaitInput:
			return s.payRecorded(ctx, id, in.Key, sent)
		case chainInput:
			if in == midRun {
				return s.messageRecorded(ctx, id, sent)
			}
		}
		return nil
	})
	// A schedule that ticks every second: River's leader and the tick timers.
	const schedule = "chaos-failover-tick"
	if err := s.f.callOK(s.ctx, s.f.gws[0], http.MethodPut, "/v1/schedules/"+schedule,
		map[string]any{"function": fnTick, "cron": "@every 1s"}, nil); err != nil {
		t.Fatalf("put the schedule: %v", err)
	}
	began := time.Now()
	pause(s.ctx, between(r, loadFor/4, loadFor/2))
	poll := s.pollAPI()
	probe := s.probeStarts(fnChain, shortRun)

	fo := fault(s)
	lost, promoting, promoted := fo.lost, fo.promoting, fo.promoted

	pause(s.ctx, time.Until(began.Add(loadFor)))
	ids, err := l.stop()
	if err != nil {
		t.Errorf("starting runs: %v", err)
	}
	// The probe goes on until a start was acknowledged on the new primary, so that the
	// time to it is measured even when the load ended first.
	if err := waitFor(s.ctx, stuckAfter, "a start acknowledged after the primary was lost", func() (bool, error) {
		return !probe.firstOK(lost).IsZero(), nil
	}); err != nil {
		t.Error(err)
	}
	starts := probe.stop()
	answers := poll.stop()
	for _, st := range starts {
		if st.runID != "" {
			ids = append(ids, st.runID)
		}
	}
	ids = append(ids, s.checkWaiters(4)...)
	s.checkTicks(fnTick, promoting, 3)
	for _, g := range s.f.gws {
		if err := s.f.callOK(s.ctx, g, http.MethodDelete, "/v1/schedules/"+schedule, nil, nil); err == nil {
			break
		}
	}
	ticks, err := s.f.runsOf(s.ctx, fnTick)
	if err != nil {
		t.Fatalf("read the schedule's runs: %v", err)
	}
	s.note("primary lost (%s) at +%s; %s", fo.what, lost.Sub(s.began).Round(100*time.Millisecond), fo.detail)

	expect := completedWithoutFailure
	if fo.timeoutsOK {
		expect = completed
	}
	runs := s.settle(append(ids, slices.Collect(maps.Keys(ticks))...), stuckAfter, expect)
	if fo.timeoutsOK {
		s.noteFailedAttempts(ids)
	} else {
		s.checkNoFailedAttempts(ids)
	}
	for _, g := range s.f.gws {
		if !g.up() {
			t.Errorf("%s exited during the failover", g.name)
		}
	}

	// Acknowledged starts: every run id the API answered exists on the new primary.
	var missing []string
	for _, id := range ids {
		if runs[id] == nil {
			missing = append(missing, id)
		}
	}
	s.note("acknowledged starts: %d, lost: %d; checkpoints acknowledged: %d, lost: %d; duplicate entries: %d",
		len(ids), len(missing), len(s.a.rec.acked()), s.res.missingAcks, s.res.duplicates)
	if len(missing) > 0 {
		t.Errorf("%d starts the API acknowledged are not in the database after the failover, e.g. %s", len(missing), missing[0])
	}
	s.checkSent(sent)

	// The API while no primary was reachable: 503 with Retry-After, never 500.
	s.checkUnavailableAnswers(append(answers, startAnswers(starts)...), lost, promoted)

	// No lease reaped from an invocation that still ran: no run invoked again while its
	// invocation in flight at the loss had not ended.
	var reaped []string
	for _, inv := range s.inFlight(interruption{gateways: []string{"gw1", "gw2"}, at: lost}, 0) {
		end, _ := inv.ended()
		if next := s.nextInvocation(inv.runID, lost); next != nil && (end.IsZero() || next.start.Before(end)) {
			reaped = append(reaped, fmt.Sprintf("run %s: invoked again by %s while its invocation %d ran", inv.runID, next.gateway, inv.invocation))
		}
	}
	s.note("checkpoints refused: %s", s.refusals())
	if len(reaped) > 0 {
		t.Errorf("%d leases were reaped from invocations still running, e.g. %s", len(reaped), reaped[0])
	}

	// The figures: the first start acknowledged, and the first run completed, on the new
	// primary.
	firstStart := probe.firstOK(lost)
	var firstDone time.Time
	for _, run := range runs {
		if run.FinishedAt != nil && run.FinishedAt.After(lost) && (firstDone.IsZero() || run.FinishedAt.Before(firstDone)) {
			firstDone = *run.FinishedAt
		}
	}
	since := func(at, from time.Time) string {
		if at.IsZero() {
			return "never"
		}
		return fmtDur(at.Sub(from))
	}
	s.note("from the loss of the primary: first start acknowledged %s, first run completed %s; from %s: %s and %s",
		since(firstStart, lost), since(firstDone, lost), fo.since, since(firstStart, promoting), since(firstDone, promoting))
	// A fault that takes a while to stop the primary (a switchover: a checkpoint first)
	// leaves it taking writes for a moment: from the first start refused after the fault,
	// too.
	if refused := probe.firstRefused(lost); !refused.IsZero() {
		firstStart = probe.firstOK(refused)
		firstDone = time.Time{}
		for _, run := range runs {
			if run.FinishedAt != nil && run.FinishedAt.After(refused) && (firstDone.IsZero() || run.FinishedAt.Before(firstDone)) {
				firstDone = *run.FinishedAt
			}
		}
		s.note("from the first start refused (%s after the fault): first start acknowledged %s, first run completed %s",
			fmtDur(refused.Sub(lost)), since(firstStart, refused), since(firstDone, refused))
	}
	if firstDone.IsZero() {
		t.Errorf("no run completed after the primary was lost")
	}
}

// noteFailedAttempts notes the failed attempts recorded of the runs, by error type, and
// fails on any but a timeout.
func (s *scenario) noteFailedAttempts(ids []string) {
	byType := map[string]int{}
	rows, _ := s.f.db.Query(s.ctx, `SELECT coalesce(error->>'type', ''), count(*) FROM stepgate.attempt_failure
		WHERE run_id = ANY($1::uuid[]) GROUP BY 1`, ids)
	for rows.Next() {
		var typ string
		var n int
		if err := rows.Scan(&typ, &n); err != nil {
			s.t.Fatal(err)
		}
		byType[typ] = n
	}
	if err := rows.Err(); err != nil {
		s.t.Fatalf("read failed attempts: %v", err)
	}
	s.note("failed attempts recorded (retried; an invocation in flight through the outage may time out): %s", fmtCounts(byType))
	for typ, n := range byType {
		if typ != "timeout" {
			s.t.Errorf("%d failed attempts of type %q recorded; only timeouts are expected of the outage", n, typ)
		}
	}
}

// checkUnavailableAnswers checks the API's answers from lost until promoted, when no
// primary was reachable: 503 with Retry-After, at least once, and never 500. A 500
// afterwards, while the pools reconnect, fails too.
func (s *scenario) checkUnavailableAnswers(answers []apiAnswer, lost, promoted time.Time) {
	t := s.t
	during := map[string]int{}
	var fivehundreds, unavailable, without int
	for _, a := range answers {
		if a.at.Before(lost) {
			continue
		}
		if a.status == http.StatusInternalServerError {
			fivehundreds++
		}
		if a.at.After(promoted) {
			continue
		}
		during[a.what()]++
		if a.status == http.StatusServiceUnavailable {
			unavailable++
			if a.retryAfter == "" {
				without++
			}
		}
	}
	s.note("API answers while no primary was reachable: %s", fmtCounts(during))
	if fivehundreds > 0 {
		t.Errorf("the API answered 500 %d times after the primary was lost; want 503 with Retry-After", fivehundreds)
	}
	if without > 0 {
		t.Errorf("the API answered 503 without Retry-After %d times", without)
	}
	if unavailable == 0 {
		t.Errorf("the API never answered 503 while no primary was reachable (answers: %s)", fmtCounts(during))
	}
}

// startAttempt is one start request of the probe: when it was sent and answered, and
// the run id of a 2xx.
type startAttempt struct {
	apiAnswer
	answered time.Time
	runID    string
}

func startAnswers(sts []startAttempt) []apiAnswer {
	out := make([]apiAnswer, len(sts))
	for i, st := range sts {
		out[i] = st.apiAnswer
	}
	return out
}

type startProbe struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	tries  []startAttempt
}

// probeStarts starts a run of function with input through each gateway in turn, every
// 50ms, one request each (no retry: a fresh Idempotency-Key each time), until stopped.
func (s *scenario) probeStarts(function string, input any) *startProbe {
	ctx, cancel := context.WithCancel(s.ctx)
	p := &startProbe{cancel: cancel}
	p.wg.Go(func() {
		for i := 0; ctx.Err() == nil; i++ {
			g := s.f.gws[i%len(s.f.gws)]
			at := time.Now()
			cctx, done := context.WithTimeout(ctx, 2*time.Second)
			resp, b, err := s.f.call(cctx, g, http.MethodPost, "/v1/functions/"+function+"/runs", input,
				http.Header{"Idempotency-Key": {rand.Text()}})
			done()
			if ctx.Err() != nil {
				return
			}
			st := startAttempt{apiAnswer: apiAnswer{at: at, gateway: g.name}, answered: time.Now()}
			if err == nil {
				st.status, st.retryAfter = resp.StatusCode, resp.Header.Get("Retry-After")
				if resp.StatusCode/100 == 2 {
					var run struct {
						ID string `json:"id"`
					}
					if json.Unmarshal(b, &run) == nil {
						st.runID = run.ID
					}
				}
			}
			p.mu.Lock()
			p.tries = append(p.tries, st)
			p.mu.Unlock()
			pause(ctx, 50*time.Millisecond)
		}
	})
	return p
}

// firstOK returns when the first start sent after since was acknowledged with a run
// id, or the zero time.
func (p *startProbe) firstOK(since time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	var first time.Time
	for _, st := range p.tries {
		if st.runID != "" && st.at.After(since) && (first.IsZero() || st.answered.Before(first)) {
			first = st.answered
		}
	}
	return first
}

// firstRefused returns when the first start sent after since was sent that was not
// acknowledged, or the zero time.
func (p *startProbe) firstRefused(since time.Time) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, st := range p.tries {
		if st.runID == "" && st.at.After(since) {
			return st.at
		}
	}
	return time.Time{}
}

func (p *startProbe) stop() []startAttempt {
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.tries)
}

// ownReplicatedPostgres starts a primary of the test's own on a loopback port, makes a
// database on it, and starts a synchronous streaming standby of it
// (synchronous_standby_names; synchronous_commit is on), on another port, once it
// streams synchronously. It returns both, with a superuser URL of the database that
// names both hosts with target_session_attrs=read-write: the gateways connect to
// whichever takes writes.
func ownReplicatedPostgres(t *testing.T) (primary, standby *pgserver.Server, url string) {
	t.Helper()
	mkdir := func() string {
		dir, err := os.MkdirTemp("", "sg-chaos-pg-")
		if err != nil {
			t.Fatal(err)
		}
		return dir
	}
	pdir, sdir := mkdir(), mkdir()
	t.Cleanup(func() {
		for _, srv := range []*pgserver.Server{standby, primary} {
			if srv != nil {
				_ = srv.Stop() // a lost primary reports its loss again
			}
		}
		if t.Failed() {
			t.Logf("postgres logs kept: %s, %s", pdir, sdir)
			return
		}
		os.RemoveAll(pdir)
		os.RemoveAll(sdir)
	})
	pport, sport := freePort(t), freePort(t)
	var err error
	primary, err = pgserver.Start(t.Context(), pgserver.Config{Dir: pdir, Port: pport,
		Settings: []string{"synchronous_standby_names=standby1", "synchronous_commit=on"}})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), primary.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.WithoutCancel(t.Context()))
	standby, err = pgserver.StartStandby(t.Context(), primary, "standby1", pgserver.Config{Dir: sdir, Port: sport})
	if err != nil {
		t.Fatal(err)
	}
	if err := waitFor(t.Context(), time.Minute, "the standby streams synchronously", func() (bool, error) {
		var state string
		err := conn.QueryRow(t.Context(), `SELECT sync_state FROM pg_stat_replication
			WHERE application_name = 'standby1' AND state = 'streaming'`).Scan(&state)
		return err == nil && state == "sync", err
	}); err != nil {
		t.Fatal(err)
	}
	// Once the standby streams: a commit on the primary waits for it.
	if _, err := conn.Exec(t.Context(), `CREATE DATABASE chaos`); err != nil {
		t.Fatal(err)
	}
	hosts := strings.Join([]string{primary.HostPort(), standby.HostPort()}, ",")
	return primary, standby, "postgres://postgres@" + hosts + "/chaos?sslmode=disable&target_session_attrs=read-write"
}

// sentRecord holds the events and messages the API acknowledged (2xx).
type sentRecord struct {
	mu       sync.Mutex
	events   []string    // event ids
	messages [][2]string // run id, message id
}

// payRecorded is pay that records each event the API acknowledged.
func (s *scenario) payRecorded(ctx context.Context, id, key string, sent *sentRecord) error {
	deadline := time.Now().Add(time.Minute)
	for try := 0; time.Now().Before(deadline); try++ {
		var took bool
		err := s.f.db.QueryRow(ctx, `SELECT status IN ('completed', 'failed', 'cancelled')
			OR EXISTS (SELECT 1 FROM stepgate.journal_entry WHERE run_id = $1 AND name = 'paid')
			FROM stepgate.run WHERE id = $1`, id).Scan(&took)
		if err == nil && took {
			return nil
		}
		g := s.f.gws[try%len(s.f.gws)]
		eid := key + "-" + strconv.Itoa(try)
		event := map[string]any{"name": paidEvent, "id": eid, "data": awaitInput{Key: key}}
		if resp, _, err := s.f.call(ctx, g, http.MethodPost, "/v1/events", event, nil); err == nil && resp.StatusCode/100 == 2 {
			sent.mu.Lock()
			sent.events = append(sent.events, eid)
			sent.mu.Unlock()
		}
		pause(ctx, 200*time.Millisecond)
	}
	return fmt.Errorf("run %s of %s took no %s event within a minute", id, fnAwait, paidEvent)
}

// messageRecorded sends run id a message (on a topic it never receives: its mailbox
// keeps it), retrying an unavailable API for up to a minute, and records it once
// acknowledged. A run that finished first takes none (409): nothing to record.
func (s *scenario) messageRecorded(ctx context.Context, id string, sent *sentRecord) error {
	mid := rand.Text()
	var last error
	deadline := time.Now().Add(time.Minute)
	for try := 0; time.Now().Before(deadline); try++ {
		g := s.f.gws[try%len(s.f.gws)]
		resp, b, err := s.f.call(ctx, g, http.MethodPost, "/v1/runs/"+id+"/messages",
			map[string]any{"topic": "chaos.note", "id": mid, "data": map[string]any{"try": try}}, nil)
		switch {
		case err != nil:
			last = err
		case resp.StatusCode/100 == 2:
			sent.mu.Lock()
			sent.messages = append(sent.messages, [2]string{id, mid})
			sent.mu.Unlock()
			return nil
		case resp.StatusCode == http.StatusConflict:
			return nil
		case resp.StatusCode >= 500:
			last = &apiError{resp.StatusCode, string(b)}
		default:
			return fmt.Errorf("message to run %s: %w", id, &apiError{resp.StatusCode, string(b)})
		}
		pause(ctx, 100*time.Millisecond)
	}
	return fmt.Errorf("message to run %s: not acknowledged within a minute: %w", id, last)
}

// checkSent checks that every event and message the API acknowledged is stored.
func (s *scenario) checkSent(sent *sentRecord) {
	t, ctx := s.t, s.ctx
	sent.mu.Lock()
	events, messages := slices.Clone(sent.events), slices.Clone(sent.messages)
	sent.mu.Unlock()
	var stored int
	if err := s.f.db.QueryRow(ctx, `SELECT count(*) FROM stepgate.event WHERE tenant = $1 AND id = ANY($2)`, tenant, events).
		Scan(&stored); err != nil {
		t.Fatalf("read events: %v", err)
	}
	lostEvents := len(events) - stored
	var runs, ids []string
	for _, m := range messages {
		runs, ids = append(runs, m[0]), append(ids, m[1])
	}
	if err := s.f.db.QueryRow(ctx, `SELECT count(*) FROM stepgate.message m
		JOIN unnest($1::uuid[], $2::text[]) AS sent(run_id, id) ON m.run_id = sent.run_id AND m.id = sent.id`, runs, ids).
		Scan(&stored); err != nil {
		t.Fatalf("read messages: %v", err)
	}
	lostMessages := len(messages) - stored
	s.note("events acknowledged: %d, lost: %d; messages acknowledged: %d, lost: %d", len(events), lostEvents, len(messages), lostMessages)
	if lostEvents > 0 {
		t.Errorf("%d events the API acknowledged are not stored after the failover", lostEvents)
	}
	if lostMessages > 0 {
		t.Errorf("%d messages the API acknowledged are not stored after the failover", lostMessages)
	}
}

// checkWaiters starts n runs after the failover and waits for the result of each on
// every gateway at once (GET /v1/runs/{id}/result?wait=10s, within the fleet client's
// timeout): the gateway that did not run it learns of its end from the notify hub's
// LISTEN connection only, so each must answer it completed, not 202 at the end of its
// wait. It returns the runs' ids.
func (s *scenario) checkWaiters(n int) []string {
	t := s.t
	ids, err := s.f.startMany(s.ctx, n, n, fnChain, func(int) any { return shortRun })
	if err != nil {
		t.Errorf("start the waited runs: %v", err)
		return ids
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	answered := map[string]int{}
	for _, id := range ids {
		for _, g := range s.f.gws {
			wg.Go(func() {
				var res struct {
					Status string `json:"status"`
				}
				ctx, cancel := context.WithTimeout(s.ctx, 90*time.Second)
				defer cancel()
				what := ""
				resp, b, err := s.f.call(ctx, g, http.MethodGet, "/v1/runs/"+id+"/result?wait=10s", nil, nil)
				switch {
				case err != nil:
					what = err.Error()
				case resp.StatusCode != http.StatusOK:
					what = statusText(resp.StatusCode)
				case json.Unmarshal(b, &res) != nil || res.Status != "completed":
					what = "HTTP 200 " + res.Status
				default:
					what = "completed"
				}
				mu.Lock()
				answered[what]++
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	s.note("waits for a run's result after the failover, on every gateway: %s", fmtCounts(answered))
	if answered["completed"] != n*len(s.f.gws) {
		t.Errorf("waits for a run's result after the failover: %s; want every one completed", fmtCounts(answered))
	}
	return ids
}

// checkTicks waits for want ticks of function's schedule after since (runs it created
// then), and notes how long after since the first came.
func (s *scenario) checkTicks(function string, since time.Time, want int) {
	var first time.Time
	err := waitFor(s.ctx, stuckAfter, fmt.Sprintf("%d ticks of the schedule after the promotion", want), func() (bool, error) {
		runs, err := s.f.runsOf(s.ctx, function)
		n := 0
		for _, run := range runs {
			if run.CreatedAt.After(since) {
				n++
				if first.IsZero() || run.CreatedAt.Before(first) {
					first = run.CreatedAt
				}
			}
		}
		return n >= want, err
	})
	if err != nil {
		s.t.Error(err)
	}
	if !first.IsZero() {
		s.note("the schedule (@every 1s) ticked again %s after the promotion", fmtDur(first.Sub(since)))
	}
}
