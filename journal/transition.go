package journal

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// NotifyChannel is the Postgres channel on which a run's terminal update announces the
// run id, when a waiter has attached (see Attach).
const NotifyChannel = "stepgate_run_done"

// Claim is a run claimed for one invocation, with what that invocation needs.
type Claim struct {
	Run     *Run
	Journal []Entry
	// StepAttempts maps the seq of a step that has failed before and has no final entry
	// yet to the attempt number the next invocation makes of it.
	StepAttempts map[int]int
	// Now is the database clock at the claim.
	Now time.Time
	// NotBefore, when set, is a wake time on the database clock that the claim came
	// ahead of (ClaimRunEarly): the invocation must not reach the function before the
	// database clock passes it.
	NotBefore time.Time
}

// ClaimRun claims a due run for a new invocation: a queued run whose backoff has passed,
// a scheduled run whose start time has come, or a suspended run whose wake time has come (a run waiting for its child run has
// none until the child ends; see Finish). It bumps the run's invocation number
// (fencing out any older invocation), clears its owner nonce (the new invocation is
// claimed by the first nonce that asks, see ClaimInvocation), leases it for lease, and loads its journal, all in
// one round trip and one transaction. It returns ErrNotDue when the run is not claimable
// now (not due yet, running, finished, or gone). The claim notifies runevents.EventChannel when a
// gateway watches the run's tenant.
//
// Triggers that follow it (docs/internals.md): run_event_on_status.
func ClaimRun(ctx context.Context, db DB, runID string, lease time.Duration) (*Claim, error) {
	return claimRun(ctx, db, runID, lease, false, nil, 0)
}

// ClaimWokenRun is ClaimRun for a wake in the process that enqueued the run's River job
// backstop, scheduled for the wake's time (a retry's backoff, a sleep's end): a claim
// made deletes backstop in its own statement when no worker has it yet. From the
// claim on, the lease (whose reaping queues the run again) and the sweep of stranded runs
// are the run's backstops, and the job would only find nothing to claim. 0: none.
//
// Triggers that follow it (docs/internals.md): run_event_on_status.
func ClaimWokenRun(ctx context.Context, db DB, runID string, lease time.Duration, backstop int64) (*Claim, error) {
	return claimRun(ctx, db, runID, lease, false, nil, backstop)
}

// ClaimRunEarly claims, up to early ahead of its wake time, tenant's run suspended until
// wakeAt (the database clock) that nothing but that time can resume: awaiting a sleep,
// with no wait stored, held by no limit, of a function without concurrency limits. The
// claim is ClaimRun's (a new invocation, fenced, leased, its journal loaded) but it does
// not end the sleep: the Claim's NotBefore is wakeAt, and the invocation must not reach
// the function before the database clock passes it (ClockNow tells); if the run is
// handed over or reaped before then, it is queued until the sleep's end (LeaseRelease,
// LeaseReapExpired). So the claim's commit is done by the time the sleep ends, instead
// of after. ErrNotDue when the run is
// not so: not suspended until wakeAt, wakeAt further than early, or resumable otherwise
// (ClaimRun then claims it at wakeAt). A claim made deletes backstop, the sleep's River
// job (0: none), when no worker has it yet: from the claim on, the lease (whose reaping
// queues the run again) and the sweep of stranded runs are the run's backstops, and the
// job would only find nothing to claim.
func ClaimRunEarly(ctx context.Context, db DB, tenant, runID string, wakeAt time.Time, early, lease time.Duration, backstop int64) (*Claim, error) {
	return claimRun(ctx, db, runID, lease, false, &earlyClaim{tenant: tenant, wakeAt: wakeAt, early: early}, backstop)
}

// earlyClaim is what ClaimRunEarly adds to a claim.
type earlyClaim struct {
	tenant string
	wakeAt time.Time
	early  time.Duration
}

// ClockNow returns the database clock now (clock_timestamp, not a transaction's start).
func ClockNow(ctx context.Context, db DB) (time.Time, error) {
	return dbsqlc.New(db).ClockNow(ctx)
}

// claimRun is ClaimRun, with slots ClaimRunSlots, and with early ClaimRunEarly; a claim
// made (but with slots) deletes backstop, the run's River job no worker has (0: none).
func claimRun(ctx context.Context, db DB, runID string, lease time.Duration, slots bool, early *earlyClaim, backstop int64) (*Claim, error) {
	var claim Claim
	b := &pgx.Batch{}
	onClaim := func(row pgx.Row) error {
		var now time.Time
		run, err := scanRun(row, &now)
		if slots && errors.Is(err, pgx.ErrNoRows) {
			return nil // the statements after this one say why
		}
		if err != nil {
			return err
		}
		claim.Run, claim.Now = run, now
		return nil
	}
	// With slots, claim_slots has checked that the run is due, under its row lock, and
	// taken its slots (or held the run); the journal is read only when the claim was made.
	if early != nil {
		claim.NotBefore = early.wakeAt
		b.Queue(dbsqlc.ClaimRunEarly, dbsqlc.ClaimRunEarlyParams{LeaseSeconds: lease.Seconds(), Tenant: early.tenant, RunID: runID, WakeAt: &early.wakeAt, EarlySeconds: early.early.Seconds(), BackstopJob: backstop}.Args()...).QueryRow(onClaim)
	} else {
		b.Queue(dbsqlc.ClaimRun, dbsqlc.ClaimRunParams{Slots: slots, LeaseSeconds: lease.Seconds(), RunID: runID, TimedOut: timedOut, BackstopJob: backstop}.Args()...).QueryRow(onClaim)
	}
	b.Queue(dbsqlc.ClaimJournal, dbsqlc.ClaimJournalParams{RunID: runID, RunningOnly: slots}.Args()...).Query(func(rows pgx.Rows) error {
		var err error
		claim.Journal, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Entry, error) { return scanEntry(row) })
		return err
	})
	b.Queue(dbsqlc.ClaimStepAttempts, dbsqlc.ClaimStepAttemptsParams{RunID: runID, RunningOnly: slots}.Args()...).
		Query(func(rows pgx.Rows) error {
			var seq, attempt int
			_, err := pgx.ForEachRow(rows, []any{&seq, &attempt}, func() error {
				if claim.StepAttempts == nil {
					claim.StepAttempts = map[int]int{}
				}
				claim.StepAttempts[seq] = attempt
				return nil
			})
			return err
		})
	var held *string
	if slots {
		b.Queue(dbsqlc.ClaimHeld, dbsqlc.ClaimHeldParams{RunID: runID}.Args()...).
			Query(func(rows pgx.Rows) error {
				var err error
				held, err = pgx.CollectOneRow(rows, pgx.RowTo[*string])
				if errors.Is(err, pgx.ErrNoRows) {
					return nil
				}
				return err
			})
	}
	// A batch outside a transaction runs as one implicit transaction: one round trip.
	err := db.SendBatch(ctx, b).Close()
	if err == nil && claim.Run == nil {
		if held != nil {
			return nil, &HeldError{Reason: *held}
		}
		err = pgx.ErrNoRows
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotDue
	}
	if err != nil {
		return nil, fmt.Errorf("claim run %s: %w", runID, err)
	}
	return &claim, nil
}

