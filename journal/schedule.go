package journal

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Schedule starts runs of a function on a cron expression, one run per tick, each
// with the schedule's input and the identity of whoever put the schedule.
type Schedule struct {
	ID       string          `db:"id"`
	Tenant   string          `db:"tenant"`
	Name     string          `db:"name"`
	Function string          `db:"function"`
	Cron     string          `db:"cron"`
	Timezone string          `db:"timezone"`
	Input    json.RawMessage `db:"input"`
	Identity Identity        `db:"identity"`
	// Generation counts the puts of the schedule: a tick of an older generation is
	// stale and does nothing.
	Generation int `db:"generation"`
	// Catchup and CatchupWindow say which ticks handled late start runs; see [Catchup].
	Catchup       Catchup       `db:"catchup"`
	CatchupWindow time.Duration `db:"catchup_window"`
	NextAt        time.Time     `db:"next_at"` // The next tick, database clock.
	LastTickAt    *time.Time    `db:"last_tick_at"`
	LastRunID     *string       `db:"last_run_id"` // The run the last tick started, if it started one.
	CreatedAt     time.Time     `db:"created_at"`
	UpdatedAt     time.Time     `db:"updated_at"`
}

const scheduleColumns = `id, tenant, name, function, cron, timezone, input, identity, generation,
	catchup, catchup_window_ms * interval '1 millisecond' AS catchup_window,
	next_at, last_tick_at, last_run_id, created_at, updated_at`

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
	Identity Identity
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
func PutSchedule(ctx context.Context, db DB, n NewSchedule) (*Schedule, time.Time, error) {
	var clock time.Time
	if err := db.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&clock); err != nil {
		return nil, time.Time{}, fmt.Errorf("put schedule %s: read the clock: %w", n.Name, err)
	}
	next := n.Next(clock)
	if next.IsZero() {
		return nil, time.Time{}, fmt.Errorf("put schedule %s: %q has no next tick", n.Name, n.Cron)
	}
	rows, _ := db.Query(ctx, `
		INSERT INTO stepgate.schedule AS s (id, tenant, name, function, cron, timezone, input, identity, next_at,
			catchup, catchup_window_ms)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
		ON CONFLICT (tenant, name) DO UPDATE SET
			function = excluded.function, cron = excluded.cron, timezone = excluded.timezone,
			input = excluded.input, identity = excluded.identity, next_at = excluded.next_at,
			catchup = excluded.catchup, catchup_window_ms = excluded.catchup_window_ms,
			generation = s.generation + 1, updated_at = now()
		RETURNING `+scheduleColumns,
		n.ID, n.Tenant, n.Name, n.Function, n.Cron, n.Timezone, n.Input, n.Identity, next,
		cmp.Or(n.Catchup, CatchupOne), cmp.Or(n.CatchupWindow, DefaultCatchupWindow).Milliseconds())
	s, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Schedule])
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("put schedule %s: %w", n.Name, unstorable(err))
	}
	return s, clock, nil
}

// GetSchedule returns the tenant's schedule, or ErrNotFound.
func GetSchedule(ctx context.Context, db DB, tenant, name string) (*Schedule, error) {
	rows, _ := db.Query(ctx, `SELECT `+scheduleColumns+` FROM stepgate.schedule WHERE tenant = $1 AND name = $2`, tenant, name)
	s, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Schedule])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get schedule %s: %w", name, err)
	}
	return s, nil
}

// ListSchedules returns the tenant's schedules by name.
func ListSchedules(ctx context.Context, db DB, tenant string) ([]Schedule, error) {
	rows, _ := db.Query(ctx, `SELECT `+scheduleColumns+` FROM stepgate.schedule WHERE tenant = $1 ORDER BY name`, tenant)
	ss, err := pgx.CollectRows(rows, pgx.RowToStructByName[Schedule])
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return ss, nil
}

// DeleteSchedule deletes the tenant's schedule; its ticks already scheduled find
// nothing and do nothing. Runs it started are kept. It returns ErrNotFound when there
// is no such schedule.
func DeleteSchedule(ctx context.Context, db DB, tenant, name string) error {
	tag, err := db.Exec(ctx, `DELETE FROM stepgate.schedule WHERE tenant = $1 AND name = $2`, tenant, name)
	if err != nil {
		return fmt.Errorf("delete schedule %s: %w", name, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// ClaimTick locks the schedule for its tick at (any tenant's: the tick works by
// schedule id) until the transaction ends, and returns it with the database clock. It
// returns ErrNotFound when the tick is stale: the schedule was deleted, put again
// (another generation), or this tick was handled already (next_at moved on), so that a
// tick that runs twice, or on two gateways at once, is handled once. The tick may not
// be due yet (NextAt after the clock): the caller checks. db must be a transaction.
func ClaimTick(ctx context.Context, db DB, id string, generation int, at time.Time) (*Schedule, time.Time, error) {
	return claimTick(ctx, db, id, generation, at, "FOR UPDATE")
}

// TryClaimTick is ClaimTick that does not wait for a transaction that holds the
// schedule (handling this tick, or putting it again): it returns ErrNotFound at once.
func TryClaimTick(ctx context.Context, db DB, id string, generation int, at time.Time) (*Schedule, time.Time, error) {
	return claimTick(ctx, db, id, generation, at, "FOR UPDATE SKIP LOCKED")
}

func claimTick(ctx context.Context, db DB, id string, generation int, at time.Time, lock string) (*Schedule, time.Time, error) {
	rows, _ := db.Query(ctx, `
		SELECT `+scheduleColumns+`, clock_timestamp() AS clock FROM stepgate.schedule
		WHERE id = $1 AND generation = $2 AND next_at = $3
		`+lock, id, generation, at)
	type claimed struct {
		Schedule
		Clock time.Time `db:"clock"`
	}
	c, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[claimed])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, time.Time{}, ErrNotFound
	}
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("claim tick %s of schedule %s: %w", at.Format(time.RFC3339), id, err)
	}
	return &c.Schedule, c.Clock, nil
}

// Tick is the next tick of a schedule, as ClaimTick takes it.
type Tick struct {
	ScheduleID string    `db:"id"`
	Generation int       `db:"generation"`
	At         time.Time `db:"next_at"`
}

// OverdueTicks returns the next ticks of schedules (any tenant's, with the system role)
// that are more than late past the database clock (the transaction's), the most overdue
// first, at most limit of them. It reads only those, from an index on next_at.
func OverdueTicks(ctx context.Context, db DB, late time.Duration, limit int) ([]Tick, error) {
	// now(), not clock_timestamp(): a volatile bound would not be an index condition.
	rows, _ := db.Query(ctx, `
		SELECT id, generation, next_at FROM stepgate.schedule
		WHERE next_at < now() - $1 * interval '1 microsecond'
		ORDER BY next_at LIMIT $2`, late.Microseconds(), limit)
	ticks, err := pgx.CollectRows(rows, pgx.RowToStructByName[Tick])
	if err != nil {
		return nil, fmt.Errorf("list overdue ticks: %w", err)
	}
	return ticks, nil
}

// AdvanceSchedule records the last tick at handled of a schedule claimed by ClaimTick,
// and the run it started (nil for none), and moves its next tick to next.
func AdvanceSchedule(ctx context.Context, db DB, id string, at time.Time, runID *string, next time.Time) error {
	_, err := db.Exec(ctx, `
		UPDATE stepgate.schedule SET next_at = $4, last_tick_at = $2, last_run_id = $3
		WHERE id = $1`, id, at, runID, next)
	if err != nil {
		return fmt.Errorf("advance schedule %s: %w", id, err)
	}
	return nil
}
