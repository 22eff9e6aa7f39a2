package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/stepgate/stepgate/protocol"
)

// benchSleepFunction is the example function --sleep-e2e runs: one durable sleep of
// its input's ms, nothing else.
const benchSleepFunction = "sleep"

// benchMaxSleepE2E bounds --sleep-e2e: its ?wait is the sleep plus 30s, at most 15m.
const benchMaxSleepE2E = 14*time.Minute + 30*time.Second

// benchSleepClock is the caveat printed with --sleep-e2e's phases.
const benchSleepClock = "phases mix the client's clock (request sent, response received) with the database's " +
	"(sleep journaled, wake time, run finished): meaningful only when they share one machine, as gateway, " +
	"Postgres and client do under stepgate dev"

// benchSleepE2E is a sleep's end-to-end lateness: runs of the function sleep started
// with ?wait, each timed from its request's sending to its response's receipt, less the
// sleep. Late is that, on the client's monotonic clock. The phases split it, on the
// wall clocks of the client and the database (see Clock):
//
//   - ToJournaled: request sent → the sleep journaled (the entry's finished_at: the
//     first invocation, from the start's request to its answer applied);
//   - WakeToFinished: the sleep's wake time (the entry's until) → the run's finished_at:
//     the timer firing, the second invocation and its finish. The API exposes no start
//     time of the second invocation (the run's started_at is the first's, and sleep has
//     no entry after its sleep), so this phase is not split further;
//   - FinishedToResponse: the run's finished_at → the response received: waking the
//     waiting request and its answer's trip.
//
// The journaling transaction computes the wake time as its own now() plus the sleep, so
// the three phases add up to Late (to the clocks' disagreement).
type benchSleepE2E struct {
	Function           string         `json:"function"`
	Sleep              string         `json:"sleep"`
	Runs               int            `json:"runs"`
	Errors             int            `json:"errors"`
	ErrorKinds         map[string]int `json:"error_kinds,omitempty"`
	Late               benchLatency   `json:"late"`
	ToJournaled        benchLatency   `json:"request_to_journaled"`
	WakeToFinished     benchLatency   `json:"wake_to_finished"`
	FinishedToResponse benchLatency   `json:"finished_to_response"`
	Clock              string         `json:"clock"`
	PerRun             []sleepE2ERun  `json:"per_run"`
	late, toJournaled  latencyStats
	wakeToFinished     latencyStats
	finishedToResponse latencyStats
}

// sleepE2ERun is one run of --sleep-e2e: its times, and its phases as in benchSleepE2E.
type sleepE2ERun struct {
	RunID              string    `json:"run_id"`
	Sent               time.Time `json:"sent"`      // client clock
	Journaled          time.Time `json:"journaled"` // database clock: the sleep entry's finished_at
	Wake               time.Time `json:"wake"`      // database clock: the sleep entry's until
	Finished           time.Time `json:"finished"`  // database clock: the run's finished_at
	Received           time.Time `json:"received"`  // client clock
	Late               millis    `json:"late_ms"`
	ToJournaled        millis    `json:"request_to_journaled_ms"`
	WakeToFinished     millis    `json:"wake_to_finished_ms"`
	FinishedToResponse millis    `json:"finished_to_response_ms"`
}

// measureSleepE2E starts n runs of the function sleep that sleep for d, each with ?wait,
// one every spacing so their wake-ups do not all coincide, and reads each run and its
// journal for the phases. A run that does not complete, or whose journal does not show
// its sleep, is counted in Errors by why.
func measureSleepE2E(ctx context.Context, cl *protocol.ClientWithResponses, d time.Duration, n int, spacing time.Duration) *benchSleepE2E {
	out := &benchSleepE2E{Function: benchSleepFunction, Sleep: d.String(), Runs: n, Clock: benchSleepClock, ErrorKinds: map[string]int{}}
	input := fmt.Sprintf(`{"ms":%d}`, d.Milliseconds())
	wait := (d + 30*time.Second).String()
	var mu sync.Mutex
	var wg sync.WaitGroup
	tick := time.NewTicker(spacing)
	defer tick.Stop()
	for range n {
		wg.Go(func() {
			r, kind := sleepE2EOnce(ctx, cl, input, wait, d)
			mu.Lock()
			defer mu.Unlock()
			if kind != "" {
				out.Errors++
				if _, seen := out.ErrorKinds[kind]; !seen && len(out.ErrorKinds) >= benchMaxErrorKinds {
					kind = "other"
				}
				out.ErrorKinds[kind]++
				return
			}
			out.PerRun = append(out.PerRun, r)
		})
		select {
		case <-tick.C:
		case <-ctx.Done():
		}
	}
	wg.Wait()
	var late, toJournaled, wakeToFinished, finishedToResponse []time.Duration
	for _, r := range out.PerRun {
		late = append(late, time.Duration(r.Late))
		toJournaled = append(toJournaled, time.Duration(r.ToJournaled))
		wakeToFinished = append(wakeToFinished, time.Duration(r.WakeToFinished))
		finishedToResponse = append(finishedToResponse, time.Duration(r.FinishedToResponse))
	}
	out.late, out.toJournaled = summarize(late), summarize(toJournaled)
	out.wakeToFinished, out.finishedToResponse = summarize(wakeToFinished), summarize(finishedToResponse)
	out.Late, out.ToJournaled = newBenchLatency(out.late), newBenchLatency(out.toJournaled)
	out.WakeToFinished, out.FinishedToResponse = newBenchLatency(out.wakeToFinished), newBenchLatency(out.finishedToResponse)
	return out
}

// sleepE2EOnce starts one run of sleep with ?wait and reads its times; kind says why
// when it cannot.
func sleepE2EOnce(ctx context.Context, cl *protocol.ClientWithResponses, input, wait string, d time.Duration) (r sleepE2ERun, kind string) {
	sent := time.Now()
	resp, err := cl.StartRunWithBodyWithResponse(ctx, benchSleepFunction, &protocol.StartRunParams{Wait: &wait},
		"application/json", strings.NewReader(input))
	received := time.Now()
	if err != nil {
		return r, truncate(err.Error(), 120)
	}
	if code := resp.StatusCode(); code != http.StatusOK || resp.JSON200 == nil {
		return r, truncate(problemError(code, resp.Body).Error(), 120)
	}
	if ok, kind := benchResult(resp.JSON200); !ok {
		return r, kind
	}
	run, err := cl.GetRunWithResponse(ctx, resp.JSON200.ID, nil)
	if err != nil {
		return r, truncate("get run: "+err.Error(), 120)
	}
	if run.JSON200 == nil {
		return r, truncate("get run: "+problemError(run.StatusCode(), run.Body).Error(), 120)
	}
	j := run.JSON200.Journal
	if len(j) == 0 || j[0].Kind != protocol.EntryKindSleep || j[0].Until == nil || j[0].FinishedAt == nil || run.JSON200.FinishedAt == nil {
		return r, "the run's journal shows no sleep with its times"
	}
	// Wall clocks from here: the database's times have no monotonic reading.
	r = sleepE2ERun{
		RunID: resp.JSON200.ID, Sent: sent.Round(0), Received: received.Round(0),
		Journaled: *j[0].FinishedAt, Wake: *j[0].Until, Finished: *run.JSON200.FinishedAt,
		Late: millis(received.Sub(sent) - d),
	}
	r.ToJournaled = millis(r.Journaled.Sub(r.Sent))
	r.WakeToFinished = millis(r.Finished.Sub(r.Wake))
	r.FinishedToResponse = millis(r.Received.Sub(r.Finished))
	return r, ""
}
