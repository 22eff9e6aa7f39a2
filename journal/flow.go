package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// Flow control's state: a throttle's or a rate limit's GCRA state (stepgate.flow_rate)
// and a debounce's open window (stepgate.flow_debounce), a row per (tenant, function,
// key value), written in the transaction that starts the run. Concurrent starts of one
// key serialize on its row's lock, so a rate holds however many gateways start runs.
// Times are the database clock's (the transaction's now()).

// Rate is a GCRA rate: one start per Interval, Burst more at once.
type Rate struct {
	Interval time.Duration // Period / limit.
	Burst    int
}

func (r Rate) tau() time.Duration { return time.Duration(r.Burst) * r.Interval }

// Throttle takes a place in a throttle's queue for one start of key: start is when the
// rate allows it (now, or later), and the key's state moves one interval on. When the
// start would come more than ahead from now (the queue is full: ahead is max_queue
// intervals, or less), it takes nothing and returns ok=false and retryAfter, how long
// until a place frees. One statement (two when full).
func Throttle(ctx context.Context, db DB, tenant, function, key string, r Rate, ahead time.Duration) (start, now time.Time, retryAfter time.Duration, ok bool, err error) {
	q := dbsqlc.New(db)
	row, err := q.FlowThrottle(ctx, dbsqlc.FlowThrottleParams{
		Tenant: tenant, Function: function, Key: key,
		IntervalUs: r.Interval.Microseconds(), TauUs: r.tau().Microseconds(), AheadUs: ahead.Microseconds(),
	})
	if err == nil {
		return row.StartAt, row.Now, 0, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return start, now, 0, false, fmt.Errorf("throttle %s: %w", function, err)
	}
	us, err := q.FlowThrottleRetryAfter(ctx, dbsqlc.FlowThrottleRetryAfterParams{
		Tenant: tenant, Function: function, Key: key, TauUs: r.tau().Microseconds(), AheadUs: ahead.Microseconds(),
	})
	if err != nil {
		return start, now, 0, false, fmt.Errorf("throttle %s: %w", function, err)
	}
	return start, now, time.Duration(us) * time.Microsecond, false, nil
}

// TakeRate takes one start of key from a rate limit: ok when the rate allows it now
// (the key's state moves one interval on), else ok=false and retryAfter, how long
// until it does, and nothing changes. One statement (two when refused).
func TakeRate(ctx context.Context, db DB, tenant, function, key string, r Rate) (retryAfter time.Duration, ok bool, err error) {
	q := dbsqlc.New(db)
	n, err := q.FlowTakeRate(ctx, dbsqlc.FlowTakeRateParams{
		Tenant: tenant, Function: function, Key: key, IntervalUs: r.Interval.Microseconds(), TauUs: r.tau().Microseconds(),
	})
	if err != nil {
		return 0, false, fmt.Errorf("rate limit %s: %w", function, err)
	}
	if n == 1 {
		return 0, true, nil
	}
	us, err := q.FlowRateRetryAfter(ctx, dbsqlc.FlowRateRetryAfterParams{
		Tenant: tenant, Function: function, Key: key, TauUs: r.tau().Microseconds(),
	})
	if err != nil {
		return 0, false, fmt.Errorf("rate limit %s: %w", function, err)
	}
	return time.Duration(us) * time.Microsecond, false, nil
}

// DebounceStart is one start of a debounced function.
type DebounceStart struct {
	Tenant, Function, Key string
	RunID                 string // The id of the run to create when no window is open.
	Input                 json.RawMessage
	Identity              Identity
	Period, MaxWait       time.Duration
}

// Debounce applies a start to the key's debounce window. When a window is open (its
// run is still scheduled), the start collapses into that run: its input and identity
// become the start's, and its start time moves to now + Period, but never past the
// window's first start + MaxWait; Debounce returns that run. Otherwise it opens a
// window for d.RunID and returns nil and startAt, now + Period: the caller creates that
// run, scheduled then, in the same transaction. Starts of one key serialize on the
// window's row, and a collapse on the run's row, so a run claimed meanwhile (no longer
// scheduled) takes no input from a later start, which opens the next window instead.
// Two statements.
func Debounce(ctx context.Context, db DB, d DebounceStart) (collapsed *Run, startAt time.Time, err error) {
	q := dbsqlc.New(db)
	w, err := q.FlowDebounceOpen(ctx, dbsqlc.FlowDebounceOpenParams{
		Tenant: d.Tenant, Function: d.Function, Key: d.Key, RunID: d.RunID, PeriodUs: d.Period.Microseconds(),
	})
	if err != nil {
		return nil, startAt, fmt.Errorf("debounce %s: %w", d.Function, err)
	}
	startAt = w.StartAt
	if w.Fresh {
		return nil, startAt, nil
	}
	identity, err := json.Marshal(d.Identity)
	if err != nil {
		return nil, startAt, fmt.Errorf("debounce %s: %w", d.Function, unstorable(err))
	}
	row, err := q.FlowDebounceCollapse(ctx, dbsqlc.FlowDebounceCollapseParams{
		Tenant: d.Tenant, Function: d.Function, Key: d.Key, RunID: w.RunID, NewRunID: d.RunID,
		PeriodUs: d.Period.Microseconds(), MaxWaitUs: d.MaxWait.Microseconds(), Input: d.Input, Identity: identity,
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, startAt, nil
	}
	if err == nil {
		collapsed, err = storedRun(dbsqlc.RunsByIDRow(row))
	}
	if err != nil {
		return nil, startAt, fmt.Errorf("debounce %s: %w", d.Function, unstorable(err))
	}
	return collapsed, startAt, nil
}

// SkippedStart is a run an event's trigger did not start, and why.
type SkippedStart struct {
	Function string `json:"function"`
	Reason   string `json:"reason"`
}

// CompleteEvent adds runs, started by flow control, to the event's runs, and skipped to
// its skipped, in the transaction that stored it.
func CompleteEvent(ctx context.Context, db DB, tenant, id string, runs []string, skipped []SkippedStart) error {
	var sk json.RawMessage
	if len(skipped) > 0 {
		var err error
		if sk, err = json.Marshal(skipped); err != nil {
			return fmt.Errorf("complete event %s: %w", id, err)
		}
	}
	err := dbsqlc.New(db).FlowCompleteEvent(ctx, dbsqlc.FlowCompleteEventParams{Tenant: tenant, ID: id, Runs: runs, Skipped: sk})
	if err != nil {
		return fmt.Errorf("complete event %s: %w", id, err)
	}
	return nil
}

// PruneFlow deletes up to limit rows of flow-control state that no longer count: rates
// whose bucket has been empty a minute (the same as no row), debounce windows opened
// more than 25 hours ago (past any max_wait, so their runs are due), and concurrency
// counters at 0 with no run waiting. A row a start updates meanwhile is kept. It returns
// the rows deleted. It also wakes, under lock, the held runs of up to limit concurrency
// keys that a freed slot can take (the backstop of counted keys' refills; docs/concurrency.md).
func PruneFlow(ctx context.Context, db DB, limit int) (int64, error) {
	q := dbsqlc.New(db)
	n, err := q.FlowPrune(ctx, int64(limit))
	if err != nil {
		return 0, fmt.Errorf("prune flow state: %w", err)
	}
	// The backstop of the wakes that counted keys' refills may miss (docs/concurrency.md), in
	// a transaction of its own: it waits for locks, and holds none of the prune's.
	if err := q.FlowRefillHeldLines(ctx, int32(limit)); err != nil {
		return n, fmt.Errorf("refill concurrency lines: %w", err)
	}
	return n, nil
}
