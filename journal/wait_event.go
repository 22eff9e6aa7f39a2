package journal

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// KindWaitEvent is the entry of a run's wait for an event (WaitEvent), journaled when
// the wait ends: its output is {"event": {id, name, data, identity, created_at}}, the
// event that resumed the run (identity is its sender's), or {"timed_out": true}.
const KindWaitEvent = AwaitWaitEvent

// TimedOut is the output of a wait entry whose timeout passed first.
var TimedOut = json.RawMessage(`{"timed_out": true}`)

// MaxWaitShapes bounds the distinct sets of match paths (shapes) the runs of a tenant
// may wait on with one event name: an event computes one key per shape.
const MaxWaitShapes = 64

// WaitEvent suspends a run until an event of its tenant named Event whose fields hold
// Match's values arrives, or Timeout passes, whichever is first; then the entry at Seq,
// of kind KindWaitEvent named Name, journals which (see KindWaitEvent) and the run is
// due. Match is an object of dotted paths into the event ({"id", "name", "data"}) and
// scalar values: {"data.order_id": "o-17"}; {} matches every event of that name.
// Numbers match by value (1 and 1.0 are equal); a path the event lacks, or that holds
// an object or an array, matches nothing.
//
// An event stored since Since (the invocation's start) matches too, so an event that
// arrived while the run was deciding to wait is not lost; one already journaled by
// another wait of the run does not. Only an event whose sender may resume the run
// (stepgate.may_resume: the run's revision's invoke_roles and resume_roles, as
// access.Identity.MayResume decides) resumes it, either way; the others leave it waiting. Each wait is resumed at most once, by the first
// matching event, in that event's transaction (ResumeWaiters).
type WaitEvent struct {
	Seq     int
	Name    string
	Event   string
	Match   map[string]json.RawMessage // Checked by the caller: scalars, paths of names.
	Timeout time.Duration
	Since   time.Time
}

func (w WaitEvent) awaiting() Awaiting {
	m, _ := json.Marshal(w.Match)
	return Awaiting{Kind: AwaitWaitEvent, Seq: w.Seq, Name: w.Name, Event: w.Event, Match: m}
}

func (w WaitEvent) wake() (*time.Time, time.Duration, bool) { return nil, w.Timeout, true }

// paths returns the match's shape: its paths, sorted.
func (w WaitEvent) paths() []string {
	return append([]string{}, slices.Sorted(maps.Keys(w.Match))...) // {} for no paths, not NULL
}

// write stores the wait, or journals an event stored since w.Since that matches and
// makes the run due now, under the key's lock (see migration 0020).
func (w WaitEvent) write(ctx context.Context, db DB, aw awaitWrite, f *Finished) error {
	match, err := json.Marshal(w.Match)
	if err != nil {
		return fmt.Errorf("%w: wait_event match: %v", ErrUnstorable, err)
	}
	paths := w.paths()
	newShape, err := addWaitShape(ctx, db, aw.tenant, w.Event, paths)
	if err != nil {
		return err
	}
	if newShape {
		// Events of this name read the shapes under this lock, shared: none is between
		// reading them (without this one) and looking for its waiters.
		if _, err := db.Exec(ctx, `SELECT pg_advisory_xact_lock(stepgate.wait_lock($1, $2, NULL))`, aw.tenant, w.Event); err != nil {
			return fmt.Errorf("lock event name %s: %w", w.Event, err)
		}
	}
	if _, err := db.Exec(ctx, `SELECT pg_advisory_xact_lock(stepgate.wait_lock($1, $2, stepgate.match_of($3)))`,
		aw.tenant, w.Event, match); err != nil {
		return fmt.Errorf("lock wait of run %s: %w", aw.runID, err)
	}
	// A new statement, so a new snapshot: every event that took this key's lock before
	// us has committed, and every later one will find the wait.
	var resumed bool
	err = db.QueryRow(ctx, `
		WITH ev AS (
			SELECT e.id, e.name, e.data, e.identity, e.created_at FROM stepgate.event e
			WHERE e.tenant = @tenant AND e.name = @event AND e.created_at >= @since
			  AND stepgate.match_key(@paths, jsonb_build_object('id', e.id, 'name', e.name, 'data', e.data)) = stepgate.match_of(@match)
			  AND stepgate.may_resume((SELECT fr.config FROM stepgate.run r
				JOIN stepgate.function_revision fr ON fr.tenant = r.tenant AND fr.name = r.function AND fr.revision = r.revision
				WHERE r.id = @run_id), e.identity)
			  AND NOT EXISTS (SELECT 1 FROM stepgate.journal_entry j
				WHERE j.run_id = @run_id AND ((j.kind = '`+KindWaitEvent+`' AND j.output->'event'->>'id' = e.id)
					OR (j.kind = '`+KindWaitAny+`' AND j.output->'output'->'event'->>'id' = e.id)))
			ORDER BY e.created_at, e.id
			LIMIT 1
		), out AS (
			SELECT jsonb_build_object('event', jsonb_build_object('id', id, 'name', name, 'data', data,
				'identity', identity, 'created_at', created_at)) AS output FROM ev
		), entry AS (
			INSERT INTO stepgate.journal_entry (run_id, seq, kind, name, output, invocation, started_at, journal_bytes)
			SELECT @run_id, @seq, stepgate.wait_kind(@alt, '`+KindWaitEvent+`'), @name,
				stepgate.wait_output(@alt, '`+KindWaitEvent+`', output), @invocation, now(),
				stepgate.journal_bytes_before(@run_id, @seq) + octet_length(output::text)
			FROM out
		), waiting AS (
			INSERT INTO stepgate.run_wait (run_id, seq, alt, tenant, name, kind, event_name, match_key, expires_at)
			SELECT @run_id, @seq, @alt, @tenant, @name, '`+KindWaitEvent+`', @event, stepgate.match_of(@match), @expires_at
			WHERE NOT EXISTS (SELECT 1 FROM ev)
		)
		SELECT EXISTS (SELECT 1 FROM ev)`,
		namedArgs{
			"tenant": aw.tenant, "event": w.Event, "since": w.Since, "paths": paths, "match": match,
			"run_id": aw.runID, "seq": w.Seq, "name": w.Name, "invocation": aw.invocation, "expires_at": f.WakeAt,
			"alt": int16(aw.alt),
		}).Scan(&resumed)
	if isUniqueViolation(err) {
		return fmt.Errorf("%w: seq %d is already journaled", ErrConflict, w.Seq)
	}
	if err != nil {
		return fmt.Errorf("store wait of run %s: %w", aw.runID, unstorable(err))
	}
	if resumed {
		return dueNow(ctx, db, aw.runID, f)
	}
	return nil
}

