package journal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrFinished: the run is already terminal (completed, failed or cancelled), so it
// cannot be cancelled.
var ErrFinished = errors.New("journal: run is finished")

// CancelRun cancels the tenant's run unless it is terminal: its status becomes
// cancelled, with an error of type "cancelled" whose message names by's subject, and by
// recorded as cancelled_by, whatever invocation owns it. The running invocation, if any, is fenced out (its checkpoints
// and answer get ErrSuperseded) and a pending wake-up finds nothing to claim. A
// waiter's mark notifies NotifyChannel, a watch EventChannel.
//
// A cancelled child run is ended like any other (see Finish): when its parent waits for
// it, the cancellation is journaled in the parent at the child's ParentSeq and the
// parent is due now, so the caller enqueues the parent's job in the same transaction
// (a job for a parent that did not wake finds nothing to claim). CancelRun does not
// cancel the run's children: the caller does, with CancelDescendants, in the same
// transaction; the outcome of a child that goes on (a detached one) is not journaled
// in the cancelled parent.
//
// It returns the cancelled run, or ErrNotFound for another tenant's or an unknown
// run, or ErrFinished with the run as it is when it was already terminal.
func CancelRun(ctx context.Context, db DB, tenant, id string, by Identity) (*Run, error) {
	e := ErrorInfo{Type: "cancelled", Message: "cancelled by " + by.Subject}
	rows, _ := db.Query(ctx, `
		WITH u AS (
			UPDATE stepgate.run SET status = 'cancelled', error = $3, lease_until = NULL,
				wake_at = NULL, awaiting = NULL, finished_at = now(), cancelled_by = $4
			WHERE id = $1 AND tenant = $2 AND status IN ('scheduled', 'queued', 'running', 'suspended')
			RETURNING `+runColumns+`, notify
		), waits AS (
			DELETE FROM stepgate.run_wait w USING u WHERE w.run_id = u.id
		), notified AS (
			SELECT pg_notify('`+NotifyChannel+`', id::text) FROM u WHERE notify
		)
		SELECT `+runColumns+` FROM u, (SELECT count(*) FROM notified) notified_count`,
		id, tenant, e, by)
	run, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Run])
	if err == nil {
		return run, nil
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
// transaction. A waiter's mark notifies NotifyChannel, a watch EventChannel. It works by
// run id, for any tenant (the invoker's deadline timers and River job call it).
//
// It returns the failed run; ErrFinished when the run has ended; ErrNotDue with the
// run when its deadline has not come (or it has none); ErrNotFound when it is gone.
func ExceedDeadline(ctx context.Context, db DB, id string) (*Run, error) {
	rows, _ := db.Query(ctx, `
		WITH u AS (
			UPDATE stepgate.run SET status = 'failed',
				error = jsonb_build_object('type', $2::text, 'message',
					'the run passed its deadline of ' || to_char(deadline AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"')),
				invocation = invocation + 1, owner_nonce = NULL, lease_until = NULL,
				wake_at = NULL, awaiting = NULL, finished_at = now()
			WHERE id = $1 AND deadline <= now() AND status IN ('scheduled', 'queued', 'running', 'suspended')
			RETURNING `+runColumns+`, notify
		), waits AS (
			DELETE FROM stepgate.run_wait w USING u WHERE w.run_id = u.id
		), notified AS (
			SELECT pg_notify('`+NotifyChannel+`', id::text) FROM u WHERE notify
		)
		SELECT `+runColumns+` FROM u, (SELECT count(*) FROM notified) notified_count`,
		id, ErrorTypeDeadline)
	run, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Run])
	if err == nil {
		return run, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("fail run %s past its deadline: %w", id, err)
	}
	rows, _ = db.Query(ctx, `SELECT `+runColumns+` FROM stepgate.run WHERE id = $1`, id)
	run, err = pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Run])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
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
	rows, _ := db.Query(ctx, `
		WITH c AS (SELECT now() AS now)
		SELECT d.id, d.at, c.now FROM c LEFT JOIN LATERAL (
			SELECT id::text AS id, deadline AS at FROM stepgate.run
			WHERE deadline IS NOT NULL AND status IN ('scheduled', 'queued', 'running', 'suspended')
				AND deadline > $1 AND deadline <= c.now + make_interval(secs => $2)
			ORDER BY deadline
			LIMIT $3) d ON true`, after, within.Seconds(), limit)
	var deadlines []Wake
	var now time.Time
	var id *string
	var at *time.Time
	_, err := pgx.ForEachRow(rows, []any{&id, &at, &now}, func() error {
		if id != nil {
			deadlines = append(deadlines, Wake{RunID: *id, At: *at})
		}
		return nil
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("find upcoming deadlines: %w", err)
	}
	return deadlines, now, nil
}