// Bounds limit a run's journal. A zero field does not limit.
type Bounds struct {
	MaxEntries      int   // Entries per run: the largest seq.
	MaxEntryBytes   int64 // Bytes of one entry's output and error (Entry.Size).
	MaxJournalBytes int64 // Bytes of outputs and errors per run, the entries' sum.
}

// ErrGap: an entry's seq is past the journal's end (seq-1 is not journaled).
var ErrGap = errors.New("journal: seq leaves a gap")

// HolesError is Finish's refusal of an answered end (Outcome.Answered) while seqs below
// the journal's last entry are missing; it names them and wraps ErrGap. Only the end is
// refused: the outcome's steps could be journaled.
type HolesError struct{ err error }

func (e *HolesError) Error() string { return e.err.Error() }

// Unwrap makes errors.Is(err, ErrGap) hold.
func (e *HolesError) Unwrap() error { return e.err }

// ErrLimit wraps every *LimitError.
var ErrLimit = errors.New("journal: limit exceeded")

// LimitError is an entry refused because the run's journal would pass a bound.
type LimitError struct {
	Seq     int
	Message string // Names the bound and its value.
}

func (e *LimitError) Error() string { return e.Message }

// Unwrap makes errors.Is(err, ErrLimit) hold.
func (e *LimitError) Unwrap() error { return ErrLimit }

// Size is what an entry counts towards Bounds.MaxJournalBytes: its output's and its
// error's bytes.
func (e Entry) Size() int64 {
	n := int64(len(e.Output))
	if e.Error != nil {
		n += int64(len(e.Error.Type) + len(e.Error.Message))
	}
	return n
}

// AppendEntry journals one finished entry for the invocation that owns the run. An
// identical repeat is a no-op; a different entry at that seq returns ErrConflict, naming
// what differs; when the invocation no longer owns the running run it returns
// ErrSuperseded. A new entry must keep the journal within b (a *LimitError otherwise)
// and come right after the journal's last (ErrGap otherwise), or, with e.Window W > 1
// (steps run in parallel, at most MaxWindow), have an entry among the W seqs below it
// (or a seq of at most W): it may fill a hole, and the running byte totals of the
// entries above it grow by its bytes. The run row is share-locked while the entry is
// written, so a concurrent claim waits and then sees it; an entry with a window is
// written in a transaction that locks the row first, so concurrent checkpoints of
// parallel steps are serialized and each sees the others' entries (the byte count stays
// exact).
func AppendEntry(ctx context.Context, db DB, runID string, invocation int, e Entry, b Bounds) error {
	if err := entryTooLarge(e, b); err != nil {
		return err
	}
	window := max(e.Window, 1)
	if window > MaxWindow {
		return fmt.Errorf("%w: entry %d declares a window of %d, more than the limit of %d", ErrGap, e.Seq, window, MaxWindow)
	}
	if window == 1 {
		return appendEntry(ctx, db, runID, invocation, e, 1, b)
	}
	locked := func(tx DB) error {
		// The lock is the transaction's before the entry's statement takes its snapshot.
		if _, err := dbsqlc.New(tx).EntryLockRun(ctx, dbsqlc.EntryLockRunParams{RunID: runID, Invocation: int32(invocation)}); err != nil {
			return fmt.Errorf("lock run %s: %w", runID, err)
		}
		return appendEntry(ctx, tx, runID, invocation, e, window, b)
	}
	if tx, ok := db.(pgx.Tx); ok {
		return locked(tx)
	}
	beginner, ok := db.(interface {
		Begin(context.Context) (pgx.Tx, error)
	})
	if !ok {
		return fmt.Errorf("append entry %d to run %s: a windowed entry needs a transaction", e.Seq, runID)
	}
	return pgx.BeginFunc(ctx, beginner, func(tx pgx.Tx) error { return locked(tx) })
}

// entryTooLarge returns the LimitError of an entry over b's MaxEntryBytes, or nil.
func entryTooLarge(e Entry, b Bounds) error {
	if b.MaxEntryBytes > 0 && e.Size() > b.MaxEntryBytes {
		return &LimitError{Seq: e.Seq, Message: fmt.Sprintf(
			"entry %d holds %d bytes, more than the limit of %d (STEPGATE_MAX_OUTPUT_BYTES)", e.Seq, e.Size(), b.MaxEntryBytes)}
	}
	return nil
}