// addWaitShape records that a run of tenant waits for event with a match of paths, and
// reports whether the shape is new; a *LimitError when the tenant's runs wait on
// MaxWaitShapes shapes of that event already.
func addWaitShape(ctx context.Context, db DB, tenant, event string, paths []string) (bool, error) {
	for range 2 {
		var inserted, known bool
		err := db.QueryRow(ctx, `
			WITH ins AS (
				INSERT INTO stepgate.wait_shape (tenant, event_name, paths)
				SELECT $1, $2, $3
				WHERE (SELECT count(*) FROM stepgate.wait_shape WHERE tenant = $1 AND event_name = $2) < $4
				ON CONFLICT DO NOTHING
				RETURNING 1
			)
			SELECT EXISTS (SELECT 1 FROM ins),
				EXISTS (SELECT 1 FROM stepgate.wait_shape WHERE tenant = $1 AND event_name = $2 AND paths = $3)`,
			tenant, event, paths, MaxWaitShapes).Scan(&inserted, &known)
		if err != nil {
			return false, fmt.Errorf("record wait shape: %w", unstorable(err))
		}
		if inserted || known {
			return inserted, nil
		}
		// Neither: the shape was inserted by a transaction that committed while this
		// statement waited for it (its snapshot is older), or the bound is reached. A
		// new statement tells which.
	}
	return false, &LimitError{Message: fmt.Sprintf(
		"the tenant's runs already wait for event %s with %d different sets of match paths, the limit", event, MaxWaitShapes)}
}

// dueNow makes the run, whose row lock the caller's transaction holds, due now.
func dueNow(ctx context.Context, db DB, runID string, f *Finished) error {
	err := db.QueryRow(ctx, `UPDATE stepgate.run SET wake_at = now() WHERE id = $1 RETURNING wake_at, clock_timestamp()`,
		runID).Scan(&f.WakeAt, &f.Clock)
	if err != nil {
		return fmt.Errorf("make run %s due: %w", runID, err)
	}
	return nil
}

