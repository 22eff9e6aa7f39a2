package journal

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// Awaiting is what a suspended run waits for, stored on the run (run.awaiting) and shown
// by the API, so that no reader has to guess it from the journal.
type Awaiting struct {
	Kind string `json:"kind"` // awaitSleep, awaitInvokeAll, or another await's kind ("retry", "invoke", "wait_event", "receive", "await_callback", ...)
	Seq  int    `json:"seq"`  // The journal seq the run resumes at.
	Name string `json:"name"`
	// Attempt is the failed attempt of a step a retry waits to make again.
	Attempt int `json:"attempt,omitempty"`
	// Count is how many child runs an invoke_all waits for, at Seq to Seq+Count-1.
	Count int `json:"count,omitempty"`
	// ChildID and Function name the child run an invoke waits for.
	ChildID  string `json:"child_id,omitempty"`
	Function string `json:"function,omitempty"`
	// Event and Match say which event a wait_event waits for: its name, and the values
	// its fields must hold.
	Event string          `json:"event,omitempty"`
	Match json.RawMessage `json:"match,omitempty"`
	// Topic is the topic of the messages a receive waits for.
	Topic string `json:"topic,omitempty"`
	// CallbackSeq is the seq of the callback an await_callback waits for (its name is
	// the await's Name when the SDK makes it).
	CallbackSeq int `json:"callback_seq,omitempty"`
	// RunID is the run an await_run waits for the end of.
	RunID string `json:"run_id,omitempty"`
	// Of are the alternatives of a wait_any, at its seq and name.
	Of []Awaiting `json:"of,omitempty"`
}

// Await kinds.
const (
	awaitSleep  = "sleep"
	awaitRetry  = "retry"
	awaitInvoke = "invoke"
	// awaitInvokeAll waits for several child runs (InvokeAll); their entries are of
	// kind invoke.
	awaitInvokeAll = "invoke_all"
	// awaitWaitEvent waits for an event (WaitEvent); its entry has the same kind.
	awaitWaitEvent = "wait_event"
	// awaitReceive waits for a message of a topic (Receive); its entry has the same kind.
	awaitReceive = "receive"
	// awaitCallback waits for a callback's resolution (CallbackWait); its entry has the
	// same kind.
	awaitCallback = "await_callback"
)

// awaited is what a suspended run waits for: a Sleep, a StepRetry, an Invoke, a
// WaitEvent, a Receive or a CallbackWait. Each kind says where it sits in the journal,
// when the run is due again, and what Finish writes for it besides the run's status.
type awaited interface {
	// awaiting describes the await as it is stored on the run.
	awaiting() Awaiting
	// wake returns the run's wake time: until (absolute), or after (from the database
	// clock), or neither when something else makes it due (a child's end).
	wake() (until *time.Time, after time.Duration, timed bool)
	// write journals what the await needs in db, the transaction of Finish's fenced
	// update (which holds the run's row lock), and completes f.
	write(ctx context.Context, db DB, w awaitWrite, f *Finished) error
}

// awaitWrite is what an await's write knows of the run.
type awaitWrite struct {
	runID      string
	invocation int
	tenant     string
	identity   Identity
	bounds     Bounds
	// alt numbers the await among the alternatives of a WaitAny (0, 1, ...), or is -1:
	// its wait row carries it, and the entry that ends it is wrapped for the WaitAny
	// (see docs/schema.md, Event waits).
	alt int
}

// Sleep waits until a time: the entry at Seq, of kind kindSleep, journals it with its
// wake time, Until or For from the database clock.
type Sleep struct {
	Seq   int
	Name  string
	Until *time.Time
	For   time.Duration
}

func (s Sleep) awaiting() Awaiting { return Awaiting{Kind: awaitSleep, Seq: s.Seq, Name: s.Name} }

func (s Sleep) wake() (*time.Time, time.Duration, bool) { return s.Until, s.For, true }

func (s Sleep) write(ctx context.Context, db DB, w awaitWrite, f *Finished) error {
	err := dbsqlc.New(db).AwaitSleep(ctx, dbsqlc.AwaitSleepParams{
		Tenant: w.tenant, RunID: w.runID, Seq: int32(s.Seq), Kind: kindSleep, Name: s.Name, WakeAt: f.WakeAt, Invocation: int32(w.invocation),
	})
	if isUniqueViolation(err) {
		return fmt.Errorf("%w: seq %d is already journaled", ErrConflict, s.Seq)
	}
	if err != nil {
		return fmt.Errorf("journal sleep of run %s: %w", w.runID, unstorable(err))
	}
	return nil
}

// StepRetry waits to run a failed step again: Failure is recorded, not journaled (the
// step has no entry until it succeeds or runs out of attempts), and the run is due
// After from the database clock.
type StepRetry struct {
	Failure Failure
	After   time.Duration
}

