package journal

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
	"github.com/stepgate/stepgate/journal/storable"
)

// kindWaitEvent is the entry of a run's wait for an event (WaitEvent), journaled when
// the wait ends: its output is {"event": {id, name, data, identity, created_at}}, the
// event that resumed the run (identity is its sender's), or {"timed_out": true}.
const kindWaitEvent = awaitWaitEvent

// timedOut is the output of a wait entry whose timeout passed first.
var timedOut = json.RawMessage(`{"timed_out": true}`)

// maxWaitShapes bounds the distinct sets of match paths (shapes) the runs of a tenant
// may wait on with one event name: an event computes one key per shape.
const maxWaitShapes = 64

// WaitEvent suspends a run until an event of its tenant named Event whose fields hold
// Match's values arrives, or Timeout passes, whichever is first; then the entry at Seq,
// of kind kindWaitEvent named Name, journals which (see kindWaitEvent) and the run is
// due. Match is an object of dotted paths into the event ({"id", "name", "data"}) and
// scalar values: {"data.order_id": "o-17"}; {} matches every event of that name.
// Numbers match by value (1 and 1.0 are equal); a path the event lacks, or that holds
// an object or an array, matches nothing.
//
// An event stored since Since (the invocation's start, or a look-back's time) matches
// too, the earliest first (by created_at, then id), so an event that arrived while the
// run was deciding to wait, or before, is not lost; one already journaled by another
// wait of the run does not. When LookBack is not zero, Since is a time the function
// asked for, and a Since after the database clock, or more than LookBack (the event
// retention) before it, is ErrBadAwait. Only an event whose sender may resume the run
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
	// LookBack, when not zero, bounds how far before the database clock Since may be.
	LookBack time.Duration
}

func (w WaitEvent) awaiting() Awaiting {
	m, _ := json.Marshal(w.Match)
	return Awaiting{Kind: awaitWaitEvent, Seq: w.Seq, Name: w.Name, Event: w.Event, Match: m}
}

func (w WaitEvent) wake() (*time.Time, time.Duration, bool) { return nil, w.Timeout, true }

// contains returns a JSON object that the document {"id", "name", "data"} of every
// event the match matches contains (jsonb's @>, which compares numbers by value, as the
// match does): the match's values at its paths. When two paths cross ("data.a" and
// "data.a.b", which no event matches), it is {}, which every document contains.
func (w WaitEvent) contains() json.RawMessage {
	doc := map[string]any{}
	for _, path := range w.paths() {
		segs := strings.Split(path, ".")
		at := doc
		for _, s := range segs[:len(segs)-1] {
			next, ok := at[s].(map[string]any)
			if _, taken := at[s]; taken && !ok {
				return json.RawMessage(`{}`)
			}
			if !ok {
				next = map[string]any{}
				at[s] = next
			}
			at = next
		}
		if _, taken := at[segs[len(segs)-1]]; taken {
			return json.RawMessage(`{}`)
		}
		at[segs[len(segs)-1]] = w.Match[path]
	}
	b, err := json.Marshal(doc)
	if err != nil { // a value that is not JSON: the write refuses the match itself
		return json.RawMessage(`{}`)
	}
	return b
}

// paths returns the match's shape: its paths, sorted.
func (w WaitEvent) paths() []string {
	return append([]string{}, slices.Sorted(maps.Keys(w.Match))...) // {} for no paths, not NULL
}