// appendEntry journals e with EntryAppendInOrder, or EntryAppendInWindow for a window
// wider than 1. (Their rows, a batch's too, are scanned by hand:
// sqlc types their total NOT NULL.)
func appendEntry(ctx context.Context, db DB, runID string, invocation int, e Entry, window int, b Bounds) error {
	var row pgx.Row
	if window > 1 {
		row = db.QueryRow(ctx, dbsqlc.EntryAppendInWindow, dbsqlc.EntryAppendInWindowParams{
			RunID: runID, Seq: int32(e.Seq), Invocation: int32(invocation), WindowSize: int32(window), Size: e.Size(),
			Kind: e.Kind, Name: e.Name, Output: e.Output, Error: errorJSON(e.Error), Attempt: int32(max(e.Attempt, 1)),
			WakeAt: e.WakeAt, StartedAt: e.StartedAt, MaxEntries: int4(b.MaxEntries), MaxBytes: int4(b.MaxJournalBytes),
		}.Args()...)
	} else {
		row = db.QueryRow(ctx, dbsqlc.EntryAppendInOrder, dbsqlc.EntryAppendInOrderParams{
			RunID: runID, Seq: int32(e.Seq), Invocation: int32(invocation), Size: e.Size(),
			Kind: e.Kind, Name: e.Name, Output: e.Output, Error: errorJSON(e.Error), Attempt: int32(max(e.Attempt, 1)),
			WakeAt: e.WakeAt, StartedAt: e.StartedAt, MaxEntries: int4(b.MaxEntries), MaxBytes: int4(b.MaxJournalBytes),
		}.Args()...)
	}
	var r appendResult
	if err := r.scan(row); err != nil {
		return fmt.Errorf("append entry %d to run %s: %w", e.Seq, runID, unstorable(err))
	}
	return r.err(ctx, db, runID, e, window, b)
}

// errorJSON is e as a jsonb parameter, NULL for none, as pgx would encode it. An
// ErrorInfo, strings and a bool, always marshals.
func errorJSON(e *ErrorInfo) json.RawMessage {
	if e == nil {
		return nil
	}
	b, _ := json.Marshal(e)
	return b
}

// int4 is a bound as an int4 parameter (the statements' bounds are int4s): a bound past
// the int4's range, which readLimits never sets, is its end.
func int4[T int | int64](v T) int32 {
	return int32(min(max(v, math.MinInt32), math.MaxInt32))
}

// appendResult is what EntryAppendInOrder or EntryAppendInWindow found.
type appendResult struct {
	owned, inserted, follows bool
	total                    *int64
	kind, name               *string
	output                   json.RawMessage
	errInfo                  *ErrorInfo
}

func (r *appendResult) scan(row pgx.Row) error {
	return row.Scan(&r.owned, &r.inserted, &r.follows, &r.total, &r.kind, &r.name, &r.output, &r.errInfo)
}

// err returns the error of AppendEntry for e from r, asking db again on the rare paths.
func (r *appendResult) err(ctx context.Context, db DB, runID string, e Entry, window int, b Bounds) error {
	switch {
	case r.inserted:
		return nil
	case !r.owned:
		return ErrSuperseded
	case r.kind != nil:
		return sameEntry(&Entry{Kind: *r.kind, Name: *r.name, Output: r.output, Error: r.errInfo}, e)
	case !r.follows:
		if window == 1 && e.Seq > 1 {
			// Right after seq - 1, but below later entries (the error path only).
			below, err := dbsqlc.New(db).EntryExists(ctx, dbsqlc.EntryExistsParams{RunID: runID, Seq: int32(e.Seq - 1)})
			if err == nil && below {
				return fmt.Errorf("%w: seq %d fills a hole below later entries: a checkpoint out of order declares a window", ErrGap, e.Seq)
			}
		}
		return gapError("seq", e.Seq, window)
	case b.MaxEntries > 0 && e.Seq > b.MaxEntries:
		return entriesLimit(e.Seq, b)
	case b.MaxJournalBytes > 0 && r.total != nil && *r.total > b.MaxJournalBytes:
		return &LimitError{Seq: e.Seq, Message: fmt.Sprintf(
			"the journal would hold %d bytes with entry %d, more than its limit of %d bytes (STEPGATE_MAX_JOURNAL_BYTES)", *r.total, e.Seq, b.MaxJournalBytes)}
	default:
		// The conflicting entry committed after this statement's snapshot: look again.
		existing, err := entryAt(ctx, db, runID, e.Seq)
		if err != nil {
			return err
		}
		return sameEntry(existing, e)
	}
}

// gapError is ErrGap for what (an entry's seq, an await's) at seq with window.
func gapError(what string, seq, window int) error {
	if window <= 1 {
		return fmt.Errorf("%w: %s %d is not the journal's next (seq %d is not journaled)", ErrGap, what, seq, seq-1)
	}
	return fmt.Errorf("%w: %s %d is past its window of %d (no seq from %d to %d is journaled)", ErrGap, what, seq, window, seq-window, seq-1)
}

func entriesLimit(seq int, b Bounds) *LimitError {
	return &LimitError{Seq: seq, Message: fmt.Sprintf(
		"entry %d is past the journal's limit of %d entries (STEPGATE_MAX_JOURNAL_ENTRIES)", seq, b.MaxEntries)}
}

func entryAt(ctx context.Context, db DB, runID string, seq int) (*Entry, error) {
	// Scanned by hand: sqlc does not type copied.
	e, err := scanEntry(db.QueryRow(ctx, dbsqlc.EntryAt, dbsqlc.EntryAtParams{RunID: runID, Seq: int32(seq)}.Args()...))
	if err != nil {
		return nil, fmt.Errorf("load entry %d of run %s: %w", seq, runID, err)
	}
	return &e, nil
}

