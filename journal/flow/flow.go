// Package flow holds flow control's state: a throttle's or a rate limit's GCRA state
// (stepgate.flow_rate), a row per (tenant, function, key value), written in the
// transaction that starts the run, the runs an event's triggers started or skipped, and
// the pruning of the state that no longer counts. A debounce's window is the journal's
// (journal.Debounce: it returns the run it collapsed into).
package flow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// Concurrent starts of one key serialize on its row's lock, so a rate holds however
// many gateways start runs. Times are the database clock's (the transaction's now()).

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
func Throttle(ctx context.Context, db journal.DB, tenant, function, key string, r Rate, ahead time.Duration) (start, now time.Time, retryAfter time.Duration, ok bool, err error) {
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
func TakeRate(ctx context.Context, db journal.DB, tenant, function, key string, r Rate) (retryAfter time.Duration, ok bool, err error) {
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

// CompleteEvent adds runs, started by flow control, to the event's runs, and skipped to
// its skipped, in the transaction that stored it.
func CompleteEvent(ctx context.Context, db journal.DB, tenant, id string, runs []string, skipped []journal.SkippedStart) error {
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
func PruneFlow(ctx context.Context, db journal.DB, limit int) (int64, error) {
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
