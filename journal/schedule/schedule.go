// Package schedule holds the journal's schedules: a tenant's cron schedules of a function,
// their catch-up policy, and the claim of each tick, which starts one run.
package schedule

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
	"github.com/stepgate/stepgate/journal/storable"
)

// Schedule starts runs of a function on a cron expression, one run per tick, each
// with the schedule's input and the identity of whoever put the schedule.
type Schedule struct {
	ID       string
	Tenant   string
	Name     string
	Function string
	Cron     string
	Timezone string
	Input    json.RawMessage
	Identity journal.Identity
	// Generation counts the puts of the schedule: a tick of an older generation is
	// stale and does nothing.
	Generation int
	// Catchup and CatchupWindow say which ticks handled late start runs; see [Catchup].
	Catchup       Catchup
	CatchupWindow time.Duration
	NextAt        time.Time // The next tick, database clock.
	LastTickAt    *time.Time
	LastRunID     *string // The run the last tick started, if it started one.
	CreatedAt     time.Time
	UpdatedAt     time.Time
}

// Catchup is a schedule's policy for its missed ticks. A tick handled at most the
// schedule's catchup window after its time is on time and always starts its run,
// whatever the policy; ticks handled later than that were missed.
type Catchup string

// Catchup policies.
const (
	CatchupSkip Catchup = "skip" // Missed ticks start no run.
	CatchupOne  Catchup = "one"  // Missed ticks start one run together, for the earliest.
	CatchupAll  Catchup = "all"  // Each missed tick starts its own run.
)

// Bounds of a schedule's catchup window, which the schema enforces too. A window is
// stored to the millisecond.
const (
	MinCatchupWindow     = time.Second
	MaxCatchupWindow     = 24 * time.Hour
	DefaultCatchupWindow = time.Minute
)

// NewSchedule is what PutSchedule stores.
type NewSchedule struct {
	ID       string // A UUID chosen by the caller; kept when the schedule exists.
	Tenant   string
	Name     string
	Function string
	Cron     string
	Timezone string
	Input    json.RawMessage
	Identity journal.Identity
	Catchup  Catchup // Defaults to CatchupOne.
	// CatchupWindow is between MinCatchupWindow and MaxCatchupWindow. Defaults to
	// DefaultCatchupWindow.
	CatchupWindow time.Duration
	// Next returns the first tick after now. PutSchedule calls it with the database
	// clock. It must not return the zero time.
	Next func(now time.Time) time.Time
}

// PutSchedule creates the tenant's schedule n.Name, or replaces it: the new fields,
// identity and first tick, and the next generation, so that ticks already scheduled
// for it are stale. It returns the schedule and the database clock its first tick was
// computed from.
func PutSchedule(ctx context.Context, db journal.DB, n NewSchedule) (*Schedule, time.Time, error) {
	q := dbsqlc.New(db)
	clock, err := q.Clock(ctx)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("put schedule %s: read the clock: %w", n.Name, err)
	}
	next := n.Next(clock)
	if next.IsZero() {
		return nil, time.Time{}, fmt.Errorf("put schedule %s: %q has no next tick", n.Name, n.Cron)
	}
	row, err := q.SchedulePut(ctx, dbsqlc.SchedulePutParams{
		ID: n.ID, Tenant: n.Tenant, Name: n.Name, Function: n.Function, Cron: n.Cron, Timezone: n.Timezone,
		Input: n.Input, Identity: n.Identity, NextAt: next,
		Catchup:         string(cmp.Or(n.Catchup, CatchupOne)),
		CatchupWindowMs: cmp.Or(n.CatchupWindow, DefaultCatchupWindow).Milliseconds(),
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("put schedule %s: %w", n.Name, storable.Translate(err))
	}
	s := scheduleOf(row)
	return &s, clock, nil
}

// scheduleOf is the schedule a row of stepgate.schedule holds.
func scheduleOf(r dbsqlc.StepgateSchedule) Schedule {
	return Schedule{
		ID: r.ID, Tenant: r.Tenant, Name: r.Name, Function: r.Function, Cron: r.Cron, Timezone: r.Timezone,
		Input: r.Input, Identity: r.Identity, Generation: int(r.Generation),
		Catchup: Catchup(r.Catchup), CatchupWindow: time.Duration(r.CatchupWindowMs) * time.Millisecond,
		NextAt: r.NextAt, LastTickAt: r.LastTickAt, LastRunID: r.LastRunID,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}
}