// sameEntry returns nil when e repeats existing (a harmless retry), else ErrConflict
// naming what differs: the kind, the name, the output or the error.
func sameEntry(existing *Entry, e Entry) error {
	var diff string
	switch {
	case existing.Kind != e.Kind || existing.Name != e.Name:
		diff = fmt.Sprintf("holds %s %q, not %s %q", existing.Kind, existing.Name, e.Kind, e.Name)
	case (existing.Error == nil) != (e.Error == nil):
		diff = fmt.Sprintf("holds %s %q with %s, not with %s", e.Kind, e.Name, outcome(existing), outcome(&e))
	case existing.Error != nil && (existing.Error.Message != e.Error.Message || existing.Error.Type != e.Error.Type):
		diff = fmt.Sprintf("holds %s %q with %s, not %s", e.Kind, e.Name, outcome(existing), outcome(&e))
	case !sameJSON(existing.Output, e.Output):
		diff = fmt.Sprintf("holds %s %q with %s, not %s", e.Kind, e.Name, outcome(existing), outcome(&e))
	default:
		return nil
	}
	return fmt.Errorf("%w: seq %d %s", ErrConflict, e.Seq, diff)
}

// outcome describes an entry's output or error for a conflict's message, cut short.
func outcome(e *Entry) string {
	if e.Error != nil {
		return fmt.Sprintf("error %s %q", e.Error.Type, clip(e.Error.Message))
	}
	if len(e.Output) == 0 {
		return "no output"
	}
	var b bytes.Buffer
	if json.Compact(&b, e.Output) != nil {
		return "output " + clip(string(e.Output))
	}
	return "output " + clip(b.String())
}

func clip(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}

// sameJSON compares two JSON values by meaning, as jsonb does (key order and spacing
// do not matter).
func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return string(ja) == string(jb)
}

// Outcome is how an invocation ends for its run; see Finish. Make one with Completed,
// Failed, RetryingInvocation, Sleeping, RetryingStep, InvokingChild, WaitingForEvent,
// Receiving or WaitingForCallback.
type Outcome struct {
	status    Status
	output    json.RawMessage // completed
	err       *ErrorInfo      // failed; or the failed invocation's error when queued
	await     awaited         // suspended
	wakeAfter time.Duration   // queued: the retry's backoff, from the database clock
	// failedCall: the invocation failed as a whole (Run.FailedInvocations counts it);
	// uncalled: the claim failed the run before calling the function (Run.Invocations
	// does not count it).
	failedCall, uncalled bool
	// Steps are entries finished but not checkpointed; journaled first.
	Steps []Entry
	// Notify makes a later terminal update notify NotifyChannel, because the caller
	// waits for the run and it may finish on another gateway. (A terminal outcome
	// itself is told to this process's waiters directly, without a notification.)
	Notify bool
	// Bounds limit the entries the outcome journals.
	Bounds Bounds
	// AwaitWindow is the await's window (see AppendEntry): how far below its seq the
	// journal's last entry may be while steps run in parallel left holes; 0 or 1 for
	// right below.
	AwaitWindow int
	// Answered marks an outcome the function answered. Finish refuses a completed or
	// failed one (a *HolesError naming the missing seqs) while any seq below the
	// journal's last, Steps included, is missing: a function ends its run with every
	// entry below its last journaled. A suspended one may leave holes within its await's window;
	// the gateway's own endings (a deadline, a cancel, a failure it decides) take the
	// journal as it is.
	Answered bool
}

// whole reports whether Finish refuses o while the journal has a hole.
func (o Outcome) whole() bool {
	return o.Answered && (o.status == StatusCompleted || o.status == StatusFailed)
}

// Completed ends the run with output, after journaling steps.
func Completed(output json.RawMessage, steps ...Entry) Outcome {
	if len(output) == 0 {
		output = json.RawMessage("null")
	}
	return Outcome{status: StatusCompleted, output: output, Steps: steps}
}

// Failed ends the run with e, after journaling steps.
func Failed(e ErrorInfo, steps ...Entry) Outcome {
	return Outcome{status: StatusFailed, err: &e, Steps: steps}
}

// InvocationFailed ends the run with e because its invocation failed as a whole: the
// function did not answer, answered other than HTTP 200, or answered or checkpointed
// what cannot be applied. It counts in Run.FailedInvocations, as Failed does not.
func InvocationFailed(e ErrorInfo) Outcome {
	return Outcome{status: StatusFailed, err: &e, failedCall: true}
}

// FailedBeforeCall ends the run with e, from a claim that found the run must fail
// before calling its function (past a limit): the claim is not counted in
// Run.Invocations.
func FailedBeforeCall(e ErrorInfo) Outcome {
	return Outcome{status: StatusFailed, err: &e, uncalled: true}
}

// RetryingInvocation queues the run again after a failed invocation, due after from the
// database clock; the failure is recorded (seq 0), counts in Run.FailedInvocations and
// against the function's retry policy (Run.FailedInARow).
func RetryingInvocation(e ErrorInfo, after time.Duration) Outcome {
	return Outcome{status: StatusQueued, err: &e, wakeAfter: after, failedCall: true}
}

// Sleeping suspends the run until s's wake time, after journaling steps.
func Sleeping(s Sleep, steps ...Entry) Outcome {
	return Outcome{status: StatusSuspended, await: s, Steps: steps}
}

// RetryingStep suspends the run until a failed step may run again, after journaling
// steps.
func RetryingStep(r StepRetry, steps ...Entry) Outcome {
	return Outcome{status: StatusSuspended, await: r, Steps: steps}
}

// Resuming journals steps and makes the run due again at once, awaiting nothing: the
// function is called again with them (a step the gateway failed after its last attempt).
func Resuming(steps ...Entry) Outcome {
	return Outcome{status: StatusSuspended, Steps: steps}
}

