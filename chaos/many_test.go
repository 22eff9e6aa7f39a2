package chaos_test

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
)

// Many gateways on one database (issue 44, item 4): 8 gateways, each with its River
// client, its listener and its maintenance passes, on one Postgres, directly or through
// PgBouncer. It measures the connections they hold (pg_stat_activity, per gateway by
// application_name, and in all), idle and under load; checks that one River leader is
// elected and stays one; counts the database's transactions a second while the fleet
// idles (the maintenance passes of every gateway: see invoker/internal/maintenance);
// and runs chains, durable sleeps and waits for events through every gateway, every
// one of which must complete (no wake-up lost).

// manyGateways is the fleet's size.
const manyGateways = 8

// testManyGateways: 8 gateways on the database directly.
func testManyGateways(t *testing.T) { testManyOnOne(t, false) }

// testManyGatewaysPgBouncer: 8 gateways through PgBouncer (transaction mode), LISTEN on
// a direct URL.
func testManyGatewaysPgBouncer(t *testing.T) { testManyOnOne(t, true) }

// manyPoolSize is PgBouncer's default_pool_size for the 8 gateways.
const manyPoolSize = 10

func testManyOnOne(t *testing.T, pooled bool) {
	direct := pgtest.DBURL(t)
	cfg := fleetConfig{DatabaseURL: direct, Gateways: manyGateways,
		EachEnv: func(i int) []string { return []string{fmt.Sprintf("PGAPPNAME=gw%d", i+1)} }}
	if pooled {
		cfg.DatabaseURL, cfg.CheckURL = startPgBouncer(t, direct, manyPoolSize), direct
		cfg.Env = []string{"STEPGATE_DATABASE_POOLER=transaction", "STEPGATE_DATABASE_LISTEN_URL=" + direct}
	}
	maxConns := cmp.Or(cfg.MaxConns, 12)
	s := newScenario(t, cfg)
	ctx := s.ctx

	// One leader, from the moment one is elected until the end: sampled throughout.
	leaders := &leaderWatch{}
	if err := waitFor(ctx, stuckAfter, "a River leader elected", func() (bool, error) {
		n, _, err := s.leader()
		return n == 1, err
	}); err != nil {
		t.Fatal(err)
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watching sync.WaitGroup
	watching.Go(func() { leaders.run(watchCtx, s) })

	// Idle: the connections, and the database's transactions a second (the maintenance
	// passes, River's leader and its producers' polls), over 10s.
	idleConns := s.connections(direct)
	idleTPS := s.transactionsPerSecond(10 * time.Second)

	// Under load: every gateway starts runs; the most connections seen.
	peak := &peakConns{}
	peakCtx, stopPeak := context.WithCancel(ctx)
	var sampling sync.WaitGroup
	sampling.Go(func() { peak.run(peakCtx, s, direct) })
	n := size(16, 48)
	var ids []string
	var mu sync.Mutex
	var wg sync.WaitGroup
	sent := &sentRecord{}
	for _, fn := range []string{fnChain, fnNap, fnAwait} {
		wg.Go(func() {
			got, err := s.f.startMany(ctx, n, 8, fn, func(int) any {
				switch fn {
				case fnChain:
					return shortRun
				case fnAwait:
					return awaitInput{Key: rand.Text()}
				}
				return struct{}{}
			})
			if err != nil {
				t.Errorf("start %s: %v", fn, err)
			}
			mu.Lock()
			ids = append(ids, got...)
			mu.Unlock()
		})
	}
	wg.Wait()
	awaits, err := s.f.runsOf(ctx, fnAwait)
	if err != nil {
		t.Fatal(err)
	}
	for id := range awaits {
		var key string
		if err := s.f.db.QueryRow(ctx, `SELECT input->>'key' FROM stepgate.run WHERE id = $1`, id).Scan(&key); err != nil {
			t.Fatal(err)
		}
		if err := s.payRecorded(ctx, id, key, sent); err != nil {
			t.Error(err)
		}
	}
	ids = append(ids, s.checkWaiters(2)...)
	s.settle(ids, stuckAfter, completedWithoutFailure)
	s.checkSent(sent)
	stopPeak()
	sampling.Wait()
	stopWatch()
	watching.Wait()

	// The figures.
	total := func(m map[string]int) int {
		n := 0
		for _, v := range m {
			n += v
		}
		return n
	}
	gatewaysOnly := func(m map[string]int) map[string]int {
		out := map[string]int{}
		for k, v := range m {
			if strings.HasPrefix(k, "gw") {
				out[k] = v
			}
		}
		return out
	}
	how := "directly"
	if pooled {
		how = fmt.Sprintf("through PgBouncer (default_pool_size=%d), LISTEN direct", manyPoolSize)
	}
	if pooled {
		s.note("%d gateways %s, STEPGATE_DB_MAX_CONNS=%d each: server connections idle %d, at most %d under load (the checks' pool of 4 among them)",
			manyGateways, how, maxConns, total(idleConns), peak.total)
	} else {
		s.note("%d gateways %s, STEPGATE_DB_MAX_CONNS=%d each: server connections idle %d (gateways' %s), at most %d under load (gateways' at most %d, by gateway at most %s)",
			manyGateways, how, maxConns, total(idleConns), fmtCounts(gatewaysOnly(idleConns)), peak.total, peak.gateways, fmtCounts(peak.byGateway))
	}
	s.note("River leader: %d elected over the test, never two at once (samples: %d, with none: %d); the database's transactions a second while the fleet idled: %.0f",
		len(leaders.ids), leaders.samples, leaders.none, idleTPS)
	if leaders.twoAtOnce {
		t.Errorf("two River leaders at once")
	}
	if len(leaders.ids) != 1 {
		t.Errorf("River's leader changed while every gateway ran: %v", slices.Collect(maps.Keys(leaders.ids)))
	}
	for g, c := range peak.byGateway {
		// Its pools, and River's notifier, which takes its connection out of the system
		// pool. Through PgBouncer a server connection carries the application_name of
		// the last client it served, so it is counted in all only.
		if !pooled && c > maxConns+1 {
			t.Errorf("%s held %d server connections; want at most %d", g, c, maxConns+1)
		}
	}
	if pooled && peak.total > manyPoolSize+4+2*manyGateways {
		t.Errorf("%d server connections through PgBouncer; want at most %d (its pool, the checks' 4, two LISTEN connections a gateway)",
			peak.total, manyPoolSize+4+2*manyGateways)
	}
}

// leader returns how many rows River's leader table holds, and the leader's id.
func (s *scenario) leader() (int, string, error) {
	var n int
	var id string
	err := s.f.db.QueryRow(s.ctx, `SELECT count(*), coalesce(max(leader_id), '') FROM river_leader`).Scan(&n, &id)
	return n, id, err
}

// leaderWatch samples River's leader every 100ms.
type leaderWatch struct {
	ids           map[string]bool
	samples, none int
	twoAtOnce     bool
}

func (w *leaderWatch) run(ctx context.Context, s *scenario) {
	w.ids = map[string]bool{}
	for ctx.Err() == nil {
		n, id, err := s.leader()
		if err == nil {
			w.samples++
			switch {
			case n == 0:
				w.none++
			case n > 1:
				w.twoAtOnce = true
			default:
				w.ids[id] = true
			}
		}
		pause(ctx, 100*time.Millisecond)
	}
}

// peakConns samples the server connections every 100ms, keeping the most seen.
type peakConns struct {
	total, gateways int
	byGateway       map[string]int
}

func (p *peakConns) run(ctx context.Context, s *scenario, direct string) {
	p.byGateway = map[string]int{}
	for ctx.Err() == nil {
		m := s.connectionsQuiet(direct)
		t, g := 0, 0
		for k, v := range m {
			t += v
			if strings.HasPrefix(k, "gw") {
				g += v
				p.byGateway[k] = max(p.byGateway[k], v)
			}
		}
		p.total, p.gateways = max(p.total, t), max(p.gateways, g)
		pause(ctx, 100*time.Millisecond)
	}
}

// connectionsQuiet is connections, returning nothing on an error (the scenario's
// context ending).
func (s *scenario) connectionsQuiet(direct string) map[string]int {
	out := map[string]int{}
	rows, err := s.f.db.Query(s.ctx, `SELECT coalesce(nullif(application_name, ''), backend_type), count(*)
		FROM pg_stat_activity WHERE datname = current_database() GROUP BY 1`)
	if err != nil {
		return out
	}
	for rows.Next() {
		var app string
		var n int
		if rows.Scan(&app, &n) == nil {
			out[app] = n
		}
	}
	return out
}

// transactionsPerSecond measures the database's committed transactions a second over
// d (pg_stat_database, whose counts the statistics collector flushes about every
// second), less the measuring's own.
func (s *scenario) transactionsPerSecond(d time.Duration) float64 {
	read := func() int64 {
		var n int64
		// A new snapshot of the statistics each time.
		_, _ = s.f.db.Exec(s.ctx, `SELECT pg_stat_clear_snapshot()`)
		if err := s.f.db.QueryRow(s.ctx, `SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`).Scan(&n); err != nil {
			s.t.Fatalf("read pg_stat_database: %v", err)
		}
		return n
	}
	a := read()
	began := time.Now()
	pause(s.ctx, d)
	b := read()
	return float64(b-a-2) / time.Since(began).Seconds()
}