// ResumeWaiters resumes the runs of ev's tenant that wait for ev (WaitEvent) and whose
// revision lets ev's sender resume them (stepgate.may_resume): for each,
// in db (the transaction that stored ev), it journals ev at the wait's seq, deletes the
// wait and makes the run due now. It returns the runs resumed; the caller enqueues
// their invocations in the same transaction. Finding them is one index probe per shape
// the tenant's runs wait on with ev's name, however many runs wait.
func ResumeWaiters(ctx context.Context, db DB, ev *Event) ([]string, error) {
	doc, err := json.Marshal(map[string]any{"id": ev.ID, "name": ev.Name, "data": ev.Data})
	if err != nil {
		return nil, fmt.Errorf("resume waiters of event %s: %w", ev.ID, err)
	}
	b := &pgx.Batch{}
	// Shared: events do not wait for each other, only for a waiter adding a shape.
	b.Queue(`SELECT pg_advisory_xact_lock_shared(stepgate.wait_lock($1, $2, NULL))`, ev.Tenant, ev.Name)
	// The keys' locks, in one order, so two events never wait for each other in a cycle.
	b.Queue(`
		SELECT pg_advisory_xact_lock(l) FROM (
			SELECT DISTINCT stepgate.wait_lock($1, $2, k) AS l FROM (
				SELECT stepgate.match_key(paths, $3) AS k FROM stepgate.wait_shape
				WHERE tenant = $1 AND event_name = $2) keys
			WHERE k IS NOT NULL
			ORDER BY l) ordered`, ev.Tenant, ev.Name, doc)
	var resumed []string
	// A later statement of the batch: a snapshot taken with the locks held.
	b.Queue(resumeWaitersSQL,
		namedArgs{"tenant": ev.Tenant, "event": ev.Name, "id": ev.ID, "doc": doc}).
		Query(func(rows pgx.Rows) error {
			var err error
			resumed, err = pgx.CollectRows(rows, pgx.RowTo[string])
			return err
		})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("resume waiters of event %s: %w", ev.ID, err)
	}
	return resumed, nil
}

// resumeWaitersSQL resumes the waiters of an event (see ResumeWaiters); it must find
// them through the index run_wait_by_match as the gateway's tenant role, whose
// row-level security forbids a non-leakproof comparison (jsonb's) from using an index:
// TestResumeWaitersUsesTheIndex checks the plan.
const resumeWaitersSQL = `
		WITH cand AS MATERIALIZED (
			-- One probe of the index per key. The keys are computed apart: a qual that
			-- calls match_key (not leakproof) on run_wait's side of the join could not
			-- be an index condition under row-level security.
			SELECT w.run_id, w.seq, w.alt, w.name FROM stepgate.run_wait w
			WHERE w.tenant = @tenant AND w.event_name = @event AND w.match_key = ANY (ARRAY(
				SELECT stepgate.match_key(s.paths, @doc) FROM stepgate.wait_shape s
				WHERE s.tenant = @tenant AND s.event_name = @event))
		), woken AS (
			-- The run's row lock first, as a claim takes it before it deletes a wait
			-- that timed out: the two never wait for each other in a cycle.
			-- A run is resumed only by a sender who may resume it (its revision's
			-- invoke_roles and resume_roles); the others leave it waiting.
			UPDATE stepgate.run r SET wake_at = now() FROM cand, stepgate.function_revision fr
			WHERE r.id = cand.run_id AND r.tenant = @tenant AND r.status = 'suspended'
			  AND fr.tenant = r.tenant AND fr.name = r.function AND fr.revision = r.revision
			  AND stepgate.may_resume(fr.config, (SELECT e.identity FROM stepgate.event e WHERE e.tenant = @tenant AND e.id = @id))
			RETURNING r.id, r.invocation, cand.seq, cand.alt, cand.name
		), gone AS (
			-- Only a wait this statement deletes is resumed: one that a concurrent
			-- claim (a timeout) or another resumer deleted first is theirs. The other
			-- alternatives of a wait_any go with it.
			DELETE FROM stepgate.run_wait w USING woken WHERE w.run_id = woken.id AND w.seq = woken.seq
			RETURNING woken.id, woken.invocation, woken.seq, woken.alt, woken.name
		), out AS (
			SELECT jsonb_build_object('event', jsonb_build_object('id', e.id, 'name', e.name, 'data', e.data,
				'identity', e.identity, 'created_at', e.created_at)) AS output
			FROM stepgate.event e WHERE e.tenant = @tenant AND e.id = @id
		), entries AS (
			INSERT INTO stepgate.journal_entry (run_id, seq, kind, name, output, invocation, started_at, journal_bytes)
			SELECT DISTINCT ON (gone.id) gone.id, gone.seq, stepgate.wait_kind(gone.alt, '` + KindWaitEvent + `'), gone.name,
				stepgate.wait_output(gone.alt, '` + KindWaitEvent + `', out.output), gone.invocation, now(),
				stepgate.journal_bytes_before(gone.id, gone.seq) + octet_length(out.output::text)
			FROM gone, out
			ON CONFLICT (run_id, seq) DO NOTHING
		)
		SELECT DISTINCT id::text FROM gone ORDER BY 1`
