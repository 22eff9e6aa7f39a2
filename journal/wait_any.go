package journal

import (
	"context"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// awaitWaitAny waits for the first of several waits (WaitAny); its entry has the same
// kind.
const (
	awaitWaitAny = "wait_any"
	kindWaitAny  = awaitWaitAny
)

// MaxAlternatives bounds the waits of a WaitAny.
const MaxAlternatives = 8

// WaitAny suspends a run until the first of its alternatives (a WaitEvent, a
// CallbackWait, a Receive, each at the WaitAny's Seq and Name) comes, or Timeout
// passes; then the entry at Seq, of kind kindWaitAny, journals which: {"index": i,
// "kind": <the alternative's kind>, "output": <what its own entry would hold>}, or
// {"timed_out": true}. Only one alternative ever resumes the run: each is a run_wait
// row at Seq (alt i), and whoever resolves one deletes them all, after locking the
// run's row (docs/schema.md, Event waits). An alternative that has already come when the run
// suspends (an event stored since the invocation started, a resolved callback, a
// message in the mailbox) is journaled at once, the first in order, and the others are
// not stored: a message is not taken from the mailbox unless its receive is chosen.
type WaitAny struct {
	Seq     int
	Name    string
	Timeout time.Duration
	Of      []awaited
}

func (w WaitAny) awaiting() Awaiting {
	a := Awaiting{Kind: awaitWaitAny, Seq: w.Seq, Name: w.Name}
	for _, o := range w.Of {
		a.Of = append(a.Of, o.awaiting())
	}
	return a
}

func (w WaitAny) wake() (*time.Time, time.Duration, bool) { return nil, w.Timeout, true }

// write stores the alternatives' waits in order, until one is journaled at once (its
// write made the run due now: f.WakeAt is no later than f.Clock); then the waits stored
// before it are deleted.
func (w WaitAny) write(ctx context.Context, db DB, aw awaitWrite, f *Finished) error {
	for i, o := range w.Of {
		aw.alt = i
		if err := o.write(ctx, db, aw, f); err != nil {
			return err
		}
		if f.WakeAt.After(f.Clock) {
			continue // it waits
		}
		if i > 0 {
			if err := dbsqlc.New(db).WaitAnyDeleteWaits(ctx, dbsqlc.WaitAnyDeleteWaitsParams{Tenant: aw.tenant, RunID: aw.runID, Seq: int32(w.Seq)}); err != nil {
				return fmt.Errorf("wait_any of run %s: %w", aw.runID, err)
			}
		}
		return nil
	}
	return nil
}
