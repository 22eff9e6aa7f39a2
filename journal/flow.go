package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
	err = db.QueryRow(ctx, `
		INSERT INTO stepgate.flow_rate AS f (tenant, function, kind, key, tat)
		VALUES ($1, $2, 'throttle', $3, now() + $4::bigint * interval '1 microsecond')
		ON CONFLICT (tenant, function, kind, key) DO UPDATE
			SET tat = greatest(now(), f.tat) + $4::bigint * interval '1 microsecond'
			WHERE f.tat - $5::bigint * interval '1 microsecond' - now() <= $6::bigint * interval '1 microsecond'
		RETURNING greatest(now(), tat - ($4::bigint + $5::bigint) * interval '1 microsecond'), now()`,
		tenant, function, key, r.Interval.Microseconds(), r.tau().Microseconds(), ahead.Microseconds()).Scan(&start, &now)
	if err == nil {
		return start, now, 0, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return start, now, 0, false, fmt.Errorf("throttle %s: %w", function, err)
	}
	var us int64
	err = db.QueryRow(ctx, `
		SELECT greatest(0, extract(epoch FROM f.tat - now()) * 1e6 - $4::bigint - $5::bigint)::bigint
		FROM stepgate.flow_rate f WHERE f.tenant = $1 AND f.function = $2 AND f.kind = 'throttle' AND f.key = $3`,
		tenant, function, key, r.tau().Microseconds(), ahead.Microseconds()).Scan(&us)
	if err != nil {
		return start, now, 0, false, fmt.Errorf("throttle %s: %w", function, err)
	}
	return start, now, time.Duration(us) * time.Microsecond, false, nil
}