// GetSchedule returns the tenant's schedule, or journal.ErrNotFound.
func GetSchedule(ctx context.Context, db journal.DB, tenant, name string) (*Schedule, error) {
	row, err := dbsqlc.New(db).ScheduleGet(ctx, dbsqlc.ScheduleGetParams{Tenant: tenant, Name: name})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, journal.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get schedule %s: %w", name, err)
	}
	s := scheduleOf(row)
	return &s, nil
}

// ListSchedules returns the tenant's schedules by name.
func ListSchedules(ctx context.Context, db journal.DB, tenant string) ([]Schedule, error) {
	rows, err := dbsqlc.New(db).ScheduleList(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	ss := make([]Schedule, len(rows))
	for i, r := range rows {
		ss[i] = scheduleOf(r)
	}
	return ss, nil
}

// DeleteSchedule deletes the tenant's schedule; its ticks already scheduled find
// nothing and do nothing. Runs it started are kept. It returns journal.ErrNotFound when there
// is no such schedule.
func DeleteSchedule(ctx context.Context, db journal.DB, tenant, name string) error {
	n, err := dbsqlc.New(db).ScheduleDelete(ctx, dbsqlc.ScheduleDeleteParams{Tenant: tenant, Name: name})
	if err != nil {
		return fmt.Errorf("delete schedule %s: %w", name, err)
	}
	if n == 0 {
		return journal.ErrNotFound
	}
	return nil
}

// ClaimTick locks the schedule for its tick at (any tenant's: the tick works by
// schedule id) until the transaction ends, and returns it with the database clock. It
// returns journal.ErrNotFound when the tick is stale: the schedule was deleted, put again
// (another generation), or this tick was handled already (next_at moved on), so that a
// tick that runs twice, or on two gateways at once, is handled once. The tick may not
// be due yet (NextAt after the clock): the caller checks. db must be a transaction.
func ClaimTick(ctx context.Context, db journal.DB, id string, generation int, at time.Time) (*Schedule, time.Time, error) {
	row, err := dbsqlc.New(db).ScheduleClaimTick(ctx, dbsqlc.ScheduleClaimTickParams{ID: id, Generation: int32(generation), NextAt: at})
	return claimedTick(dbsqlc.ScheduleTryClaimTickRow(row), err, id, at)
}

// TryClaimTick is ClaimTick that does not wait for a transaction that holds the
// schedule (handling this tick, or putting it again): it returns journal.ErrNotFound at once.
func TryClaimTick(ctx context.Context, db journal.DB, id string, generation int, at time.Time) (*Schedule, time.Time, error) {
	row, err := dbsqlc.New(db).ScheduleTryClaimTick(ctx, dbsqlc.ScheduleTryClaimTickParams{ID: id, Generation: int32(generation), NextAt: at})
	return claimedTick(row, err, id, at)
}

func claimedTick(row dbsqlc.ScheduleTryClaimTickRow, err error, id string, at time.Time) (*Schedule, time.Time, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, time.Time{}, journal.ErrNotFound
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("claim tick %s of schedule %s: %w", at.Format(time.RFC3339), id, err)
	}
	s := scheduleOf(row.StepgateSchedule)
	return &s, row.Clock, nil
}

// Tick is the next tick of a schedule, as ClaimTick takes it.
type Tick struct {
	ScheduleID string
	Generation int
	At         time.Time
}

// OverdueTicks returns the next ticks of schedules (any tenant's, with the system role)
// that are more than late past the database clock (the transaction's), the most overdue
// first, at most limit of them. It reads only those, from an index on next_at.
func OverdueTicks(ctx context.Context, db journal.DB, late time.Duration, limit int) ([]Tick, error) {
	rows, err := dbsqlc.New(db).ScheduleOverdueTicks(ctx, dbsqlc.ScheduleOverdueTicksParams{LateUs: late.Microseconds(), MaxTicks: int32(limit)})
	if err != nil {
		return nil, fmt.Errorf("list overdue ticks: %w", err)
	}
	ticks := make([]Tick, len(rows))
	for i, r := range rows {
		ticks[i] = Tick{ScheduleID: r.ID, Generation: int(r.Generation), At: r.NextAt}
	}
	return ticks, nil
}

// AdvanceSchedule records the last tick at handled of a schedule claimed by ClaimTick,
// and the run it started (nil for none), and moves its next tick to next.
func AdvanceSchedule(ctx context.Context, db journal.DB, id string, at time.Time, runID *string, next time.Time) error {
	err := dbsqlc.New(db).ScheduleAdvance(ctx, dbsqlc.ScheduleAdvanceParams{ID: id, LastTickAt: &at, LastRunID: runID, NextAt: next})
	if err != nil {
		return fmt.Errorf("advance schedule %s: %w", id, err)
	}
	return nil
}
