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

// A debounce's open window (stepgate.flow_debounce), a row per (tenant, function, key
// value), written in the transaction that starts the run; the rest of flow control's
// state (rates and throttles, the event's skipped starts, pruning) is journal/flow's.
// Concurrent starts of one key serialize on its row's lock. Times are the database clock's (the transaction's now()).

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