func (r StepRetry) awaiting() Awaiting {
	return Awaiting{Kind: awaitRetry, Seq: r.Failure.Seq, Name: r.Failure.Name, Attempt: r.Failure.Attempt}
}

func (r StepRetry) wake() (*time.Time, time.Duration, bool) { return nil, r.After, true }

func (r StepRetry) write(ctx context.Context, db DB, w awaitWrite, _ *Finished) error {
	sf := r.Failure
	e, err := json.Marshal(sf.Error)
	if err == nil {
		err = dbsqlc.New(db).AwaitStepFailure(ctx, dbsqlc.AwaitStepFailureParams{
			Tenant: w.tenant, RunID: w.runID, Seq: int32(sf.Seq), Attempt: int32(sf.Attempt), Name: sf.Name, Error: e,
		})
	}
	if err != nil {
		return fmt.Errorf("record step failure of run %s: %w", w.runID, err)
	}
	return nil
}

// Invoke is a run's call of another function: a child run, whose outcome is journaled
// in the run at Seq, as an entry of kind kindInvoke named Name, when it ends; that end
// makes the run due (it has no wake time meanwhile).
type Invoke struct {
	Seq      int
	Name     string
	ChildID  string          // A UUID chosen by the caller for the child run.
	Function string          // In the run's tenant, at its current revision.
	Input    json.RawMessage // The child inherits the run's identity, which the function's invoke_roles must admit.
	Detached bool            // The child is not cancelled with the run.
	// MaxTenantRuns caps the runs the tenant stores (usage.Quotas.MaxRuns): a child that
	// would pass it is not started, and its error (errorTypeLimit, naming the quota) is
	// journaled at its seq. 0 does not limit.
	MaxTenantRuns int64
	// MaxTenantJournalBytes caps the journal bytes of the tenant's finished runs
	// (usage.Quotas.MaxJournalBytes), as MaxTenantRuns caps its runs. 0 does not limit.
	MaxTenantJournalBytes int64
}

func (in Invoke) awaiting() Awaiting {
	return Awaiting{Kind: awaitInvoke, Seq: in.Seq, Name: in.Name, ChildID: in.ChildID, Function: in.Function}
}

func (in Invoke) wake() (*time.Time, time.Duration, bool) { return nil, 0, false }

func (in Invoke) write(ctx context.Context, db DB, w awaitWrite, f *Finished) error {
	return invoke(ctx, db, w.runID, w.invocation, w.tenant, w.identity, &in, f)
}

// MaxInvokeAll is how many child runs one InvokeAll may start.
const MaxInvokeAll = 64

// InvokeAll is a run's call of several functions at once: child runs at Seq, Seq+1, ...
// (Calls' Seq and Name are set from it), whose outcomes are journaled in the run, each at
// its seq, as entries of kind kindInvoke named Name when it ends. The last of them to
// be journaled makes the run due (the trigger child_end_wakes_parent; docs/internals.md); a call that cannot start
// (errorTypeNotFound, errorTypeForbidden, errorTypeLimit past the tenant's quota of
// runs) is journaled at once.
type InvokeAll struct {
	Seq   int
	Name  string
	Calls []Invoke // ChildID, Function, Input and Detached of each.
}

func (in InvokeAll) awaiting() Awaiting {
	return Awaiting{Kind: awaitInvokeAll, Seq: in.Seq, Name: in.Name, Count: len(in.Calls)}
}

func (in InvokeAll) wake() (*time.Time, time.Duration, bool) { return nil, 0, false }

func (in InvokeAll) write(ctx context.Context, db DB, w awaitWrite, f *Finished) error {
	journaled := 0
	for i := range in.Calls {
		c := in.Calls[i]
		c.Seq, c.Name = in.Seq+i, in.Name
		child, err := startChild(ctx, db, w.runID, w.invocation, w.tenant, w.identity, &c)
		if err != nil {
			return err
		}
		if child == nil {
			journaled++
			continue
		}
		f.Children = append(f.Children, child)
	}
	if journaled == len(in.Calls) {
		return dueNow(ctx, db, w.runID, f)
	}
	return nil
}

// EntryWakeAt returns the wake time of the sleep journaled at seq of run runID.
func EntryWakeAt(ctx context.Context, db DB, runID string, seq int) (time.Time, error) {
	at, err := dbsqlc.New(db).AwaitEntryWakeAt(ctx, dbsqlc.AwaitEntryWakeAtParams{RunID: runID, Seq: int32(seq)})
	if err == nil && at == nil {
		err = fmt.Errorf("entry %d is not a sleep", seq)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("wake time of entry %d of run %s: %w", seq, runID, err)
	}
	return *at, nil
}