// WaitingForAny suspends the run until the first of w's alternatives comes or w's
// timeout passes (see WaitAny), after journaling steps.
func WaitingForAny(w WaitAny, steps ...Entry) Outcome {
	return Outcome{status: StatusSuspended, await: w, Steps: steps}
}

// WaitingForEvent suspends the run until an event matches w or w's timeout passes
// (see WaitEvent), after journaling steps.
func WaitingForEvent(w WaitEvent, steps ...Entry) Outcome {
	return Outcome{status: StatusSuspended, await: w, Steps: steps}
}

// Receiving suspends the run until a message of r's topic is sent to it or r's timeout
// passes (see Receive), after journaling steps; a message already in its mailbox is
// taken at once.
func Receiving(r Receive, steps ...Entry) Outcome {
	return Outcome{status: StatusSuspended, await: r, Steps: steps}
}

// WaitingForCallback suspends the run until its callback is resolved or rejected, or
// the wait's timeout passes (see CallbackWait), after journaling steps.
func WaitingForCallback(w CallbackWait, steps ...Entry) Outcome {
	return Outcome{status: StatusSuspended, await: w, Steps: steps}
}

// InvokingChildren suspends the run while the child runs of in, which Finish starts,
// run, after journaling steps.
func InvokingChildren(in InvokeAll, steps ...Entry) Outcome {
	return Outcome{status: StatusSuspended, await: in, Steps: steps}
}

// InvokingChild suspends the run while its child run, which Finish starts, runs, after
// journaling steps.
func InvokingChild(in Invoke, steps ...Entry) Outcome {
	return Outcome{status: StatusSuspended, await: in, Steps: steps}
}

// Status returns the run's status after the outcome.
func (o Outcome) Status() Status { return o.status }

// Output returns a completed run's output.
func (o Outcome) Output() json.RawMessage { return o.output }

// Error returns a failed run's error, or a failed invocation's.
func (o Outcome) Error() *ErrorInfo { return o.err }

// Await returns what a suspended run waits for.
func (o Outcome) Await() awaited { return o.await }

// Finished is what Finish reports about the updated run.
type Finished struct {
	Status Status
	// WakeAt is when a suspended or queued run is due, database clock; nil for a run
	// that waits for its child.
	WakeAt *time.Time
	// Clock is the database's wall clock when the update ran (clock_timestamp(), not the
	// transaction's start), so a caller can time a wake-up on the database clock.
	Clock time.Time
	// Child is the run that Outcome.Invoke started, queued: the caller enqueues its job
	// in the same transaction. It is nil when the function is not registered or its
	// invoke_roles refuse the run's identity: then the invoke entry is journaled at once
	// with that error (errorTypeNotFound, errorTypeForbidden) and the run is due now.
	Child *Run
	// Children are the runs an InvokeAll started, queued, as Child is for an Invoke.
	Children []*Run
	// Parent is set when the run is a child and this update made it terminal: its
	// parent's id (of the same tenant). If the parent still waited for it, the child's outcome is journaled in
	// the parent and the parent is due now (the trigger child_end_wakes_parent's trigger); the caller
	// enqueues the parent's job in the same transaction, which finds nothing to claim
	// when the parent did not wait (it was cancelled).
	Parent string
}

// Finish applies an invocation's outcome to the run it owns: the unjournaled steps, the
// entry it sleeps on, a failure record, the child run it invokes and the run's new
// status, all in db (the caller's transaction, which also holds the River job for the
// next move). It returns ErrSuperseded when the invocation no longer owns the run,
// ErrConflict when an entry conflicts with the journal, ErrGap when an entry or the
// await leaves a gap, and a *HolesError when an answered end (Outcome.Answered) leaves
// a hole. A terminal update notifies NotifyChannel when a waiter attached; any update
// notifies runevents.EventChannel when a gateway watches the tenant.
//
// A child run inherits the run's tenant and identity, read from the run's row. When a
// child becomes terminal (here, or by CancelRun), the same statement journals its
// outcome in its parent at the child's ParentSeq (kind kindInvoke, the child's output or
// error, started when the child was created) and makes the parent due now, through the
// trigger child_end_wakes_parent (docs/internals.md); both only while the parent waits for
// it (suspended with no wake time), so a cancelled parent stays cancelled and nothing
// is journaled twice. Finished.Parent names the parent.
//
// Triggers that follow it (docs/internals.md): run_event_on_status, run_releases_slots (leaving running), child_end_wakes_parent, run_end_wakes_awaiters (an awaited run's end) (a child's end),
// run_journal_bytes_on_finish (its finish).
func Finish(ctx context.Context, db DB, runID string, invocation int, o Outcome) (*Finished, error) {
	for _, e := range o.Steps {
		if err := AppendEntry(ctx, db, runID, invocation, e, o.Bounds); err != nil {
			return nil, err
		}
	}
	wakeAfter, awaitSeq := o.wakeAfter, 0
	window := min(max(o.AwaitWindow, 1), MaxWindow)
	var until *time.Time
	var awaiting json.RawMessage // NULL when nothing is awaited
	timed := true                // queued, or suspended with nothing awaited: due after wakeAfter
	if o.await != nil {
		until, wakeAfter, timed = o.await.wake()
		a := o.await.awaiting()
		awaitSeq = a.Seq
		var err error
		if awaiting, err = json.Marshal(a); err != nil {
			return nil, fmt.Errorf("finish invocation %d of run %s: %w", invocation, runID, err)
		}
	}
	var r finishRow
	err := r.scan(db.QueryRow(ctx, dbsqlc.RunFinish, dbsqlc.RunFinishParams{
		AwaitSeq: int32(awaitSeq), WindowSize: int32(window), Status: string(o.status), Output: o.output, Error: errorJSON(o.err),
		Timed: timed, Until: until, AfterSeconds: wakeAfter.Seconds(), RunID: runID, Awaiting: awaiting,
		FailedCall: o.failedCall, Uncalled: o.uncalled, Notify: o.Notify, Invocation: int32(invocation), Whole: o.whole(),
	}.Args()...))
	if errors.Is(err, pgx.ErrNoRows) && o.whole() {
		return nil, holesError(ctx, db, runID, invocation, o)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrSuperseded
	}
	if err != nil {
		return nil, fmt.Errorf("finish invocation %d of run %s: %w", invocation, runID, unstorable(err))
	}
	f := r.f
	// The awaited seq comes right after the journal's end; the caller's transaction rolls
	// the update back otherwise.
	switch {
	case awaitSeq == 0:
	case r.seqTaken:
		return nil, fmt.Errorf("%w: seq %d is already journaled", ErrConflict, awaitSeq)
	case !r.follows:
		return nil, gapError("the await's seq", awaitSeq, window)
	case o.Bounds.MaxEntries > 0 && awaitSeq > o.Bounds.MaxEntries && !isStepRetry(o.await):
		// (A retried step's seq is taken by its entry once it ends, bounded then.)
		return nil, entriesLimit(awaitSeq, o.Bounds)
	}
	if o.await != nil {
		w := awaitWrite{runID: runID, invocation: invocation, tenant: r.tenant, identity: r.identity, bounds: o.Bounds, alt: -1}
		if err := o.await.write(ctx, db, w, &f); err != nil {
			return nil, err
		}
	}
	return &f, nil
}

