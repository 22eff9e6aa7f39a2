package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/protocol"
)

// benchEvents is how fast an event resumes a run that waits for it: from the event's
// POST to the end of the run it resumed (orders.await_payment), one at a time, while
// Others other runs wait for the same event name with other keys.
type benchEvents struct {
	Runs    int          `json:"runs"`
	Others  int          `json:"others_waiting"`
	Errors  int          `json:"errors"`
	Latency benchLatency `json:"event_to_end"`
	stats   latencyStats
}

// benchEventFunction is the example function the event benchmark runs.
const benchEventFunction = "orders.await_payment"

// measureEvents starts others runs that wait (their payments never come), waits until
// they all wait, then measures n runs one at a time: start one, wait until it waits,
// send its event, and time the event's POST to the run's end.
func measureEvents(ctx context.Context, cl *protocol.ClientWithResponses, databaseURL string, n, others int, stderr func(string, ...any)) (*benchEvents, error) {
	out := &benchEvents{Runs: n, Others: others}
	if others > 0 {
		if databaseURL == "" {
			return nil, fmt.Errorf("bench: --event-waiters needs --database-url (or DATABASE_URL) to count the waiting runs")
		}
		stderr("bench: starting %d runs of %s that wait\n", others, benchEventFunction)
		if err := startWaiters(ctx, cl, others); err != nil {
			return nil, err
		}
		if err := awaitWaiting(ctx, databaseURL, others, stderr); err != nil {
			return nil, err
		}
	}
	stderr("bench: %d events, one at a time, each resuming one run\n", n)
	var samples []time.Duration
	prefix := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	for i := range n {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		d, ok := eventOnce(ctx, cl, fmt.Sprintf("%s-%d", prefix, i))
		if !ok {
			out.Errors++
			continue
		}
		samples = append(samples, d)
	}
	out.stats = summarize(samples)
	out.Latency = newBenchLatency(out.stats)
	return out, nil
}

// startWaiters starts n runs of benchEventFunction, 32 at a time, with order ids no
// event will carry.
func startWaiters(ctx context.Context, cl *protocol.ClientWithResponses, n int) error {
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	prefix := fmt.Sprintf("other-%d", time.Now().UnixNano())
	for range 32 {
		wg.Go(func() {
			for i := next.Add(1); i <= int64(n) && ctx.Err() == nil; i = next.Add(1) {
				body := fmt.Sprintf(`{"order_id":"%s-%d","timeout":"24h"}`, prefix, i)
				resp, err := cl.StartRunWithBodyWithResponse(ctx, benchEventFunction, &protocol.StartRunParams{}, "application/json", strings.NewReader(body))
				if err != nil || resp.JSON202 == nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if f := failed.Load(); f > 0 {
		return fmt.Errorf("bench: %d of %d waiting runs did not start", f, n)
	}
	return ctx.Err()
}

// awaitWaiting waits until at least n runs wait for an event.
func awaitWaiting(ctx context.Context, databaseURL string, n int, stderr func(string, ...any)) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("bench: connect to count the waiting runs: %w", err)
	}
	defer conn.Close(context.Background())
	for last := -1; ; {
		var waiting int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM stepgate.run_wait WHERE kind = 'wait_event'`).Scan(&waiting); err != nil {
			return fmt.Errorf("bench: count the waiting runs: %w", err)
		}
		if waiting >= n {
			return nil
		}
		if waiting != last {
			stderr("bench: %d runs wait\n", waiting)
			last = waiting
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// eventOnce starts a run that waits for orderID's payment, waits until it waits, sends
// the payment, and returns the time from the event's POST to the run's end.
func eventOnce(ctx context.Context, cl *protocol.ClientWithResponses, orderID string) (time.Duration, bool) {
	body := fmt.Sprintf(`{"order_id":%q,"timeout":"1h"}`, orderID)
	start, err := cl.StartRunWithBodyWithResponse(ctx, benchEventFunction, &protocol.StartRunParams{}, "application/json", strings.NewReader(body))
	if err != nil || start.JSON202 == nil {
		return 0, false
	}
	id := start.JSON202.ID
	for deadline := time.Now().Add(30 * time.Second); ; {
		run, err := cl.GetRunWithResponse(ctx, id, &protocol.GetRunParams{JournalLimit: new(1)})
		if err != nil || run.JSON200 == nil || time.Now().After(deadline) {
			return 0, false
		}
		if run.JSON200.Awaiting != nil {
			break
		}
		time.Sleep(2 * time.Millisecond) // a benchmark's setup, not a test
	}
	data := protocol.AnyJSON(fmt.Sprintf(`{"order_id":%q,"amount":1}`, orderID))
	began := time.Now()
	sent, err := cl.SendEventWithResponse(ctx, protocol.EventSend{Name: "orders.paid", Data: &data})
	if err != nil || sent.JSON202 == nil || sent.JSON202.Resumed == nil {
		return 0, false
	}
	res, err := cl.GetRunResultWithResponse(ctx, id, &protocol.GetRunResultParams{Wait: new(benchWait)})
	if err != nil || res.JSON200 == nil || res.JSON200.Status != protocol.RunStatusCompleted {
		return 0, false
	}
	return time.Since(began), true
}
