package journal

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// awaitRun waits for another run of the tenant to end (RunWait); its entry has the same
// kind.
const (
	awaitRun     = "await_run"
	kindAwaitRun = awaitRun
)

// RunWait suspends a run until the run RunID of its tenant ends (completed, failed or
// cancelled) or Timeout passes; then the entry at Seq, of kind kindAwaitRun, journals
// {"run": {"id", "status", "output"}} for a completed run, {"run": {"id", "status",
// "error"}} for a failed or cancelled one (stepgate.run_end_output), or {"timed_out":
// true}. Any run of the tenant may be awaited, a child or not. The waiting run's
// identity must hold runs:read, as a caller reading the run must: when it does not,
// the entry is {"run": {"id", "error": {"type": "forbidden"}}}, and when the tenant has
// no such run, {"run": {"id", "error": {"type": "not_found"}}}, both journaled at once.
//
// The wait is a run_wait row naming the awaited run, which is marked (run.awaited)
// under its row lock when the wait is stored; its end (any way it ends: Finish,
// CancelRun, a deadline, a bulk cancel) resumes its awaiters in its own transaction,
// through the trigger run_end_wakes_awaiters (docs/internals.md), which journals the end,
// makes each awaiter due and announces it on SlotChannel. A run that has ended already
// is journaled when the wait is stored, and the run is due at once.
type RunWait struct {
	Seq     int
	Name    string
	RunID   string
	Timeout time.Duration
}

func (w RunWait) awaiting() Awaiting {
	return Awaiting{Kind: awaitRun, Seq: w.Seq, Name: w.Name, RunID: w.RunID}
}

func (w RunWait) wake() (*time.Time, time.Duration, bool) { return nil, w.Timeout, true }

// write marks the awaited run and stores the wait, or, when the run has ended (or is
// not there, or the identity may not read it), journals that at once and makes the run
// due now.
func (w RunWait) write(ctx context.Context, db DB, aw awaitWrite, f *Finished) error {
	if f.WakeAt == nil {
		return fmt.Errorf("store await_run of run %s: it has no wake time", aw.runID)
	}
	q := dbsqlc.New(db)
	var refused []byte
	waiting := false
	if aw.identity.Has(access.PermissionRunsRead) {
		marked, err := q.AwaitRunMark(ctx, dbsqlc.AwaitRunMarkParams{Tenant: aw.tenant, AwaitedRun: w.RunID})
		if err != nil {
			return fmt.Errorf("store await_run of run %s: %w", aw.runID, err)
		}
		waiting = marked
	} else {
		refused, _ = json.Marshal(map[string]any{"run": map[string]any{"id": w.RunID, "error": ErrorInfo{
			Type: errorTypeForbidden, Message: fmt.Sprintf("the run's identity may not read run %s: it needs runs:read", w.RunID)}}})
	}
	err := q.AwaitRunStore(ctx, dbsqlc.AwaitRunStoreParams{
		Tenant: aw.tenant, AwaitedRun: w.RunID, Alt: int16(aw.alt), Refused: refused, Waiting: waiting,
		RunID: aw.runID, Seq: int32(w.Seq), Name: w.Name, Invocation: int32(aw.invocation), ExpiresAt: *f.WakeAt,
	})
	if isUniqueViolation(err) {
		return fmt.Errorf("%w: seq %d is already journaled", ErrConflict, w.Seq)
	}
	if err != nil {
		return fmt.Errorf("store await_run of run %s: %w", aw.runID, unstorable(err))
	}
	if !waiting {
		return dueNow(ctx, db, aw.runID, f)
	}
	return nil
}

// WaitingForRun suspends the run until the run of w ends or w's timeout passes (see
// RunWait), after journaling steps.
func WaitingForRun(w RunWait, steps ...Entry) Outcome {
	return Outcome{status: StatusSuspended, await: w, Steps: steps}
}
