// Package journal records durable function runs and their journals in Postgres: the
// functions and their immutable revisions, the runs, the journal entries and the failed
// attempts. All of stepgate's SQL lives here.
//
// The guarantees are the database's, not only this package's: (run_id, seq) is unique and
// entries are immutable (a trigger refuses updates); a terminal run never changes (a
// trigger); every write by an invocation is fenced by the run's invocation number and
// status in the same statement; an idempotency key is unique per tenant and function.
package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// DB is satisfied by *pgxpool.Pool, *pgx.Conn and pgx.Tx, so callers own transactions.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// Errors returned by this package. Callers map them to HTTP statuses at one place.
var (
	ErrNotFound = errors.New("journal: not found")
	// ErrConflict: a different entry already holds that seq (nondeterminism).
	ErrConflict = errors.New("journal: entry conflicts with the journal")
	// ErrSuperseded: the invocation no longer owns the run (finished, cancelled, or
	// another invocation claimed it).
	ErrSuperseded = errors.New("journal: invocation superseded")
	// ErrIdempotencyMismatch: the idempotency key was used with a different input.
	ErrIdempotencyMismatch = errors.New("journal: idempotency key used with a different input")
	// ErrNotDue: the run cannot be claimed now (not due yet, running elsewhere, or finished).
	ErrNotDue = errors.New("journal: run is not due")
)

// Status is a run's status.
type Status string

// Run statuses. Completed, failed and cancelled are terminal.
const (
	StatusScheduled Status = "scheduled"
	StatusQueued    Status = "queued"
	StatusRunning   Status = "running"
	StatusSuspended Status = "suspended"
	StatusCompleted Status = "completed"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
)

// Terminal reports whether s never changes again.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// Identity is who started a run (see access.Identity).
type Identity = access.Identity

// ErrorInfo describes a failure of a run, a step or an invocation.
type ErrorInfo struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable,omitempty"`
}

// Entry kinds.
const (
	KindStep  = "step"
	kindSleep = "sleep"
	// kindInvoke is the outcome of a child run, journaled in its parent when it ends
	// (see Finish): the child's output, or its error.
	kindInvoke = "invoke"
)

// Error types of an invoke entry journaled without a child run, and of a send refused.
const (
	errorTypeNotFound = "not_found" // the function (or the send's target run) is not in the tenant
	// errorTypeForbidden: the function's invoke_roles exclude the run's identity; for a
	// send, the target's invoke_roles and resume_roles do.
	errorTypeForbidden = "forbidden"
)

// Entry is one immutable journal entry of a run.
type Entry struct {
	Seq        int             `db:"seq"`
	Kind       string          `db:"kind"`
	Name       string          `db:"name"`
	Output     json.RawMessage `db:"output"`
	Error      *ErrorInfo      `db:"error"`
	Attempt    int             `db:"attempt"`
	WakeAt     *time.Time      `db:"wake_at"`
	StartedAt  *time.Time      `db:"started_at"`
	FinishedAt time.Time       `db:"finished_at"`
	// Copied: the entry was copied from the run this one reruns (NewRun.RerunOf) by
	// CopyEntries, not journaled by this run's invocations.
	Copied bool `db:"copied"`
	// Window, on a checkpoint (never stored), is how far below Seq the journal's last
	// entry may be: 1 (or 0) for right below, up to MaxWindow for steps run in parallel
	// (see AppendEntry).
	Window int `db:"-"`
}

// MaxWindow is the largest window an entry or an await may declare: how many seqs below
// it may still be missing while steps run in parallel.
const MaxWindow = 64

// Failure is a failed attempt, kept for inspection and never replayed. Seq 0 is a whole
// invocation; seq > 0 is an attempt of the step at that seq.
type Failure struct {
	Seq       int       `db:"seq"`
	Attempt   int       `db:"attempt"`
	Name      string    `db:"name"`
	Error     ErrorInfo `db:"error"`
	CreatedAt time.Time `db:"created_at"`
}

// StepAttempts returns what a claim of run runID reads as Claim.StepAttempts (the same
// named query, ClaimStepAttempts): the next attempt of each step that has failed before
// and has no entry yet, by its seq.
func StepAttempts(ctx context.Context, db DB, runID string) (map[int]int, error) {
	rows, err := dbsqlc.New(db).ClaimStepAttempts(ctx, dbsqlc.ClaimStepAttemptsParams{RunID: runID})
	if err != nil {
		return nil, fmt.Errorf("read the step attempts of run %s: %w", runID, err)
	}
	out := make(map[int]int, len(rows))
	for _, r := range rows {
		out[int(r.Seq)] = int(r.Attempt)
	}
	return out, nil
}

func isUniqueViolation(err error) bool {
	return pgErrCode(err) == "23505"
}

// pgErrCode is the SQLSTATE of the Postgres error err wraps, or "".
func pgErrCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// Cursor is a keyset position in a newest-first listing (runs, events): the next page
// holds the items strictly older than (CreatedAt, ID).
type Cursor struct {
	CreatedAt time.Time `json:"t"`
	ID        string    `json:"id"`
}

// keyset returns c as the nullable query arguments of a listing.
func (c *Cursor) keyset() (*time.Time, *string) {
	if c == nil {
		return nil, nil
	}
	return &c.CreatedAt, &c.ID
}

// pageLimit is a listing's page size, 50 unless set.
func pageLimit(limit int) int {
	if limit <= 0 {
		return 50
	}
	return limit
}

// cutPage trims items, fetched with one more than limit, to the page and returns the
// cursor of the next page (nil on the last page).
// readPage reads a listing's rows one at a time (scan gives an item and its bytes): at
// most limit+1 items, as the query's LIMIT asks, and none after the first once the
// items' bytes reach budget. It returns the items and the page's length for cutPage: a
// page cut by bytes ends with one item more (a zero T), so that cutPage gives its cursor.
// The rows not read are discarded when rows is closed.
func readPage[T any](rows pgx.Rows, limit int, budget int64, scan func(pgx.Rows) (T, int64, error)) ([]T, int, error) {
	var items []T
	var used int64
	for rows.Next() {
		if len(items) > 0 && used >= budget {
			n := len(items)
			return append(items, *new(T)), n, nil
		}
		item, size, err := scan(rows)
		if err != nil {
			return nil, 0, err
		}
		used += size
		items = append(items, item)
	}
	return items, limit, rows.Err()
}

func cutPage[T any](items []T, limit int, pos func(T) Cursor) ([]T, *Cursor) {
	if len(items) <= limit {
		return items, nil
	}
	items = items[:limit]
	c := pos(items[limit-1])
	return items, &c
}
