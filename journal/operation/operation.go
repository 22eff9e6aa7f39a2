// Package operation holds the journal's bulk operations on a tenant's runs: a cancel or a
// rerun of the runs a filter matches, stored as one row and done in batches by the
// invoker's background worker (counts, a position, an errors sample).
package operation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
	"github.com/stepgate/stepgate/journal/storable"
)

// Operation statuses.
const (
	OperationRunning   = "running"
	OperationCompleted = "completed"
	OperationFailed    = "failed"
	OperationCancelled = "cancelled"
)

// Operation kinds.
const (
	OperationKindCancel = "cancel"
	OperationKindRerun  = "rerun"
)

// MaxOperationErrors is how many reasons an operation keeps in its errors sample.
const MaxOperationErrors = 20

// Where a rerun operation starts each new run (RerunOptions.From).
const (
	RerunFromStart   = "start"
	RerunFromFailure = "failure"
)

// CancelFilter selects runs of a tenant for a bulk operation. Every criterion set must
// hold; at least one is set (the caller validates). A cancel matches only runs that have
// not finished, a rerun only runs that have, whatever Statuses says.
type CancelFilter struct {
	Function             *string          `json:"function,omitempty"`
	Statuses             []journal.Status `json:"status,omitempty"` // Any of them; all unfinished (cancel) or finished (rerun) statuses when empty.
	CreatedAfter         *time.Time       `json:"created_after,omitempty"`
	CreatedBefore        *time.Time       `json:"created_before,omitempty"`
	IdempotencyKeyPrefix *string          `json:"idempotency_key_prefix,omitempty"`
	ErrorType            *string          `json:"error_type,omitempty"`  // A rerun's only.
	ErrorGroup           *string          `json:"error_group,omitempty"` // A rerun's only: stepgate.error_group of a failed run.
}

// RerunOptions is where a rerun operation starts each new run: at FromSeq when set,
// else from the start (From "start" or empty) or at the old run's last entry holding an
// error (From "failure"; from the start when none does).
type RerunOptions struct {
	From    string `json:"from,omitempty"`
	FromSeq *int   `json:"from_seq,omitempty"`
}

// OperationError is one reason in an operation's errors sample.
type OperationError struct {
	RunID string `json:"run_id"`
	Error string `json:"error"`
}

// Operation is a bulk operation on a tenant's runs, done in the background in batches.
// Kind "cancel" cancels the runs matching Filter that were created before it; kind
// "rerun" reruns the finished ones, as By, from Options.
type Operation struct {
	ID          string
	Tenant      string
	Kind        string
	Status      string
	Filter      CancelFilter
	Options     RerunOptions // A rerun's.
	By          journal.Identity
	Matched     *int64 // Runs matching when the work began; nil before.
	Cancelled   int64  // Runs done: cancelled by a cancel, rerun by a rerun.
	Failed      int64  // A rerun's runs it could not rerun.
	Errors      []OperationError
	Batches     int
	Error       *string
	CreatedAt   time.Time
	FinishedAt  *time.Time
	CancelledBy *journal.Identity // Who cancelled the operation, when it was.
	// After is where a rerun's walk over runs has reached (RecordRerunBatch); nil at
	// the start.
	After *BatchCursor
}

