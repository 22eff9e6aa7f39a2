package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/stepgate/stepgate/protocol"
)

// benchSleep is how late runs wake from a durable sleep: the time from a sleep's wake
// time (database clock, journaled) to the start of the step after it (the function's
// clock; both on one machine here).
type benchSleep struct {
	Function string       `json:"function"`
	Sleep    string       `json:"sleep"`
	Runs     int          `json:"runs"`
	Errors   int          `json:"errors"`
	Latency  benchLatency `json:"late"`
	stats    latencyStats
}

// measureSleep starts n runs of fn (orders.checkout, or orders.checkout_inline, which
// waits out short sleeps in its process) that sleep for d between charge and ship, one
// every spacing so their wake-ups do not all coincide, waits for each, and reads each
// run's journal to see how late it woke.
func measureSleep(ctx context.Context, cl *protocol.ClientWithResponses, fn string, d time.Duration, n int, spacing time.Duration) *benchSleep {
	out := &benchSleep{Function: fn, Sleep: d.String(), Runs: n}
	input := fmt.Sprintf(`{"sleep_ms":%d}`, d.Milliseconds())
	wait := (d + 30*time.Second).String()
	var mu sync.Mutex
	var late []time.Duration
	var wg sync.WaitGroup
	tick := time.NewTicker(spacing)
	defer tick.Stop()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, ok := sleepOnce(ctx, cl, fn, input, wait)
			mu.Lock()
			defer mu.Unlock()
			if !ok {
				out.Errors++
				return
			}
			late = append(late, l)
		}()
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	wg.Wait()
	out.stats = summarize(late)
	out.Latency = newBenchLatency(out.stats)
	return out
}

func sleepOnce(ctx context.Context, cl *protocol.ClientWithResponses, fn, input, wait string) (time.Duration, bool) {
	resp, err := cl.StartRunWithBodyWithResponse(ctx, fn, &protocol.StartRunParams{Wait: &wait},
		"application/json", strings.NewReader(input))
	if err != nil || resp.JSON200 == nil || resp.JSON200.Status != protocol.RunStatusCompleted {
		return 0, false
	}
	run, err := cl.GetRunWithResponse(ctx, resp.JSON200.ID, nil)
	if err != nil || run.JSON200 == nil {
		return 0, false
	}
	j := run.JSON200.Journal
	for i, e := range j {
		if e.Kind == protocol.EntryKindSleep && e.Until != nil && i+1 < len(j) && j[i+1].StartedAt != nil {
			return j[i+1].StartedAt.Sub(*e.Until), true
		}
	}
	return 0, false
}
