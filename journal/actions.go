package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// ErrFinished: the run is already terminal (completed, failed or cancelled), so it
// cannot be cancelled.
var ErrFinished = errors.New("journal: run is finished")

// CancelRun cancels the tenant's run unless it is terminal: its status becomes
// cancelled, with an error of type "cancelled" whose message names by's subject, and by
// recorded as cancelled_by, whatever invocation owns it. The running invocation, if any, is fenced out (its checkpoints
// and answer get ErrSuperseded) and a pending wake-up finds nothing to claim. A
// waiter's mark notifies NotifyChannel, a watch runevents.EventChannel.
//
// A cancelled child run is ended like any other (see Finish): when its parent waits for
// it, the cancellation is journaled in the parent at the child's ParentSeq and the
// parent is due now, so the caller enqueues the parent's job in the same transaction
// (a job for a parent that did not wake finds nothing to claim). CancelRun does not
// cancel the run's children: the caller does, with canceltree.CancelDescendants, in the same
// transaction; the outcome of a child that goes on (a detached one) is not journaled
// in the cancelled parent.
//
// It returns the cancelled run, or ErrNotFound for another tenant's or an unknown
// run, or ErrFinished with the run as it is when it was already terminal.
//
// Triggers that follow it (docs/internals.md): run_event_on_status, run_releases_slots, child_end_wakes_parent, run_end_wakes_awaiters (an awaited run's end), run_journal_bytes_on_finish.
func CancelRun(ctx context.Context, db DB, tenant, id string, by Identity) (*Run, error) {
	e := ErrorInfo{Type: "cancelled", Message: "cancelled by " + by.Subject}
	ej, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("cancel run %s: %w", id, err)
	}
	bj, err := json.Marshal(by)
	if err != nil {
		return nil, fmt.Errorf("cancel run %s: %w", id, err)
	}
	row, err := dbsqlc.New(db).ActionCancelRun(ctx, dbsqlc.ActionCancelRunParams{ID: id, Tenant: tenant, Error: ej, CancelledBy: bj})
	var run *Run
	if err == nil {
		if run, err = storedRun(dbsqlc.RunsByIDRow(row)); err == nil {
			return run, nil
		}
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("cancel run %s: %w", id, err)
	}
	// The update re-checks a row changed under it, so no row means the run was
	// terminal (it stays so) or is not the tenant's.
	run, err = GetRun(ctx, db, tenant, id)
	if err != nil {
		return nil, err
	}
	return run, ErrFinished
}

// ErrorTypeDeadline is the error type of a run failed by ExceedDeadline.
const ErrorTypeDeadline = "deadline_exceeded"

// ExceedDeadline fails the run with an error of type ErrorTypeDeadline if its deadline
// has passed on the database clock and it has not ended, whatever it is doing: queued,
// scheduled, suspended (its run_wait rows are deleted, as CancelRun does) or running
// (its invocation number is bumped and its status changes, so its checkpoints and
// answer get ErrSuperseded). A child run's end is journaled in a parent waiting for it,
// which becomes due now (see Finish): the caller enqueues the parent's job in the same
// transaction. A waiter's mark notifies NotifyChannel, a watch runevents.EventChannel. It works by
// run id, for any tenant (the invoker's deadline timers and River job call it).
//
// It returns the failed run; ErrFinished when the run has ended; ErrNotDue with the
// run when its deadline has not come (or it has none); ErrNotFound when it is gone.
//
// Triggers that follow it (docs/internals.md): run_event_on_status, run_releases_slots, child_end_wakes_parent, run_end_wakes_awaiters (an awaited run's end), run_journal_bytes_on_finish.
func ExceedDeadline(ctx context.Context, db DB, id string) (*Run, error) {
	q := dbsqlc.New(db)
	row, err := q.ActionExceedDeadline(ctx, dbsqlc.ActionExceedDeadlineParams{ID: id, ErrorType: ErrorTypeDeadline})
	var run *Run
	if err == nil {
		if run, err = storedRun(dbsqlc.RunsByIDRow(row)); err == nil {
			return run, nil
		}
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("fail run %s past its deadline: %w", id, err)
	}
	got, err := q.ActionGetRunByID(ctx, id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err == nil {
		run, err = storedRun(dbsqlc.RunsByIDRow(got))
	}
	if err != nil {
		return nil, fmt.Errorf("get run %s: %w", id, err)
	}
	if run.Status.Terminal() {
		return run, ErrFinished
	}
	return run, ErrNotDue
}

// UpcomingDeadlines returns the runs that have not ended whose deadline is in
// (after, now + within] on the database clock, earliest first, at most limit of them,
// and the database clock. Deadlines already passed are among them (with a zero after):
// a run still going past its deadline is one whose timer is gone with its gateway. It
// reads the index run_deadline, for any tenant (the invoker's maintenance passes arm
// timers for them).
func UpcomingDeadlines(ctx context.Context, db DB, after time.Time, within time.Duration, limit int) ([]Wake, time.Time, error) {
	rows, err := dbsqlc.New(db).ActionUpcomingDeadlines(ctx, dbsqlc.ActionUpcomingDeadlinesParams{
		After: after, WithinSecs: within.Seconds(), Max: int64(limit),
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("find upcoming deadlines: %w", err)
	}
	var deadlines []Wake
	var now time.Time
	for _, r := range rows {
		now = r.Now
		if r.ID != "" {
			deadlines = append(deadlines, Wake{RunID: r.ID, At: *r.At})
		}
	}
	return deadlines, now, nil
}