// operationOf is the operation a row of stepgate.operation holds.
func operationOf(r dbsqlc.StepgateOperation) (*Operation, error) {
	op := &Operation{
		ID: r.ID, Tenant: r.Tenant, Kind: r.Kind, Status: r.Status, By: r.ByIdentity,
		Matched: r.Matched, Cancelled: r.Cancelled, Batches: int(r.Batches), Error: r.Error,
		CreatedAt: r.CreatedAt, FinishedAt: r.FinishedAt, Failed: r.Failed,
	}
	if r.AfterCreatedAt != nil && r.AfterID != nil {
		op.After = &BatchCursor{CreatedAt: *r.AfterCreatedAt, ID: *r.AfterID}
	}
	if err := json.Unmarshal(r.Filter, &op.Filter); err != nil {
		return nil, fmt.Errorf("the filter of operation %s: %w", r.ID, err)
	}
	if len(r.Errors) > 0 {
		if err := json.Unmarshal(r.Errors, &op.Errors); err != nil {
			return nil, fmt.Errorf("the errors of operation %s: %w", r.ID, err)
		}
	}
	if len(r.Options) > 0 {
		if err := json.Unmarshal(r.Options, &op.Options); err != nil {
			return nil, fmt.Errorf("the options of operation %s: %w", r.ID, err)
		}
	}
	if len(r.CancelledBy) > 0 {
		op.CancelledBy = new(journal.Identity)
		if err := json.Unmarshal(r.CancelledBy, op.CancelledBy); err != nil {
			return nil, fmt.Errorf("the canceller of operation %s: %w", r.ID, err)
		}
	}
	return op, nil
}

// RunningOperationError: the tenant already has a running operation, ID; a tenant runs
// one at a time.
type RunningOperationError struct{ ID string }

func (e *RunningOperationError) Error() string {
	return fmt.Sprintf("journal: operation %s is still running; one runs at a time", e.ID)
}

// Unwrap makes errors.Is(err, journal.ErrConflict) hold.
func (e *RunningOperationError) Unwrap() error { return journal.ErrConflict }

// CreateOperation stores a running operation of kind (OperationKindCancel, or
// OperationKindRerun with options) of tenant with filter, asked for by by. It returns a
// *RunningOperationError when the tenant has one running, and an error wrapping
// [storable.ErrUnstorable] when the filter holds text Postgres cannot store.
func CreateOperation(ctx context.Context, db journal.DB, id, tenant, kind string, filter CancelFilter, options *RerunOptions, by journal.Identity) (*Operation, error) {
	f, err := json.Marshal(filter)
	if err != nil {
		return nil, fmt.Errorf("create operation: %w", err)
	}
	var opts json.RawMessage
	if options != nil {
		if opts, err = json.Marshal(options); err != nil {
			return nil, fmt.Errorf("create operation: %w", err)
		}
	}
	q := dbsqlc.New(db)
	row, err := q.OperationCreate(ctx, dbsqlc.OperationCreateParams{ID: id, Tenant: tenant, Kind: kind, Filter: f, Options: opts, ByIdentity: by})
	if err == nil {
		return operationOf(row)
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("create operation: %w", storable.Translate(err))
	}
	running, err := q.OperationRunningID(ctx, tenant)
	if err != nil {
		// It finished in between: the caller may ask again.
		return nil, fmt.Errorf("create operation: %w", journal.ErrConflict)
	}
	return nil, &RunningOperationError{ID: running}
}

// GetOperation returns the tenant's operation id, or journal.ErrNotFound.
func GetOperation(ctx context.Context, db journal.DB, tenant, id string) (*Operation, error) {
	row, err := dbsqlc.New(db).OperationGet(ctx, dbsqlc.OperationGetParams{ID: id, Tenant: tenant})
	return gotOperation(row, err, id)
}

// gotOperation is the operation id read as row with err, or journal.ErrNotFound.
func gotOperation(row dbsqlc.StepgateOperation, err error, id string) (*Operation, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, journal.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get operation %s: %w", id, err)
	}
	op, err := operationOf(row)
	if err != nil {
		return nil, fmt.Errorf("get operation %s: %w", id, err)
	}
	return op, nil
}

// CountMatching sets the operation's matched count to the runs its filter matches now,
// unless it is set already.
func CountMatching(ctx context.Context, db journal.DB, op *Operation) error {
	f := filterOf(op)
	var matched *int64
	var err error
	if op.Kind == OperationKindRerun {
		matched, err = dbsqlc.New(db).OperationRerunCountMatching(ctx, dbsqlc.OperationRerunCountMatchingParams{
			Op: op.ID, Tenant: op.Tenant, Before: f.before, Function: f.function, CreatedAfter: f.createdAfter,
			Prefix: f.prefix, Statuses: f.statuses, ErrorType: op.Filter.ErrorType, ErrorGroup: op.Filter.ErrorGroup,
		})
	} else {
		matched, err = dbsqlc.New(db).OperationCountMatching(ctx, dbsqlc.OperationCountMatchingParams{
			Op: op.ID, Tenant: op.Tenant, Before: f.before, Function: f.function, CreatedAfter: f.createdAfter,
			Prefix: f.prefix, Statuses: f.statuses,
		})
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("count runs of operation %s: %w", op.ID, err)
	}
	op.Matched = matched
	return nil
}

