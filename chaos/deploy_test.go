package chaos_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// testRollingDeploy restarts the gateways one at a time with SIGTERM, as an ordinary
// deploy does (three deploys in the long suite), while long runs progress and more are
// started. A deploy must cost nothing: each stopped gateway drains (the invocations in
// flight finish on it, their checkpoints still reach it) and exits 0, and every run
// completes with no failed attempt (the issue saw all 6 long runs fail: shutdown closed
// the listener first, so in-flight checkpoints were refused).
func testRollingDeploy(t *testing.T) {
	s := newScenario(t, fleetConfig{})
	r := newRand(t)
	first, err := s.f.startMany(s.ctx, size(4, 6), 6, fnChain, func(int) any { return midRun })
	if err != nil {
		t.Fatal(err)
	}
	l := s.startLoad(size(700*time.Millisecond, 500*time.Millisecond), fnChain, func(int) any { return midRun })
	var stops []interruption
	for d := range size(1, 3) {
		for _, g := range s.f.gws {
			pause(s.ctx, between(r, 500*time.Millisecond, 1500*time.Millisecond))
			k, ok := s.deploy(g)
			if !ok {
				t.Fatalf("deploy %d: %s did not come back", d+1, g.name)
			}
			stops = append(stops, k)
		}
	}
	ids, err := l.stop()
	if err != nil {
		t.Errorf("starting runs: %v", err)
	}
	ids = append(first, ids...)
	runs := s.settle(ids, stuckAfter, completedWithoutFailure)
	s.checkNoFailedAttempts(ids)
	for _, k := range stops {
		s.checkDrained(k)
	}
	s.reportRecoveries(stops, runs, recoveryBound)
}

// testSIGTERMUnderLoad stops one gateway with SIGTERM while it has many invocations in
// flight (12 in the long suite, as in the issue), and checks that every one of them
// finishes on it before it exits 0 (the issue saw 0 of 12 drained), and that every run
// completes with no failed attempt.
func testSIGTERMUnderLoad(t *testing.T) {
	s := newScenario(t, fleetConfig{})
	want := size(6, 12)
	ids, err := s.f.startMany(s.ctx, 3*want, 8, fnChain, func(int) any { return midRun })
	if err != nil {
		t.Fatal(err)
	}
	// River spreads the runs over the gateways as it likes: stop the busiest, once it has
	// `want` invocations in flight (or at least one, after a while).
	r := newRand(t)
	err = waitFor(s.ctx, 20*time.Second, fmt.Sprintf("a gateway has %d invocations in flight", want), func() (bool, error) {
		_, n := s.busiest(r)
		return n >= want, nil
	})
	g, n := s.busiest(r)
	if err != nil {
		if n == 0 {
			t.Fatal(err)
		}
		s.note("%v; stopping %s with %d", err, g.name, n)
	}
	k, _ := s.stop(g)
	s.settle(ids, stuckAfter, completedWithoutFailure)
	s.checkNoFailedAttempts(ids)
	s.checkDrained(k)
}

// deploy stops g with SIGTERM (see stop) and starts it again.
func (s *scenario) deploy(g *gateway) (interruption, bool) {
	k, _ := s.stop(g)
	if err := g.start(s.ctx); err != nil {
		s.t.Error(err)
		return k, false
	}
	return k, true
}

// stop sends g SIGTERM and waits for it to exit, which it must do with status 0 within
// its drain timeout. While it drains, /healthz must not answer 200 (a load balancer
// takes it out), unless it already stopped listening.
func (s *scenario) stop(g *gateway) (interruption, int) {
	t := s.t
	healthz := make(chan int, 1)
	go func() {
		// Give the signal a moment to arrive, then ask once.
		pause(s.ctx, 100*time.Millisecond)
		resp, err := (&http.Client{Timeout: time.Second}).Get(g.url + "/healthz")
		if err != nil {
			healthz <- 0
			return
		}
		resp.Body.Close()
		healthz <- resp.StatusCode
	}()
	code, at, err := g.terminate(drainTimeout + 15*time.Second)
	k := interruption{gateways: []string{g.name}, at: at, stop: true}
	if err != nil {
		t.Error(err)
		return k, code
	}
	took := g.current().ended.Sub(at)
	status := <-healthz
	s.note("SIGTERM %s: exited %d after %s; /healthz while draining: %s", g.name, code, took.Round(10*time.Millisecond), statusText(status))
	if code != 0 {
		t.Errorf("%s exited with status %d after SIGTERM, not 0", g.name, code)
	}
	if status == http.StatusOK && took > time.Second {
		t.Errorf("%s answered /healthz 200 while it drained", g.name)
	}
	return k, code
}

func statusText(code int) string {
	if code == 0 {
		return "no answer"
	}
	return fmt.Sprintf("HTTP %d", code)
}

// checkDrained checks that every invocation in flight on the stopped gateway at k
// finished there: the app answered it (HTTP 200), and its run needed no other
// invocation after k.
func (s *scenario) checkDrained(k interruption) {
	inflight := s.inFlight(k, 0)
	drained := 0
	var lost []string
	for _, inv := range inflight {
		_, status := inv.ended()
		if next := s.nextInvocation(inv.runID, k.at); status == http.StatusOK && next == nil {
			drained++
			continue
		} else if next != nil {
			lost = append(lost, fmt.Sprintf("run %s: answered %s, invoked again by %s %s later", inv.runID, statusText(status), next.gateway, next.start.Sub(k.at).Round(10*time.Millisecond)))
		} else {
			lost = append(lost, fmt.Sprintf("run %s: answered %s", inv.runID, statusText(status)))
		}
	}
	s.note("SIGTERM %s at +%s: %d of %d invocations in flight drained; checkpoints refused by all gateways: %s",
		k.gateways[0], k.at.Sub(s.began).Round(100*time.Millisecond), drained, len(inflight), s.refusals())
	if len(lost) > 0 {
		s.t.Errorf("SIGTERM %s: %d of %d invocations in flight did not finish on it, e.g. %s", k.gateways[0], len(lost), len(inflight), lost[0])
	}
}

func (s *scenario) refusals() string {
	s.a.rec.mu.Lock()
	defer s.a.rec.mu.Unlock()
	return fmtCounts(s.a.rec.refusals)
}