// write stores the wait, or journals an event stored since w.Since that matches and
// makes the run due now, under the key's lock (see docs/schema.md, Event waits).
func (w WaitEvent) write(ctx context.Context, db DB, aw awaitWrite, f *Finished) error {
	match, err := json.Marshal(w.Match)
	if err != nil {
		return fmt.Errorf("%w: wait_event match: %v", storable.ErrUnstorable, err)
	}
	if w.LookBack > 0 {
		if err := w.checkSince(f.Clock); err != nil {
			return err
		}
	}
	paths := w.paths()
	newShape, err := addWaitShape(ctx, db, aw.tenant, w.Event, paths)
	if err != nil {
		return err
	}
	q := dbsqlc.New(db)
	if newShape {
		// Events of this name read the shapes under this lock, shared: none is between
		// reading them (without this one) and looking for its waiters.
		if err := q.WaitLockEventName(ctx, dbsqlc.WaitLockEventNameParams{Tenant: aw.tenant, Event: w.Event}); err != nil {
			return fmt.Errorf("lock event name %s: %w", w.Event, err)
		}
	}
	if err := q.WaitLockMatch(ctx, dbsqlc.WaitLockMatchParams{Tenant: aw.tenant, Event: w.Event, Match: match}); err != nil {
		return fmt.Errorf("lock wait of run %s: %w", aw.runID, err)
	}
	// A new statement, so a new snapshot: every event that took this key's lock before
	// us has committed, and every later one will find the wait.
	resumed, err := q.WaitEventStore(ctx, dbsqlc.WaitEventStoreParams{
		Tenant: aw.tenant, Event: w.Event, Since: w.Since, Contains: w.contains(), Paths: paths, Match: match,
		RunID: aw.runID, Seq: int32(w.Seq), Name: w.Name, Invocation: int32(aw.invocation), ExpiresAt: f.WakeAt,
		Alt: int16(aw.alt),
	})
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

// checkSince returns ErrBadAwait when the look-back's Since is after the database clock
// (now, the run's update's) or more than LookBack before it.
func (w WaitEvent) checkSince(now time.Time) error {
	since, clock := w.Since.UTC().Format(time.RFC3339Nano), now.UTC().Format(time.RFC3339Nano)
	switch {
	case w.Since.After(now):
		return fmt.Errorf("%w: wait_event %q since %s is after the database clock (%s); a look-back starts in the past",
			ErrBadAwait, w.Name, since, clock)
	case w.Since.Before(now.Add(-w.LookBack)):
		return fmt.Errorf("%w: wait_event %q since %s is further back than the event retention (%s, STEPGATE_RETENTION) before the database clock (%s); older events are deleted",
			ErrBadAwait, w.Name, since, w.LookBack, clock)
	}
	return nil
}

// addWaitShape records that a run of tenant waits for event with a match of paths, and
// reports whether the shape is new; a *LimitError when the tenant's runs wait on
// maxWaitShapes shapes of that event already.
func addWaitShape(ctx context.Context, db DB, tenant, event string, paths []string) (bool, error) {
	for range 2 {
		r, err := dbsqlc.New(db).WaitShapeAdd(ctx, dbsqlc.WaitShapeAddParams{
			Tenant: tenant, Event: event, Paths: paths, MaxShapes: maxWaitShapes,
		})
		if err != nil {
			return false, fmt.Errorf("record wait shape: %w", unstorable(err))
		}
		inserted, known := r.Inserted, r.Known
		if inserted || known {
			return inserted, nil
		}
		// Neither: the shape was inserted by a transaction that committed while this
		// statement waited for it (its snapshot is older), or the bound is reached. A
		// new statement tells which.
	}
	return false, &LimitError{Message: fmt.Sprintf(
		"the tenant's runs already wait for event %s with %d different sets of match paths, the limit", event, maxWaitShapes)}
}

// dueNow makes the run, whose row lock the caller's transaction holds, due now.
func dueNow(ctx context.Context, db DB, runID string, f *Finished) error {
	r, err := dbsqlc.New(db).WaitRunDueNow(ctx, runID)
	if err == nil {
		f.WakeAt, f.Clock = r.WakeAt, r.Clock
	}
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
	// One round trip: the generated statements, queued with their parameters in order.
	b := &pgx.Batch{}
	b.Queue(dbsqlc.WaitResumeLockEventName, dbsqlc.WaitResumeLockEventNameParams{Tenant: ev.Tenant, Event: ev.Name}.Args()...)
	b.Queue(dbsqlc.WaitResumeLockMatches, dbsqlc.WaitResumeLockMatchesParams{Tenant: ev.Tenant, Event: ev.Name, Doc: doc}.Args()...)
	var resumed []string
	// A later statement of the batch: a snapshot taken with the locks held.
	b.Queue(dbsqlc.WaitResume, dbsqlc.WaitResumeParams{Tenant: ev.Tenant, Event: &ev.Name, Doc: doc, ID: ev.ID}.Args()...).
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