// BatchCursor is a keyset position in an operation's walk over runs by (created_at, id).
type BatchCursor struct {
	CreatedAt time.Time
	ID        string
}

// CancelledRun is a run a batch cancelled.
type CancelledRun struct {
	ID        string
	ParentID  *string // Set, with ParentSeq, when the run is a child.
	ParentSeq *int
	CreatedAt time.Time
}

// CancelBatch cancels up to limit runs matching op's filter past after (nil: from the
// start), oldest first, like journal.CancelRun (as op.By), and adds them to op's counts. It
// returns the runs it cancelled and the position it reached, nil when no run is left
// (the caller then calls FinishOperation). A child cancelled so wakes its waiting
// parent: the caller enqueues the parents' jobs in the same transaction.
//
// Triggers that follow it (docs/internals.md): run_event_on_status, run_releases_slots, child_end_wakes_parent, run_journal_bytes_on_finish.
func CancelBatch(ctx context.Context, db journal.DB, op *Operation, after *BatchCursor, limit int) ([]CancelledRun, *BatchCursor, error) {
	f := filterOf(op)
	p := dbsqlc.OperationBatchParams{
		Tenant: op.Tenant, Before: f.before, Function: f.function, CreatedAfter: f.createdAfter,
		Prefix: f.prefix, Statuses: f.statuses, MaxRuns: int32(limit),
	}
	if after != nil {
		p.AfterT, p.AfterID = &after.CreatedAt, &after.ID
	}
	q := dbsqlc.New(db)
	batch, err := q.OperationBatch(ctx, p)
	if err != nil {
		return nil, nil, fmt.Errorf("select a batch of operation %s: %w", op.ID, err)
	}
	todo := make([]BatchCursor, len(batch))
	ids := make([]string, len(batch))
	for i, r := range batch {
		todo[i] = BatchCursor{CreatedAt: r.CreatedAt, ID: r.ID}
		ids[i] = r.ID
	}
	e, err := json.Marshal(journal.ErrorInfo{Type: "cancelled", Message: "cancelled by " + op.By.Subject + " (operation " + op.ID + ")"})
	if err != nil {
		return nil, nil, fmt.Errorf("cancel a batch of operation %s: %w", op.ID, err)
	}
	by, err := json.Marshal(op.By)
	if err != nil {
		return nil, nil, fmt.Errorf("cancel a batch of operation %s: %w", op.ID, err)
	}
	rows, err := q.OperationCancelBatch(ctx, dbsqlc.OperationCancelBatchParams{
		Ids: ids, Tenant: op.Tenant, Error: e, CancelledBy: by, Op: op.ID,
	})
	if err != nil {
		return nil, nil, fmt.Errorf("cancel a batch of operation %s: %w", op.ID, err)
	}
	cancelled := make([]CancelledRun, len(rows))
	for i, r := range rows {
		cancelled[i] = CancelledRun{ID: r.ID, ParentID: r.ParentID, CreatedAt: r.CreatedAt}
		if r.ParentSeq != nil {
			seq := int(*r.ParentSeq)
			cancelled[i].ParentSeq = &seq
		}
	}
	op.Cancelled += int64(len(cancelled))
	op.Batches++
	if len(todo) < limit {
		return cancelled, nil, nil
	}
	return cancelled, &todo[len(todo)-1], nil
}

