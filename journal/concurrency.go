package journal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// Concurrency limits (docs/concurrency.md holds the design and argues it): a run of a
// revision with limits records its slot keys when it is created, takes a slot of each
// when it is claimed (ClaimRunSlots) and gives them back when it leaves running (a
// trigger). A run that finds a key full is held, due for nobody, until a freed slot
// wakes it: the trigger makes it due and notifies SlotChannel with its id.

// SlotChannel is the Postgres channel on which another run's transition announces the
// id of a run it made due, for a gateway to claim at once: a freed concurrency slot, the
// held run it made due; a run's end, each run that awaited it (RunWait).
const SlotChannel = "stepgate_slot_free"

// ErrHeld wraps every *HeldError.
var ErrHeld = errors.New("journal: the run is held")

// HeldError: the run was not claimed because flow control holds it; Reason says why (it
// is the run's held).
type HeldError struct{ Reason string }

func (e *HeldError) Error() string { return "run held: " + e.Reason }

// Unwrap makes errors.Is(err, ErrHeld) hold.
func (e *HeldError) Unwrap() error { return ErrHeld }

// ClaimRunSlots is ClaimRun for a run of a revision with concurrency limits: in the same
// one round trip and transaction it first takes a slot of each of the run's keys
// (stepgate.claim_slots). When a key has no room the run is not claimed but held: its
// held says why, it stays queued (or suspended) and is due for nobody until a freed slot
// wakes it; ClaimRunSlots then returns a *HeldError. It returns ErrNotDue as ClaimRun
// does. A run that has no slot keys is claimed as by ClaimRun.
//
// A claim of a key of limit 64 or more that meets another claiming it exactly, near its
// limit (docs/concurrency.md), is abandoned and made again: up to maxSlotRetries times.
//
// Triggers that follow it (docs/internals.md): run_event_on_status.
func ClaimRunSlots(ctx context.Context, db DB, runID string, lease time.Duration) (*Claim, error) {
	for try := 1; ; try++ {
		c, err := claimRun(ctx, db, runID, lease, true, nil, 0)
		if pgErrCode(err) != slotRetryCode || try == maxSlotRetries {
			return c, err
		}
	}
}

// slotRetryCode is the SQLSTATE of a claim abandoned to be made again (docs/concurrency.md).
const slotRetryCode = "SGRTY"

// maxSlotRetries bounds how many times ClaimRunSlots makes an abandoned claim again.
const maxSlotRetries = 20

// maxQueueKeys bounds the keys a FunctionQueue lists.
const maxQueueKeys = 100

// FunctionQueue is where the unfinished runs of a function stand.
type FunctionQueue struct {
	Queued  int // queued, held ones included
	Running int // running
	Held    int // not started (or resumed) yet, held back by any flow control
	// Keys are the concurrency keys with running or held runs, the busiest first (at
	// most maxQueueKeys).
	Keys []queueKey
	// Reasons are the distinct held reasons, with their counts, the commonest first (at
	// most maxQueueKeys).
	Reasons []heldReason
}

// queueKey is one concurrency key of a function: "" for the function-wide limit, else
// the key expression and its value ("input.customer_id=c-9").
type queueKey struct {
	Key     string
	Running int // runs holding a slot of the key
	Limit   int // the key's limit, as its running runs claimed it; 0 if none runs
	Held    int // runs waiting in the key's line
}

// heldReason is a reason runs are held, and how many.
type heldReason struct {
	Reason string
	Runs   int
}

// GetFunctionQueue returns where the tenant's unfinished runs of function stand, in one
// round trip. Its reads are bounded by the function's unfinished runs.
func GetFunctionQueue(ctx context.Context, db DB, tenant, function string) (*FunctionQueue, error) {
	q := &FunctionQueue{}
	b := &pgx.Batch{}
	b.Queue(dbsqlc.ConcurrencyQueueCounts, dbsqlc.ConcurrencyQueueCountsParams{Tenant: tenant, Function: function}.Args()...).
		QueryRow(func(row pgx.Row) error { return row.Scan(&q.Queued, &q.Running, &q.Held) })
	b.Queue(dbsqlc.ConcurrencyQueueKeys, dbsqlc.ConcurrencyQueueKeysParams{Tenant: tenant, Function: function, MaxKeys: maxQueueKeys}.Args()...).
		Query(func(rows pgx.Rows) error {
			keys, err := pgx.CollectRows(rows, pgx.RowToStructByName[dbsqlc.ConcurrencyQueueKeysRow])
			q.Keys = make([]queueKey, len(keys))
			for i, k := range keys {
				q.Keys[i] = queueKey{Key: k.Key, Running: int(k.Running), Limit: int(k.Lim), Held: int(k.Held)}
			}
			return err
		})
	b.Queue(dbsqlc.ConcurrencyQueueReasons, dbsqlc.ConcurrencyQueueReasonsParams{Tenant: tenant, Function: function, MaxKeys: maxQueueKeys}.Args()...).
		Query(func(rows pgx.Rows) error {
			reasons, err := pgx.CollectRows(rows, pgx.RowToStructByName[dbsqlc.ConcurrencyQueueReasonsRow])
			q.Reasons = make([]heldReason, len(reasons))
			for i, r := range reasons {
				q.Reasons[i] = heldReason{Reason: *r.Reason, Runs: int(r.Runs)} // held IS NOT NULL
			}
			return err
		})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("queue of function %s: %w", function, err)
	}
	return q, nil
}