// ErrNeedsTransaction is FinishWithLastStep's answer when it did not apply the outcome
// and cannot tell why in one round trip: the caller applies it with Finish in a
// transaction, which does.
var ErrNeedsTransaction = errors.New("journal: the outcome needs a transaction")

// FinishWithLastStep is Finish for the commonest answer that journals a step: a
// terminal outcome of a run that is not a child (no parent to wake) with one step, the
// journal's next entry (no window), as an SDK sends the step it finished last. It takes
// one round trip instead of four (BEGIN, the step, the update, COMMIT): the step's insert
// and the run's update go to Postgres as one pipelined batch, which runs them as one
// implicit transaction, committed once. The update applies only when the insert
// journaled the step, so when the step is refused (a conflict, a gap, a bound, a lost
// lease) the run is left as it was and the step's error is returned, as Finish returns
// it. When the step was journaled already (an identical repeat), the run is left as it
// was too, and it returns ErrNeedsTransaction; likewise when the update is refused
// because the journal has a hole below the step (an answered end, Outcome.Answered),
// but then the step, which follows the journal, stays journaled as its checkpoint would
// have been; and at once for any other outcome, and when db is a transaction (whose
// earlier inserts the update could not tell from the batch's): call it on a pool.
//
// Triggers that follow it (docs/internals.md): run_event_on_status, run_releases_slots (leaving running), child_end_wakes_parent, run_end_wakes_awaiters (an awaited run's end) (a child's end),
// run_journal_bytes_on_finish (its finish).
func FinishWithLastStep(ctx context.Context, db DB, runID string, invocation int, o Outcome) (*Finished, error) {
	if _, inTx := db.(pgx.Tx); inTx || !o.status.Terminal() || o.await != nil || len(o.Steps) != 1 || o.Steps[0].Window > 1 {
		return nil, ErrNeedsTransaction
	}
	e := o.Steps[0]
	if err := entryTooLarge(e, o.Bounds); err != nil {
		return nil, err
	}
	batch := &pgx.Batch{}
	batch.Queue(dbsqlc.EntryAppendInOrder, dbsqlc.EntryAppendInOrderParams{
		RunID: runID, Seq: int32(e.Seq), Invocation: int32(invocation), Size: e.Size(),
		Kind: e.Kind, Name: e.Name, Output: e.Output, Error: errorJSON(e.Error), Attempt: int32(max(e.Attempt, 1)),
		WakeAt: e.WakeAt, StartedAt: e.StartedAt, MaxEntries: int4(o.Bounds.MaxEntries), MaxBytes: int4(o.Bounds.MaxJournalBytes),
	}.Args()...)
	// A terminal outcome: no await (seq 0, window 1), no wake time.
	stepSeq := int32(e.Seq)
	batch.Queue(dbsqlc.RunFinish, dbsqlc.RunFinishParams{
		WindowSize: 1, Status: string(o.status), Output: o.output, Error: errorJSON(o.err), Timed: true,
		RunID: runID, FailedCall: o.failedCall, Uncalled: o.uncalled, Notify: o.Notify, Invocation: int32(invocation), Whole: o.whole(),
		Step: &stepSeq,
	}.Args()...)

	var step appendResult
	var r finishRow
	br := db.SendBatch(ctx, batch)
	stepErr := step.scan(br.QueryRow())
	var err error
	if stepErr == nil {
		err = r.scan(br.QueryRow())
	}
	if cerr := br.Close(); cerr != nil && stepErr == nil && err == nil {
		err = cerr
	}
	switch {
	case stepErr != nil:
		return nil, fmt.Errorf("append entry %d to run %s: %w", e.Seq, runID, unstorable(stepErr))
	case errors.Is(err, pgx.ErrNoRows):
		if err := step.err(ctx, db, runID, e, 1, o.Bounds); err != nil {
			return nil, err
		}
		return nil, ErrNeedsTransaction
	case err != nil:
		return nil, fmt.Errorf("finish invocation %d of run %s: %w", invocation, runID, unstorable(err))
	}
	return &r.f, nil
}

// finishRow is what Finish's statement returns.
type finishRow struct {
	f                 Finished
	tenant            string
	identity          Identity
	seqTaken, follows bool // the await's seq is journaled already; it follows the journal
}