// FinishOperation marks op completed, or failed with errMsg when it is not empty.
func FinishOperation(ctx context.Context, db journal.DB, op *Operation, errMsg string) error {
	row, err := dbsqlc.New(db).OperationFinish(ctx, dbsqlc.OperationFinishParams{ID: op.ID, ErrorMessage: errMsg})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("finish operation %s: %w", op.ID, err)
	}
	got, err := operationOf(row)
	if err != nil {
		return fmt.Errorf("finish operation %s: %w", op.ID, err)
	}
	*op = *got
	return nil
}

// GetOperationByID returns any tenant's operation id (for the background worker, on
// the system pool), or journal.ErrNotFound.
func GetOperationByID(ctx context.Context, db journal.DB, id string) (*Operation, error) {
	row, err := dbsqlc.New(db).OperationGetByID(ctx, id)
	return gotOperation(row, err, id)
}

// runFilter is the arguments of OperationCountMatching and OperationBatch that match the
// runs of an operation's filter created before it.
type runFilter struct {
	before       time.Time
	function     *string
	createdAfter *time.Time
	prefix       *string
	statuses     []string
}

func filterOf(op *Operation) runFilter {
	f := op.Filter
	before := op.CreatedAt
	if f.CreatedBefore != nil && f.CreatedBefore.Before(before) {
		before = f.CreatedBefore.Add(-time.Microsecond) // created_before is exclusive
	}
	statuses := []string{}
	for _, s := range f.Statuses {
		statuses = append(statuses, string(s))
	}
	if len(statuses) == 0 && op.Kind == OperationKindRerun {
		statuses = []string{"completed", "failed", "cancelled"}
	} else if len(statuses) == 0 {
		statuses = []string{"scheduled", "queued", "running", "suspended"}
	}
	return runFilter{
		before: before, function: f.Function, createdAfter: f.CreatedAfter,
		prefix: f.IdempotencyKeyPrefix, statuses: statuses,
	}
}

// LockOperation locks the operation for a batch in tx, until tx ends: CancelOperation
// waits for it. It refreshes *op from the row and reports whether it is still running.
func LockOperation(ctx context.Context, tx pgx.Tx, op *Operation) (bool, error) {
	row, err := dbsqlc.New(tx).OperationLock(ctx, op.ID)
	got, err := gotOperation(row, err, op.ID)
	if err != nil {
		return false, fmt.Errorf("lock operation: %w", err)
	}
	*op = *got
	return op.Status == OperationRunning, nil
}

// FinishedOperationError: the operation has ended (its Status), so it cannot be cancelled.
type FinishedOperationError struct {
	ID     string
	Status string
}

func (e *FinishedOperationError) Error() string {
	return fmt.Sprintf("journal: operation %s is %s", e.ID, e.Status)
}

// Unwrap makes errors.Is(err, journal.ErrConflict) hold.
func (e *FinishedOperationError) Unwrap() error { return journal.ErrConflict }

// CancelOperation cancels the tenant's running operation id, as by: it does no further
// batch (it waits for a batch under way to commit, see LockOperation). It returns
// journal.ErrNotFound for no operation of the tenant, a *FinishedOperationError for one that has
// ended.
func CancelOperation(ctx context.Context, db journal.DB, tenant, id string, by journal.Identity) (*Operation, error) {
	b, err := json.Marshal(by)
	if err != nil {
		return nil, fmt.Errorf("cancel operation %s: %w", id, err)
	}
	row, err := dbsqlc.New(db).OperationCancel(ctx, dbsqlc.OperationCancelParams{ID: id, Tenant: tenant, CancelledBy: b})
	if errors.Is(err, pgx.ErrNoRows) {
		op, err := GetOperation(ctx, db, tenant, id)
		if err != nil {
			return nil, err
		}
		return op, &FinishedOperationError{ID: id, Status: op.Status}
	}
	return gotOperation(row, err, id)
}

// RerunCandidate is a run a rerun operation's batch is to rerun.
type RerunCandidate struct {
	ID         string
	CreatedAt  time.Time
	Function   string
	Input      json.RawMessage
	FailureSeq int // The seq of its last entry holding an error (with RerunFromFailure); 0 for none.
}