// TakeRate takes one start of key from a rate limit: ok when the rate allows it now
// (the key's state moves one interval on), else ok=false and retryAfter, how long
// until it does, and nothing changes. One statement (two when refused).
func TakeRate(ctx context.Context, db DB, tenant, function, key string, r Rate) (retryAfter time.Duration, ok bool, err error) {
	tag, err := db.Exec(ctx, `
		INSERT INTO stepgate.flow_rate AS f (tenant, function, kind, key, tat)
		VALUES ($1, $2, 'rate_limit', $3, now() + $4::bigint * interval '1 microsecond')
		ON CONFLICT (tenant, function, kind, key) DO UPDATE
			SET tat = greatest(now(), f.tat) + $4::bigint * interval '1 microsecond'
			WHERE f.tat - $5::bigint * interval '1 microsecond' <= now()`,
		tenant, function, key, r.Interval.Microseconds(), r.tau().Microseconds())
	if err != nil {
		return 0, false, fmt.Errorf("rate limit %s: %w", function, err)
	}
	if tag.RowsAffected() == 1 {
		return 0, true, nil
	}
	var us int64
	err = db.QueryRow(ctx, `
		SELECT greatest(0, extract(epoch FROM f.tat - now()) * 1e6 - $4::bigint)::bigint
		FROM stepgate.flow_rate f WHERE f.tenant = $1 AND f.function = $2 AND f.kind = 'rate_limit' AND f.key = $3`,
		tenant, function, key, r.tau().Microseconds()).Scan(&us)
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
	var runID string
	var fresh bool
	err = db.QueryRow(ctx, `
		INSERT INTO stepgate.flow_debounce AS d (tenant, function, key, run_id, first_at)
		VALUES ($1, $2, $3, $4, now())
		ON CONFLICT (tenant, function, key) DO UPDATE SET run_id = d.run_id
		RETURNING run_id::text, run_id = $4::uuid, now() + $5::bigint * interval '1 microsecond'`,
		d.Tenant, d.Function, d.Key, d.RunID, d.Period.Microseconds()).Scan(&runID, &fresh, &startAt)
	if err != nil {
		return nil, startAt, fmt.Errorf("debounce %s: %w", d.Function, err)
	}
	if fresh {
		return nil, startAt, nil
	}
	rows, _ := db.Query(ctx, `
		WITH w AS (
			SELECT least(now() + $6::bigint * interval '1 microsecond', d.first_at + $7::bigint * interval '1 microsecond') AS at
			FROM stepgate.flow_debounce d WHERE d.tenant = $1 AND d.function = $2 AND d.key = $3
		), u AS (
			UPDATE stepgate.run r SET input = $8, identity = $9, wake_at = w.at,
				held = 'debounced until ' || to_char(w.at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
			FROM w
			WHERE r.id = $4::uuid AND r.tenant = $1 AND r.status = 'scheduled'
			RETURNING r.*
		), reopen AS (
			UPDATE stepgate.flow_debounce d SET run_id = $5::uuid, first_at = now()
			WHERE d.tenant = $1 AND d.function = $2 AND d.key = $3 AND NOT EXISTS (SELECT 1 FROM u)
		)
		SELECT `+runColumns+` FROM u`,
		d.Tenant, d.Function, d.Key, runID, d.RunID, d.Period.Microseconds(), d.MaxWait.Microseconds(), d.Input, d.Identity)
	collapsed, err = pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Run])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, startAt, nil
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
	var sk any
	if len(skipped) > 0 {
		sk = skipped
	}
	_, err := db.Exec(ctx, `
		UPDATE stepgate.event SET runs = runs || $3::uuid[],
			skipped = CASE WHEN $4::jsonb IS NULL THEN skipped ELSE coalesce(skipped, '[]') || $4::jsonb END
		WHERE tenant = $1 AND id = $2`, tenant, id, runs, sk)
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
// keys that a freed slot can take (the backstop of counted keys' refills; migrations 0037, 0039).
func PruneFlow(ctx context.Context, db DB, limit int) (int64, error) {
	var n int64
	err := db.QueryRow(ctx, `
		WITH r AS (
			DELETE FROM stepgate.flow_rate f
			USING (SELECT tenant, function, kind, key FROM stepgate.flow_rate
				WHERE tat < now() - interval '1 minute' LIMIT $1) o
			WHERE (f.tenant, f.function, f.kind, f.key) = (o.tenant, o.function, o.kind, o.key)
				AND f.tat < now() - interval '1 minute'
			RETURNING 1
		), d AS (
			DELETE FROM stepgate.flow_debounce f
			USING (SELECT tenant, function, key FROM stepgate.flow_debounce
				WHERE first_at < now() - interval '25 hours' LIMIT $1) o
			WHERE (f.tenant, f.function, f.key) = (o.tenant, o.function, o.key)
				AND f.first_at < now() - interval '25 hours'
			RETURNING 1
		), c AS (
			-- Concurrency counters of idle keys: all at 0, nobody in the key's line
			-- (kept at 0 by releases, so that a busy key is not deleted and inserted at
			-- each run); a row in use is skipped, and re-checked under its lock.
			DELETE FROM stepgate.concurrency_slot s
			USING (SELECT tenant, function, key, stripe FROM stepgate.concurrency_slot o
				WHERE running = 0 AND NOT EXISTS (
					-- The whole key is idle: a busy striped key keeps its empty stripes.
					SELECT 1 FROM stepgate.concurrency_slot b
					WHERE b.tenant = o.tenant AND b.function = o.function AND b.key = o.key AND b.running > 0
				) AND NOT EXISTS (
					SELECT 1 FROM stepgate.run q
					WHERE q.tenant = o.tenant AND q.function = o.function AND q.held_on = o.key
						AND q.status IN ('queued', 'scheduled', 'suspended'))
				LIMIT $1 FOR UPDATE SKIP LOCKED) o
			WHERE (s.tenant, s.function, s.key, s.stripe) = (o.tenant, o.function, o.key, o.stripe)
				AND s.running = 0
			RETURNING 1
		)
		SELECT (SELECT count(*) FROM r) + (SELECT count(*) FROM d) + (SELECT count(*) FROM c)`, limit).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("prune flow state: %w", err)
	}
	// The backstop of the wakes that counted keys' refills may miss (migrations 0037, 0039), in
	// a transaction of its own: it waits for locks, and holds none of the prune's.
	if _, err := db.Exec(ctx, `SELECT stepgate.refill_held_lines($1::int)`, limit); err != nil {
		return n, fmt.Errorf("refill concurrency lines: %w", err)
	}
	return n, nil
}
