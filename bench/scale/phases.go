package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stepgate/stepgate/protocol"
)

// The statements that count runs while a phase waits for them, and the database's size.
// They read; every run is started and moved through the gateway's API.
const (
	countWaitingEvents = `SELECT count(*) FROM stepgate.run_wait WHERE kind = 'wait_event'`
	countSuspended     = `SELECT count(*) FROM stepgate.run WHERE function = $1 AND status = 'suspended'`
	countFinishedSince = `SELECT count(*) FROM stepgate.run WHERE finished_at >= $1 AND function = $2`
	databaseSize       = `SELECT pg_database_size(current_database())`
)

// memory is the memory of the stack at one moment, in KiB (bytes for the database).
type memory struct {
	GatewayRSS, GatewayHeap, PostgresPSS int64
	DatabaseBytes                        int64
}

func (st *stack) memory(ctx context.Context) (memory, error) {
	m := memory{GatewayRSS: statusKB(st.gatewayPID, "VmRSS"), GatewayHeap: st.heapKB(ctx), PostgresPSS: st.postgresPSSKB()}
	err := st.db.QueryRow(ctx, databaseSize).Scan(&m.DatabaseBytes)
	return m, err
}

// idleCPU waits settle, then returns the CPU used per second over d.
func (st *stack) idleCPU(ctx context.Context, settle, d time.Duration) (cpu, error) {
	if err := sleepCtx(ctx, settle); err != nil {
		return cpu{}, err
	}
	c0, t0 := st.cpuNow(), time.Now()
	if err := sleepCtx(ctx, d); err != nil {
		return cpu{}, err
	}
	used, took := st.cpuNow().sub(c0), time.Since(t0)
	return cpu{perSecond(used.gateway, took), perSecond(used.postgres, took),
		perSecond(used.pgBackends, took), perSecond(used.pgVacuums, took)}, nil
}