// RerunBatch returns up to limit finished runs matching op's filter, created before op,
// past op.After (the position its last batch reached), oldest first.
func RerunBatch(ctx context.Context, db journal.DB, op *Operation, limit int) ([]RerunCandidate, error) {
	f := filterOf(op)
	p := dbsqlc.OperationRerunBatchParams{
		FromFailure: op.Options.From == RerunFromFailure && op.Options.FromSeq == nil,
		Tenant:      op.Tenant, Before: f.before, Function: f.function, CreatedAfter: f.createdAfter,
		Prefix: f.prefix, Statuses: f.statuses, ErrorType: op.Filter.ErrorType, ErrorGroup: op.Filter.ErrorGroup,
		MaxRuns: int32(limit),
	}
	if op.After != nil {
		p.AfterT, p.AfterID = &op.After.CreatedAt, &op.After.ID
	}
	rows, err := dbsqlc.New(db).OperationRerunBatch(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("select a batch of operation %s: %w", op.ID, err)
	}
	out := make([]RerunCandidate, len(rows))
	for i, r := range rows {
		out[i] = RerunCandidate{ID: r.ID, CreatedAt: r.CreatedAt, Function: r.Function, Input: r.Input, FailureSeq: int(r.FailureSeq)}
	}
	return out, nil
}

// RerunDone is a run a rerun operation reran: NewRunID, or Error when it could not.
type RerunDone struct {
	RunID    string
	NewRunID string
	Error    string
}

// RecordRerunBatch records the runs a batch of op took (a run taken twice is an error:
// the batch fails whole), adds them to op's counts (Cancelled: rerun; Failed: with an
// Error, the first of them in Errors up to MaxOperationErrors), and moves op's position
// to after, so that its next batch, in this process or another, starts there. Call it in
// the transaction that created the new runs, with op locked (LockOperation).
func RecordRerunBatch(ctx context.Context, db journal.DB, op *Operation, runs []RerunDone, after BatchCursor) error {
	p := dbsqlc.OperationRerunRecordParams{
		Op: op.ID, Tenant: op.Tenant, DoneRuns: []string{}, NewRuns: []string{}, FailedRuns: []string{}, FailedErrors: []string{},
		AfterT: &after.CreatedAt, AfterID: &after.ID,
	}
	sample := []OperationError{}
	for _, r := range runs {
		if r.Error == "" {
			p.DoneRuns, p.NewRuns = append(p.DoneRuns, r.RunID), append(p.NewRuns, r.NewRunID)
			continue
		}
		p.FailedRuns, p.FailedErrors = append(p.FailedRuns, r.RunID), append(p.FailedErrors, r.Error)
		if len(op.Errors)+len(sample) < MaxOperationErrors {
			sample = append(sample, OperationError{RunID: r.RunID, Error: r.Error})
		}
	}
	var err error
	if p.Sample, err = json.Marshal(sample); err != nil {
		return fmt.Errorf("record a batch of operation %s: %w", op.ID, err)
	}
	row, err := dbsqlc.New(db).OperationRerunRecord(ctx, p)
	got, err := gotOperation(row, err, op.ID)
	if err != nil {
		return fmt.Errorf("record a batch of operation %s: %w", op.ID, err)
	}
	*op = *got
	return nil
}

// MaxReruns is how many of a run's reruns RunReruns returns.
const MaxReruns = 100

// RunReruns returns the ids of the tenant's runs that rerun the run id (their rerun_of),
// oldest first, at most MaxReruns.
func RunReruns(ctx context.Context, db journal.DB, tenant, id string) ([]string, error) {
	ids, err := dbsqlc.New(db).RunReruns(ctx, dbsqlc.RunRerunsParams{Tenant: tenant, RunID: &id, MaxRuns: MaxReruns})
	if err != nil {
		return nil, fmt.Errorf("list reruns of run %s: %w", id, err)
	}
	return ids, nil
}