func (r *finishRow) scan(row pgx.Row) error {
	var parent *string
	err := row.Scan(&r.f.Status, &r.f.WakeAt, &r.f.Clock, new(int), &parent, &r.tenant, &r.identity, &r.seqTaken, &r.follows)
	if parent != nil {
		r.f.Parent = *parent
	}
	return err
}

// holesError says why Finish's update of o, an answered end (Outcome.Answered), found no
// run: ErrSuperseded when the invocation no longer owns the running run, else a
// *HolesError naming the seqs missing below the journal's last (the first ten, and how
// many more) and the error a failed answer carried. It is the error path only: one more
// query.
func holesError(ctx context.Context, db DB, runID string, invocation int, o Outcome) error {
	var owned bool
	var top, count int
	var missing []int32
	// Scanned by hand: sqlc does not type owned, top nor missing.
	err := db.QueryRow(ctx, dbsqlc.EntryHoles, dbsqlc.EntryHolesParams{Invocation: int32(invocation), RunID: runID}.Args()...).
		Scan(&owned, &top, &count, &missing)
	switch {
	case err != nil:
		return fmt.Errorf("find holes in the journal of run %s: %w", runID, err)
	case !owned || count == 0:
		return ErrSuperseded
	}
	answer := fmt.Sprintf("%q", o.status)
	if o.err != nil {
		answer += fmt.Sprintf(" (error %s %q)", o.err.Type, clip(o.err.Message))
	}
	return &HolesError{fmt.Errorf("%w: the answer is %s, but %s not journaled below seq %d, the journal's last: a run ends only "+
		"with every entry below its last journaled (by a checkpoint, or in the answer's steps)", ErrGap, answer, seqsAre(missing, count), top)}
}

// seqsAre says "seq 1 is" or "seqs 1, 2 are" of the count seqs missing, of which
// missing lists the first, with how many more.
func seqsAre(missing []int32, count int) string {
	seqs := make([]string, len(missing))
	for i, s := range missing {
		seqs[i] = fmt.Sprint(s)
	}
	list := strings.Join(seqs, ", ")
	if count > len(missing) {
		list += fmt.Sprintf(" and %d more", count-len(missing))
	}
	if count > 1 {
		return "seqs " + list + " are"
	}
	return "seq " + list + " is"
}

func isStepRetry(a awaited) bool {
	_, ok := a.(StepRetry)
	return ok
}

// invoke starts the child run of in for the run, which Finish has just suspended with
// no wake time, or journals why it cannot start and makes the run due now.
func invoke(ctx context.Context, db DB, runID string, invocation int, tenant string, identity Identity, in *Invoke, f *Finished) error {
	child, err := startChild(ctx, db, runID, invocation, tenant, identity, in)
	if err != nil || child != nil {
		f.Child = child
		return err
	}
	return dueNow(ctx, db, runID, f)
}

// startChild creates the child run in, queued, and returns it; or, when its function is
// not registered or refuses the run's identity, or the tenant stores its quota of runs
// (in.MaxTenantRuns), journals that error at in.Seq and returns a nil child.
func startChild(ctx context.Context, db DB, runID string, invocation int, tenant string, identity Identity, in *Invoke) (*Run, error) {
	input := in.Input
	if len(input) == 0 {
		input = json.RawMessage("null")
	}
	child, _, err := CreateRun(ctx, db, NewRun{
		ID: in.ChildID, Tenant: tenant, Function: in.Function, Input: input, Identity: identity,
		ParentID: &runID, ParentSeq: in.Seq, ParentName: in.Name, Detached: in.Detached,
		Flowed:        true, // A child run is not throttled, rate limited nor debounced.
		MaxTenantRuns: in.MaxTenantRuns, MaxTenantJournalBytes: in.MaxTenantJournalBytes,
	})
	var fe *ForbiddenError
	var qe *QuotaError
	var e ErrorInfo
	switch {
	case err == nil:
		return child, nil
	case errors.Is(err, ErrNotFound):
		e = ErrorInfo{Type: errorTypeNotFound, Message: fmt.Sprintf("function %s is not registered", in.Function)}
	case errors.As(err, &fe):
		e = ErrorInfo{Type: errorTypeForbidden, Message: fmt.Sprintf(
			"function %s may be invoked only by the roles %v; the run's identity (%s) has %v",
			in.Function, fe.InvokeRoles, identity.Subject, identity.Roles)}
	case errors.As(err, &qe):
		e = ErrorInfo{Type: errorTypeLimit, Message: qe.Message}
	case isUniqueViolation(err):
		return nil, fmt.Errorf("%w: seq %d already has a child run", ErrConflict, in.Seq)
	default:
		return nil, err
	}
	refusal, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("journal invoke of run %s: %w", runID, err)
	}
	err = dbsqlc.New(db).EntryInvokeRefused(ctx, dbsqlc.EntryInvokeRefusedParams{RunID: runID, Seq: int32(in.Seq), Name: in.Name, Error: refusal, Invocation: int32(invocation)})
	if isUniqueViolation(err) {
		return nil, fmt.Errorf("%w: seq %d is already journaled", ErrConflict, in.Seq)
	}
	if err != nil {
		return nil, fmt.Errorf("journal invoke of run %s: %w", runID, err)
	}
	return nil, nil
}

// Lease names one invocation of a run: the run's lease belongs to that invocation.
type Lease struct {
	RunID      string
	Invocation int
}