func perSecond(d, over time.Duration) time.Duration {
	return time.Duration(float64(d) / over.Seconds())
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// startMany starts n runs of fn through the API, clients at a time, with body(i) as
// the input of the i-th, for timeout at most, and returns their ids in order.
func startMany(ctx context.Context, st *stack, clients, n int, timeout time.Duration, fn string, body func(i int) string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ids := make([]string, n)
	var next, failed atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range min(clients, n) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n && ctx.Err() == nil; i = int(next.Add(1)) - 1 {
				resp, err := st.client.StartRunWithBodyWithResponse(ctx, fn, &protocol.StartRunParams{}, "application/json", strings.NewReader(body(i)))
				switch {
				case err != nil:
					firstErr.CompareAndSwap(nil, err.Error())
					failed.Add(1)
				case resp.JSON202 == nil:
					firstErr.CompareAndSwap(nil, fmt.Sprintf("HTTP %d: %s", resp.StatusCode(), resp.Body))
					failed.Add(1)
				default:
					ids[i] = resp.JSON202.ID
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		return nil, fmt.Errorf("%d of %d starts of %s failed, the first: %v", f, n, fn, firstErr.Load())
	}
	return ids, ctx.Err()
}

// waitCount polls query (with args) every interval until it counts at least want, for
// timeout at most, logging progress every 10 s.
func waitCount(ctx context.Context, st *stack, timeout, interval time.Duration, want int64, what string, logf func(string, ...any), query string, args ...any) error {
	deadline := time.Now().Add(timeout)
	lastLog := time.Now()
	for {
		var n int64
		if err := st.db.QueryRow(ctx, query, args...).Scan(&n); err != nil {
			return fmt.Errorf("count %s: %w", what, err)
		}
		if n >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d %s after %s", n, want, what, timeout)
		}
		if time.Since(lastLog) >= 10*time.Second {
			logf("%d of %d %s", n, want, what)
			lastLog = time.Now()
		}
		if err := sleepCtx(ctx, interval); err != nil {
			return err
		}
	}
}

// suspendedReport is what holding many suspended runs costs.
type suspendedReport struct {
	Runs int
	// Accepted is from the first start to the last start's 202; Created to all of them
	// waiting (their wait stored).
	Accepted, Created time.Duration
	CreateCPU         cpu // consumed from the first start until all wait
	Before, Held      memory
	IdleBefore        cpu // per second, before the runs were started
	IdleHeld          cpu // per second, while they are held
}

func measureSuspended(ctx context.Context, st *stack, cfg config, logf func(string, ...any)) (*suspendedReport, error) {
	r := &suspendedReport{Runs: cfg.Suspended}
	var base int64
	if err := st.db.QueryRow(ctx, countWaitingEvents).Scan(&base); err != nil {
		return nil, err
	}
	logf("suspended: idle before, %s", cfg.Idle)
	var err error
	if r.IdleBefore, err = st.idleCPU(ctx, cfg.Settle, cfg.Idle); err != nil {
		return nil, err
	}
	if r.Before, err = st.memory(ctx); err != nil {
		return nil, err
	}
	prefix := fmt.Sprintf("held-%d", time.Now().UnixNano())
	logf("suspended: starting %d runs of orders.await_payment", cfg.Suspended)
	c0, t0 := st.cpuNow(), time.Now()
	if _, err := startMany(ctx, st, cfg.Clients, cfg.Suspended, cfg.PhaseTimeout, "orders.await_payment", func(i int) string {
		return fmt.Sprintf(`{"order_id":"%s-%d","timeout":"24h"}`, prefix, i)
	}); err != nil {
		return nil, err
	}
	r.Accepted = time.Since(t0)
	if err := waitCount(ctx, st, cfg.PhaseTimeout, 100*time.Millisecond, base+int64(cfg.Suspended), "runs waiting", logf, countWaitingEvents); err != nil {
		return nil, err
	}
	r.Created, r.CreateCPU = time.Since(t0), st.cpuNow().sub(c0)
	logf("suspended: all %d wait after %s; idle while held, %s after %s", cfg.Suspended, r.Created.Round(time.Millisecond), cfg.Idle, cfg.Settle)
	if r.IdleHeld, err = st.idleCPU(ctx, cfg.Settle, cfg.Idle); err != nil {
		return nil, err
	}
	r.Held, err = st.memory(ctx)
	return r, err
}

// quantiles are a sample's p50, p99 and max.
type quantiles struct{ P50, P99, Max time.Duration }

func summarize(xs []time.Duration) quantiles {
	if len(xs) == 0 {
		return quantiles{}
	}
	slices.Sort(xs)
	at := func(q float64) time.Duration { return xs[max(0, int(math.Ceil(q*float64(len(xs))))-1)] }
	return quantiles{at(0.50), at(0.99), xs[len(xs)-1]}
}

// wave is what a wave of runs that come due together costs, measured from just before
// its first run is due until all have ended.
type wave struct {
	CPU             cpu
	RSSBefore, Peak int64 // the gateway's, KiB
	PeakReset       bool  // Peak is VmHWM since the wave's start, not sampled
}

// watchWave starts measuring a wave; the function it returns ends the measurement.
func (st *stack) watchWave() func() wave {
	w := wave{RSSBefore: statusKB(st.gatewayPID, "VmRSS")}
	w.PeakReset = st.resetPeak()
	c0 := st.cpuNow()
	var sampled atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			if rss := statusKB(st.gatewayPID, "VmRSS"); rss > sampled.Load() {
				sampled.Store(rss)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	return func() wave {
		w.CPU = st.cpuNow().sub(c0)
		close(done)
		wg.Wait()
		w.Peak = sampled.Load()
		if w.PeakReset {
			w.Peak = max(w.Peak, statusKB(st.gatewayPID, "VmHWM"))
		}
		return w
	}
}

// sleepersReport is how a wave of sleeping runs due within one second wakes.
type sleepersReport struct {
	Runs int
	// Margin is from the start of the first run to the first wake time; Suspended from
	// the start of the first run to all of them suspended.
	Margin, Suspended time.Duration
	Late              quantiles // the step after the sleep's start − the sleep's wake time
	// AllDone is from the first wake time to the end of the last run to end.
	AllDone time.Duration
	Wave    wave
}

func measureSleepers(ctx context.Context, st *stack, cfg config, margin time.Duration, logf func(string, ...any)) (*sleepersReport, error) {
	n := cfg.Sleepers
	r := &sleepersReport{Runs: n, Margin: margin}
	t0 := time.Now()
	first := t0.Add(margin).Truncate(time.Millisecond)
	logf("sleepers: starting %d runs of nap, due from %s to 1s later (%s from now)", n, first.Format("15:04:05.000"), margin)
	ids, err := startMany(ctx, st, cfg.Clients, n, cfg.PhaseTimeout, "nap", func(i int) string {
		until := first.Add(time.Duration(i) * time.Second / time.Duration(n))
		return fmt.Sprintf(`{"until":%q}`, until.UTC().Format(time.RFC3339Nano))
	})
	if err != nil {
		return nil, err
	}
	if err := waitCount(ctx, st, cfg.PhaseTimeout, 100*time.Millisecond, int64(n), "runs of nap suspended", logf, countSuspended, "nap"); err != nil {
		return nil, err
	}
	r.Suspended = time.Since(t0)
	if left := time.Until(first); left < time.Second {
		return nil, fmt.Errorf("the sleepers were all suspended only %s before their first wake time; give -sleep-margin more than %s", left, margin)
	}
	logf("sleepers: all suspended after %s; waiting for the wave", r.Suspended.Round(time.Millisecond))
	if err := sleepCtx(ctx, time.Until(first.Add(-200*time.Millisecond))); err != nil {
		return nil, err
	}
	end := st.watchWave()
	err = waitCount(ctx, st, cfg.PhaseTimeout, 50*time.Millisecond, int64(n), "runs of nap finished", logf, countFinishedSince, t0, "nap")
	r.Wave = end()
	if err != nil {
		return nil, err
	}
	logf("sleepers: all ended; reading %d journals", n)
	late := make([]time.Duration, n)
	var last time.Time
	var mu sync.Mutex
	err = eachRun(ctx, st, cfg.Clients, ids, func(i int, run *protocol.RunDetail) error {
		var until, woke *time.Time
		for _, e := range run.Journal {
			switch {
			case e.Kind == protocol.EntryKindSleep && e.Name == "nap":
				until = e.Until
			case e.Kind == protocol.EntryKindStep && e.Name == "woke":
				woke = e.StartedAt
			}
		}
		if until == nil || woke == nil || run.FinishedAt == nil {
			return fmt.Errorf("run %s: no sleep's wake time, woke step's start or end in its journal", run.ID)
		}
		late[i] = woke.Sub(*until)
		mu.Lock()
		defer mu.Unlock()
		if run.FinishedAt.After(last) {
			last = *run.FinishedAt
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.Late, r.AllDone = summarize(late), last.Sub(first)
	return r, nil
}

// eachRun reads each run of ids (with its journal), clients at a time, and calls f with
// it; f may be called concurrently.
func eachRun(ctx context.Context, st *stack, clients int, ids []string, f func(i int, run *protocol.RunDetail) error) error {
	var next atomic.Int64
	errs := make(chan error, clients)
	var wg sync.WaitGroup
	for range min(clients, len(ids)) {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(ids) && ctx.Err() == nil; i = int(next.Add(1)) - 1 {
				resp, err := st.client.GetRunWithResponse(ctx, ids[i], &protocol.GetRunParams{JournalLimit: new(100)})
				if err == nil && resp.JSON200 == nil {
					err = fmt.Errorf("get run %s: HTTP %d: %s", ids[i], resp.StatusCode(), resp.Body)
				}
				if err == nil {
					err = f(i, resp.JSON200)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return errors.Join(<-errs, ctx.Err())
}

// fanoutReport is how one event resumes many runs waiting for it.
type fanoutReport struct {
	Runs, Resumed int
	Created       time.Duration // from the first start to all of them waiting
	Send          time.Duration // the event's POST, from sending to its answer
	Late          quantiles     // each run's end − the POST's answer
	AllDone       time.Duration // from the POST's answer to the last run's end
	Wave          wave
}

func measureFanout(ctx context.Context, st *stack, cfg config, logf func(string, ...any)) (*fanoutReport, error) {
	n := cfg.Fanout
	r := &fanoutReport{Runs: n}
	var base int64
	if err := st.db.QueryRow(ctx, countWaitingEvents).Scan(&base); err != nil {
		return nil, err
	}
	order := fmt.Sprintf("fanout-%d", time.Now().UnixNano())
	logf("fanout: starting %d runs of orders.await_payment waiting for the payment of %s", n, order)
	t0 := time.Now()
	ids, err := startMany(ctx, st, cfg.Clients, n, cfg.PhaseTimeout, "orders.await_payment", func(int) string {
		return fmt.Sprintf(`{"order_id":%q,"timeout":"1h"}`, order)
	})
	if err != nil {
		return nil, err
	}
	if err := waitCount(ctx, st, cfg.PhaseTimeout, 100*time.Millisecond, base+int64(n), "runs waiting", logf, countWaitingEvents); err != nil {
		return nil, err
	}
	r.Created = time.Since(t0)
	logf("fanout: all wait after %s; sending the event after %s", r.Created.Round(time.Millisecond), min(cfg.Settle, 2*time.Second))
	if err := sleepCtx(ctx, min(cfg.Settle, 2*time.Second)); err != nil {
		return nil, err
	}
	end := st.watchWave()
	data := protocol.AnyJSON(fmt.Sprintf(`{"order_id":%q,"amount":1}`, order))
	sent := time.Now()
	resp, err := st.client.SendEventWithResponse(ctx, protocol.EventSend{Name: "orders.paid", Data: &data})
	answered := time.Now()
	if err == nil && resp.JSON202 == nil {
		err = fmt.Errorf("send the event: HTTP %d: %s", resp.StatusCode(), resp.Body)
	}
	if err != nil {
		end()
		return nil, err
	}
	r.Send = answered.Sub(sent)
	if resp.JSON202.Resumed != nil {
		r.Resumed = len(*resp.JSON202.Resumed)
	}
	err = waitCount(ctx, st, cfg.PhaseTimeout, 50*time.Millisecond, int64(n), "runs of orders.await_payment finished", logf, countFinishedSince, sent, "orders.await_payment")
	r.Wave = end()
	if err != nil {
		return nil, err
	}
	if r.Resumed != n {
		return r, fmt.Errorf("the event resumed %d runs, not %d", r.Resumed, n)
	}
	logf("fanout: all ended; reading %d runs", n)
	late := make([]time.Duration, n)
	err = eachRun(ctx, st, cfg.Clients, ids, func(i int, run *protocol.RunDetail) error {
		if run.Status != protocol.RunStatusCompleted || run.FinishedAt == nil {
			return fmt.Errorf("run %s: %s, not completed", run.ID, run.Status)
		}
		late[i] = run.FinishedAt.Sub(answered)
		return nil
	})
	if err != nil {
		return nil, err
	}
	r.Late = summarize(late)
	r.AllDone = r.Late.Max
	return r, nil
}