// RenewLeases extends, to ttl from the database clock, the lease of each of leases whose
// invocation still owns its running run, in one statement, and returns the leases it
// renewed. A lease not returned is lost: its run was recovered by another gateway,
// finished, or cancelled, and its invocation's answer would be refused.
func RenewLeases(ctx context.Context, db DB, leases []Lease, ttl time.Duration) ([]Lease, error) {
	ids := make([]string, len(leases))
	invocations := make([]int32, len(leases))
	for i, l := range leases {
		ids[i], invocations[i] = l.RunID, int32(l.Invocation)
	}
	rows, err := dbsqlc.New(db).LeaseRenew(ctx, dbsqlc.LeaseRenewParams{TtlSeconds: ttl.Seconds(), Ids: ids, Invocations: invocations})
	if err != nil {
		return nil, fmt.Errorf("renew %d leases: %w", len(leases), err)
	}
	kept := make([]Lease, len(rows))
	for i, r := range rows {
		kept[i] = Lease{RunID: r.RID, Invocation: int(r.Invocation)}
	}
	return kept, nil
}

// ReapExpiredLeases recovers up to limit running runs whose lease has lapsed (their
// gateway died, or lost the database for longer than the lease), and returns their ids.
// Runs locked by another transaction are skipped.
//
// Recovering a running run (here and in ReleaseLeases) requeues it, due now, as a
// recovery: not a failed invocation, which the function's retry policy counts, but
// counts of its own: Run.Recoveries in the run's lifetime, and Run.RecoveriesInARow,
// started afresh from 1 when the journal grew since the run's previous recovery; the
// invoker fails a run past its cap. A run whose invocation was waiting out a sleep in its
// process is due when that sleep ends: the latest wake time of the sleeps among its last
// 64 entries (a parallel step may be journaled after a sleep being waited out), as a
// sleep that a function waits out in its process (invoker.Checkpoints.Append, invoker/checkpoint_sleep.go) is journaled
// before it ends. The caller enqueues each run's job in the same transaction. Each
// requeue notifies runevents.EventChannel when a gateway watches the run's tenant.
//
// Triggers that follow it (docs/internals.md): run_event_on_status, run_releases_slots.
func ReapExpiredLeases(ctx context.Context, db DB, limit int) ([]string, error) {
	ids, err := dbsqlc.New(db).LeaseReapExpired(ctx, int64(limit))
	if err != nil {
		return nil, fmt.Errorf("reap expired leases: %w", err)
	}
	return ids, nil
}

// ReleaseLeases recovers the runs that leases still own, at once, and returns their ids:
// a gateway that stops hands its unfinished invocations over (recovered as
// ReapExpiredLeases says).
//
// Triggers that follow it (docs/internals.md): run_event_on_status, run_releases_slots.
func ReleaseLeases(ctx context.Context, db DB, leases []Lease) ([]string, error) {
	ids := make([]string, len(leases))
	invocations := make([]int32, len(leases))
	for i, l := range leases {
		ids[i], invocations[i] = l.RunID, int32(l.Invocation)
	}
	ids, err := dbsqlc.New(db).LeaseRelease(ctx, dbsqlc.LeaseReleaseParams{Ids: ids, Invocations: invocations})
	if err != nil {
		return nil, fmt.Errorf("release %d leases: %w", len(leases), err)
	}
	return ids, nil
}

// InvokeJobKind is the kind of the River job that invokes a run: its args hold the run's
// id as run_id. Migration 0015 indexes those ids.
const InvokeJobKind = "stepgate.invoke"

// StrandedRuns returns, and locks for the caller's transaction, up to limit runs that
// have been due for longer than grace (queued, or suspended past their wake time) with no
// live River job (of kind InvokeJobKind) to invoke them. A job is live when it is available, when
// it is running and was fetched within grace (its worker claims the run in
// milliseconds), or when it is scheduled or retryable at a time within grace, and no
// later than grace after the run is due. So a run is stranded when its job was deleted
// or discarded, when its job was fetched by a process that died before claiming the run,
// when its job waits, past its time, for River's leader to make it available (no leader
// is elected yet), or when its only job is for later (a wait's timeout) while another
// transaction made it due (an awaited run's end, a freed slot) and no gateway heard of it. The caller enqueues a job for
// each, available at once, in the same transaction: a claim is fenced, so a job too many
// finds nothing to do. It looks at the examine runs that have been due the longest, so
// its cost is bounded; a stranded run stays among them until it is found. Runs locked by
// another transaction are skipped.
func StrandedRuns(ctx context.Context, db DB, grace time.Duration, examine, limit int) ([]string, error) {
	ids, err := dbsqlc.New(db).RunsStranded(ctx, dbsqlc.RunsStrandedParams{
		GraceSeconds: grace.Seconds(), Examine: int64(examine), MaxRuns: int64(limit)})
	if err != nil {
		return nil, fmt.Errorf("find stranded runs: %w", err)
	}
	return ids, nil
}

// Wake is a run due at a time, on the database clock.
type Wake struct {
	RunID string
	At    time.Time
}

// UpcomingWakes returns the runs due at a time in (after, now + within] on the database
// clock, and not due yet (suspended with a wake time, or queued for a retry's backoff;
// those already due are River's and the stranded-run sweep's), earliest first,
// at most limit of them, and the database clock. It reads the index run_due.
func UpcomingWakes(ctx context.Context, db DB, after time.Time, within time.Duration, limit int) ([]Wake, time.Time, error) {
	// Scanned by hand: sqlc types the lateral join's id NOT NULL, and now not at all.
	rows, _ := db.Query(ctx, dbsqlc.RunsUpcomingWakes, dbsqlc.RunsUpcomingWakesParams{
		After: after, WithinSeconds: within.Seconds(), MaxRuns: int64(limit)}.Args()...)
	var wakes []Wake
	var now time.Time
	var id *string
	var at *time.Time
	_, err := pgx.ForEachRow(rows, []any{&id, &at, &now}, func() error {
		if id != nil {
			wakes = append(wakes, Wake{RunID: *id, At: *at})
		}
		return nil
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("find upcoming wakes: %w", err)
	}
	return wakes, now, nil
}
