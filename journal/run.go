package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// Run is one execution of a function.
type Run struct {
	ID             string          `db:"id"`
	Tenant         string          `db:"tenant"`
	Function       string          `db:"function"`
	Revision       int             `db:"revision"`
	Status         Status          `db:"status"`
	Input          json.RawMessage `db:"input"`
	Output         json.RawMessage `db:"output"`
	Error          *ErrorInfo      `db:"error"`
	Identity       Identity        `db:"identity"`
	IdempotencyKey *string         `db:"idempotency_key"`
	ParentID       *string         `db:"parent_id"`
	ParentSeq      *int            `db:"parent_seq"`  // A child's seq in its parent's journal.
	ParentName     *string         `db:"parent_name"` // The name of that entry.
	RerunOf        *string         `db:"rerun_of"`
	CancelledBy    *Identity       `db:"cancelled_by"` // Who cancelled it.
	// Detached: a child run that is not cancelled with its parent, and does not
	// inherit its deadline.
	Detached bool `db:"detached"`
	// Invocations counts the run's invocations: the claims that call its function, the
	// current one included (sent to the function as run.attempt). A claim that fails the
	// run before calling it (FailedBeforeCall) is not counted.
	Invocations int `db:"attempts"`
	// Invocation is the fencing token of the invocation that owns the run now.
	Invocation int `db:"invocation"`
	// FailedInvocations counts the run's invocations that failed as a whole, in its
	// lifetime: the function did not answer (a refused or dropped connection, a
	// timeout), answered other than HTTP 200, or answered or checkpointed what the
	// gateway cannot apply (see InvocationFailed). Never reset.
	FailedInvocations int `db:"lifetime_failed_invocations"`
	// FailedInARow counts failed invocations since the run last made progress: the
	// function's retry policy bounds it. Any outcome but a retried failure resets it.
	FailedInARow int `db:"failed_invocations"`
	// Recoveries counts the times in its lifetime the run was requeued because its
	// invocation's gateway died, stopped or lost the database (not failures of the
	// function). Never reset.
	Recoveries int `db:"lifetime_recoveries"`
	// RecoveriesInARow counts the recoveries since the journal last grew, reset by any
	// outcome of an invocation: the invoker fails the run past its limit.
	RecoveriesInARow int        `db:"recoveries"`
	LeaseUntil       *time.Time `db:"lease_until"`
	// Awaiting is what a suspended run waits for; nil otherwise.
	Awaiting *Awaiting  `db:"awaiting"`
	WakeAt   *time.Time `db:"wake_at"`
	// Deadline is when the run fails with ErrorTypeDeadline if it has not ended; nil
	// for none. See CreateRun and ExceedDeadline.
	Deadline *time.Time `db:"deadline"`
	// Held says why a queued or scheduled run has not started (a concurrency limit, a
	// throttle, a debounce); nil when nothing holds it back.
	Held *string `db:"held"`
	// Priority orders the run's invocations in River's queue: 1 first, 4 last (see
	// NewRun.Priority).
	Priority   int        `db:"priority"`
	CreatedAt  time.Time  `db:"created_at"`
	StartedAt  *time.Time `db:"started_at"`
	FinishedAt *time.Time `db:"finished_at"`
}

// NewRun is what CreateRun needs to start a run.
type NewRun struct {
	ID             string // A UUID chosen by the caller.
	Tenant         string
	Function       string
	Input          json.RawMessage
	Identity       Identity
	IdempotencyKey string  // Empty for none.
	ParentID       *string // The run that started this one, if any.
	// ParentSeq and ParentName, for a child run (ParentSeq > 0), are the parent's seq
	// and the name of the entry at which the child's outcome is journaled when it ends;
	// see Finish.
	ParentSeq  int
	ParentName string
	RerunOf    *string // The finished run this one reruns, if any.
	// Detached makes a child run that is not cancelled with its parent, and does not
	// inherit its deadline (it outlives the parent).
	Detached bool
	// Claim creates the run already claimed by the caller (status running, invocation
	// 1), leased for Lease, so the caller can invoke it at once with no queue hop.
	// Otherwise, or when its revision has concurrency limits, it is created queued.
	Claim bool
	Lease time.Duration
	// StartAt, when set, creates the run scheduled (a delayed start): it is due at
	// StartAt, not at once. Not with Claim.
	StartAt *time.Time
	// Deadline, when set, is when the run fails if it has not ended (see ExceedDeadline).
	// The run's deadline is the earliest of it, the revision's run_timeout from now, and,
	// for a child run (ParentSeq > 0) not Detached, its parent's deadline.
	Deadline *time.Time
	// Flowed says the caller applied the function's flow control (its throttle, rate
	// limit or debounce) to this start; without it CreateRun refuses to start a run of
	// a revision that has flow control, with a *FlowError.
	Flowed bool
	// Held is the run's held: why it is scheduled (a throttle, a debounce).
	Held *string
	// Priority, from MinPriority (first) to MaxPriority (last), orders every invocation
	// of the run in River's queue. 0: the revision's config.priority, else
	// defaultPriority.
	Priority int
	// MaxTenantRuns caps the runs the tenant stores (usage.Quotas.MaxRuns): a start that would
	// pass it creates nothing and returns a *QuotaError (a start whose idempotency key
	// names a run returns that run). 0 does not limit.
	MaxTenantRuns int64
	// MaxTenantJournalBytes caps the journal bytes of the tenant's finished runs
	// (usage.Quotas.MaxJournalBytes): once they reach it, a start creates nothing and returns
	// a *QuotaError, as for MaxTenantRuns. 0 does not limit.
	MaxTenantJournalBytes int64
}

// FlowError: the function's current revision has flow control (config.throttle,
// config.rate_limit or config.debounce), and the start did not apply it (NewRun.Flowed).
type FlowError struct {
	Function string
	Config   json.RawMessage // The revision's config.
}

func (e *FlowError) Error() string {
	return fmt.Sprintf("function %s has flow control: its starts go through it", e.Function)
}

// Run priorities, River's job priorities: 1 is fetched first.
const (
	MinPriority     = 1
	MaxPriority     = 4
	defaultPriority = 2
)

// ErrForbidden: the caller's roles may not invoke the function (its invoke_roles).
var ErrForbidden = errors.New("journal: the function's invoke_roles exclude the caller")

// ForbiddenError is ErrForbidden with the roles the function allows.
type ForbiddenError struct {
	Function    string
	InvokeRoles []string
}

func (e *ForbiddenError) Error() string {
	return fmt.Sprintf("function %s may be invoked only by the roles %v", e.Function, e.InvokeRoles)
}

// Unwrap makes errors.Is(err, ErrForbidden) hold.
func (e *ForbiddenError) Unwrap() error { return ErrForbidden }

// CreateRun inserts a run of the function's current revision. With an idempotency key
// already used for the same tenant and function, it returns that run and created=false
// when the input is the same JSON, or ErrIdempotencyMismatch. It returns ErrNotFound
// when the function is not registered, and a *ForbiddenError when the revision's
// invoke_roles exclude n.Identity, who starts the run (access.Identity.MayInvoke; checked
// before the key, so a refused caller is never handed someone else's run). It is one statement. A created run notifies runevents.EventChannel when a
// gateway watches the tenant. A revision with flow control creates no run but a
// *FlowError (after the invoke_roles check, before the key's), unless n.Flowed.
// A run of a revision with concurrency limits records its
// slot keys; with n.Claim it is created claimed only when it takes a slot of each key in
// the same statement (and has no idempotency key), else queued: see ClaimRunSlots.
// A start that would pass n.MaxTenantRuns creates nothing and returns a *QuotaError,
// checked in the same statement against the tenant's usage (usage.TenantUsageOf).
//
// Triggers that follow it (docs/internals.md): run_event_on_insert, run_usage_on_insert.
func CreateRun(ctx context.Context, db DB, n NewRun) (run *Run, created bool, err error) {
	var key *string
	if n.IdempotencyKey != "" {
		key = &n.IdempotencyKey
	}
	var priority *int16
	if n.Priority != 0 {
		p := int16(n.Priority)
		priority = &p
	}
	var parentSeq *int32
	var parentName *string
	if n.ParentSeq > 0 {
		seq := int32(n.ParentSeq)
		parentSeq, parentName = &seq, &n.ParentName
	}
	identity, err := json.Marshal(n.Identity)
	if err != nil {
		return nil, false, fmt.Errorf("create run of %s: %w", n.Function, unstorable(err))
	}
	q := dbsqlc.New(db)
	row, err := q.RunCreate(ctx, dbsqlc.RunCreateParams{
		ID: n.ID, StartAt: n.StartAt, Input: n.Input, Identity: identity,
		IdempotencyKey: key, ParentID: n.ParentID, ParentSeq: parentSeq, ParentName: parentName,
		RerunOf: n.RerunOf, Detached: n.Detached, LeaseSeconds: n.Lease.Seconds(),
		Deadline: n.Deadline, Held: n.Held, Priority: priority, Claim: n.Claim,
		Tenant: n.Tenant, Function: n.Function, CheckRoles: !n.Identity.IsAdmin(), Roles: rolesOf(n.Identity),
		Flowed: n.Flowed, MaxRuns: n.MaxTenantRuns, MaxJournalBytes: n.MaxTenantJournalBytes,
	})
	if err == nil {
		run, err = storedRun(dbsqlc.RunsByIDRow(row))
	}
	if err == nil {
		return run, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, false, fmt.Errorf("create run of %s: %w", n.Function, unstorable(err))
	}
	// The function is unknown, the caller may not invoke it, it has flow control, the
	// key is taken, or the tenant stores its quota of runs or of journal bytes.
	var allowed bool
	var roles []string
	var flowConfig json.RawMessage
	var stored, journalBytes int64
	// Scanned by hand: sqlc types invoke_roles, flow_config and runs not at all.
	err = db.QueryRow(ctx, dbsqlc.RunCreateRefused, dbsqlc.RunCreateRefusedParams{
		CheckRoles: !n.Identity.IsAdmin(), Roles: rolesOf(n.Identity), Flowed: n.Flowed, Tenant: n.Tenant, Function: n.Function}.Args()...).
		Scan(&allowed, &roles, &flowConfig, &stored, &journalBytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, ErrNotFound
	}
	if err != nil {
		return nil, false, fmt.Errorf("look up function %s: %w", n.Function, err)
	}
	if !allowed {
		return nil, false, &ForbiddenError{Function: n.Function, InvokeRoles: roles}
	}
	if flowConfig != nil {
		return nil, false, &FlowError{Function: n.Function, Config: flowConfig}
	}
	var full *QuotaError
	switch {
	case n.MaxTenantRuns > 0 && stored >= n.MaxTenantRuns:
		full = runsQuotaError(n.Tenant, stored, n.MaxTenantRuns)
	case n.MaxTenantJournalBytes > 0 && journalBytes >= n.MaxTenantJournalBytes:
		full = journalQuotaError(n.Tenant, journalBytes, n.MaxTenantJournalBytes)
	}
	if key == nil {
		if full != nil {
			return nil, false, full
		}
		return nil, false, ErrNotFound // deleted in between
	}
	run, err = RunByIdempotencyKey(ctx, db, n.Tenant, n.Function, *key, n.Input)
	if errors.Is(err, ErrNotFound) && full != nil {
		return nil, false, full
	}
	return run, false, err
}

// RunByIdempotencyKey returns the tenant's run of the function with the idempotency
// key, ErrIdempotencyMismatch when its input is not the same JSON as input, or
// ErrNotFound when there is none.
func RunByIdempotencyKey(ctx context.Context, db DB, tenant, function, key string, input json.RawMessage) (*Run, error) {
	var same bool
	// Scanned by hand, as the runs' rows are (scanRun).
	run, err := scanRun(db.QueryRow(ctx, dbsqlc.RunByIdempotencyKey, dbsqlc.RunByIdempotencyKeyParams{
		Input: input, Tenant: tenant, Function: function, IdempotencyKey: &key}.Args()...), &same)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("find run by idempotency key: %w", unstorable(err))
	}
	if !same {
		return nil, ErrIdempotencyMismatch
	}
	return run, nil
}

// GetRun returns the tenant's run, or ErrNotFound.
func GetRun(ctx context.Context, db DB, tenant, id string) (*Run, error) {
	row, err := dbsqlc.New(db).RunGet(ctx, dbsqlc.RunGetParams{ID: id, Tenant: tenant})
	var run *Run
	if err == nil {
		run, err = storedRun(dbsqlc.RunsByIDRow(row))
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get run %s: %w", id, err)
	}
	return run, nil
}

// scanRun reads a run from a row of a query that selects RunsByID's columns, then
// extra's: the queries whose rows are read in a batch, one by one, or with more columns.
func scanRun(row pgx.Row, extra ...any) (*Run, error) {
	var r dbsqlc.RunsByIDRow
	dst := append([]any{&r.ID, &r.Tenant, &r.Function, &r.Revision, &r.Status, &r.Input, &r.Output, &r.Error, &r.Identity,
		&r.IdempotencyKey, &r.ParentID, &r.ParentSeq, &r.ParentName, &r.RerunOf, &r.CancelledBy, &r.Detached, &r.Attempts, &r.Invocation,
		&r.LifetimeFailedInvocations, &r.FailedInvocations, &r.LifetimeRecoveries, &r.Recoveries, &r.LeaseUntil, &r.Awaiting,
		&r.WakeAt, &r.Deadline, &r.Held, &r.Priority, &r.CreatedAt, &r.StartedAt, &r.FinishedAt}, extra...)
	if err := row.Scan(dst...); err != nil {
		return nil, err
	}
	return storedRun(r)
}

// storedRun is the run a row of a query selecting RunsByID's columns holds: RunsByID's,
// RunGet's, RunCreate's, RunAttach's, FlowDebounceCollapse's, ActionCancelRun's,
// ActionExceedDeadline's or ActionGetRunByID's, converted to RunsByIDRow, or scanRun's. Its JSON columns are
// decoded as pgx decodes them into Run's fields: SQL NULL leaves a field nil. Its
// wake_at is nullif(wake_at, 'infinity') written as a CASE, which sqlc types as
// interface{}: a time.Time, or nil.
func storedRun(r dbsqlc.RunsByIDRow) (*Run, error) {
	run := &Run{
		ID: r.ID, Tenant: r.Tenant, Function: r.Function, Revision: int(r.Revision), Status: Status(r.Status),
		Input: r.Input, Output: r.Output, IdempotencyKey: r.IdempotencyKey, ParentID: r.ParentID,
		ParentName: r.ParentName, RerunOf: r.RerunOf, Detached: r.Detached,
		Invocations: int(r.Attempts), Invocation: int(r.Invocation),
		FailedInvocations: int(r.LifetimeFailedInvocations), FailedInARow: int(r.FailedInvocations),
		Recoveries: int(r.LifetimeRecoveries), RecoveriesInARow: int(r.Recoveries),
		LeaseUntil: r.LeaseUntil, Deadline: r.Deadline, Held: r.Held, Priority: int(r.Priority),
		CreatedAt: r.CreatedAt, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt,
	}
	if r.ParentSeq != nil {
		seq := int(*r.ParentSeq)
		run.ParentSeq = &seq
	}
	switch at := r.WakeAt.(type) {
	case nil:
	case time.Time:
		run.WakeAt = &at
	default:
		return nil, fmt.Errorf("run %s: wake_at of type %T", r.ID, r.WakeAt)
	}
	for _, c := range []struct {
		raw json.RawMessage
		dst any
	}{{r.Error, &run.Error}, {r.Identity, &run.Identity}, {r.CancelledBy, &run.CancelledBy}, {r.Awaiting, &run.Awaiting}} {
		if c.raw == nil {
			continue
		}
		if err := json.Unmarshal(c.raw, c.dst); err != nil {
			return nil, err
		}
	}
	return run, nil
}

// scanEntry reads an Entry from a row of RunDetailJournal's columns (ClaimJournal's,
// EntryAt's).
func scanEntry(row pgx.Row) (Entry, error) {
	var e Entry
	err := row.Scan(&e.Seq, &e.Kind, &e.Name, &e.Output, &e.Error, &e.Attempt, &e.WakeAt, &e.StartedAt, &e.FinishedAt, &e.Copied)
	return e, err
}

// JournalPage selects a page of a run's journal for GetRunDetail. Zero fields take
// their defaults.
type JournalPage struct {
	After    int   // The entries after this seq. 0: from the first.
	Limit    int   // At most this many entries. Defaults to 100.
	MaxBytes int64 // Stop before the entries' outputs and errors pass this. Defaults to 8 MiB.
	// NoFailures reads no failed attempts (Detail.Failures stays empty): for a reader
	// that needs the entries only, whose memory the failures' errors would add to.
	NoFailures bool
}

// Detail is a run with a page of its journal.
type Detail struct {
	Run     *Run
	Journal []Entry // In seq order.
	// Failures are the failed attempts of the page's entries, of the steps being retried
	// past the journal's end on its last page, and, on its first page, the latest
	// invocation failures (seq 0), at most maxInvocationFailures of them; oldest first.
	Failures []Failure
	// Next is the After of the next page, or 0 on the last page.
	Next int
}

// maxInvocationFailures bounds the invocation failures a Detail carries.
const maxInvocationFailures = 100

// GetRunDetail returns the tenant's run with a page of its journal and the failed
// attempts of that page, in one round trip, or ErrNotFound. Its work and memory are
// bounded by the page, however long the journal: the entries' bytes stay within
// p.MaxBytes, except a first entry larger than it.
func GetRunDetail(ctx context.Context, db DB, tenant, id string, p JournalPage) (*Detail, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	budget := p.MaxBytes
	if budget <= 0 {
		budget = 8 << 20
	}
	after := int32(min(max(p.After, 0), math.MaxInt32)) // a seq is an int4: none is after MaxInt32
	d := &Detail{}
	b := &pgx.Batch{}
	b.Queue(dbsqlc.RunGet, dbsqlc.RunGetParams{ID: id, Tenant: tenant}.Args()...).QueryRow(func(row pgx.Row) error {
		var err error
		d.Run, err = scanRun(row)
		return err
	})
	var last *int
	b.Queue(dbsqlc.RunDetailJournal, dbsqlc.RunDetailJournalParams{RunID: id, After: after, Tenant: tenant, MaxBytes: int64(budget), MaxEntries: int64(limit)}.Args()...).
		Query(func(rows pgx.Rows) error {
			var used int64
			for rows.Next() {
				if len(d.Journal) > 0 && used >= budget {
					break // entries written without their bytes (by builds before journal bytes were counted)
				}
				e, err := scanEntry(rows)
				if err != nil {
					return err
				}
				used += e.Size()
				d.Journal = append(d.Journal, e)
			}
			return rows.Err()
		})
	b.Queue(dbsqlc.RunLastSeq, dbsqlc.RunLastSeqParams{RunID: id, Tenant: tenant}.Args()...).QueryRow(func(row pgx.Row) error {
		return row.Scan(&last)
	})
	if !p.NoFailures {
		b.Queue(dbsqlc.RunDetailFailures, dbsqlc.RunDetailFailuresParams{Tenant: tenant, RunID: id, After: after, MaxInvocationFailures: maxInvocationFailures}.Args()...).
			Query(func(rows pgx.Rows) error {
				var err error
				d.Failures, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Failure, error) {
					var f Failure
					err := row.Scan(&f.Seq, &f.Attempt, &f.Name, &f.Error, &f.CreatedAt)
					return f, err
				})
				return err
			})
	}
	err := db.SendBatch(ctx, b).Close()
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get run %s: %w", id, err)
	}
	if n := len(d.Journal); n > 0 && last != nil && *last > d.Journal[n-1].Seq {
		d.Next = d.Journal[n-1].Seq
	}
	if d.Next > 0 {
		// The failures of the entries of later pages come with those pages.
		kept := d.Failures[:0]
		for _, f := range d.Failures {
			if f.Seq <= d.Next {
				kept = append(kept, f)
			}
		}
		d.Failures = kept
	}
	return d, nil
}

// wholeRunPageLimit is the entries of each page GetWholeRun reads the journal by.
const wholeRunPageLimit = 1000

// GetWholeRun returns the tenant's run with its whole journal and the failures
// GetRunDetail gives with it, read a page at a time, or ErrNotFound. It is bounded by
// the run's journal bounds (entries and bytes), which its writes enforce, and each page
// read by GetRunDetail's. The run's fields are read with the last page, so they are
// never older than its journal.
func GetWholeRun(ctx context.Context, db DB, tenant, id string) (*Detail, error) {
	whole := &Detail{}
	for after := 0; ; {
		d, err := GetRunDetail(ctx, db, tenant, id, JournalPage{After: after, Limit: wholeRunPageLimit})
		if err != nil {
			return nil, err
		}
		whole.Run = d.Run
		whole.Journal = append(whole.Journal, d.Journal...)
		whole.Failures = append(whole.Failures, d.Failures...)
		if d.Next == 0 {
			return whole, nil
		}
		after = d.Next
	}
}

// RunFilter selects runs for ListRuns. Zero fields do not filter.
type RunFilter struct {
	Function       string
	IdempotencyKey string
	Status         Status
	ErrorGroup     string // Failed runs of this group of the dead-letter view (FailureGroups).
	CreatedAfter   time.Time
	CreatedBefore  time.Time
	After          *Cursor // The page after this position.
	Limit          int     // Defaults to 50.
	// IncludeIO returns the runs' inputs, outputs and whole errors; without it they have
	// none, and an error's message is cut to 300 bytes.
	IncludeIO bool
	// MaxBytes, with IncludeIO, ends the page once the runs' inputs, outputs and errors
	// pass it (a page has one run at least). Defaults to 8 MiB.
	MaxBytes int64
}

// ListRuns returns the tenant's runs newest first, at most f.Limit of them, and the
// cursor of the next page (nil on the last page).
func ListRuns(ctx context.Context, db DB, tenant string, f RunFilter) ([]Run, *Cursor, error) {
	limit := pageLimit(f.Limit)
	budget := f.MaxBytes
	if budget <= 0 {
		budget = 8 << 20
	}
	afterT, afterID := f.After.keyset()
	// Read a row at a time, not collected as sqlc's method does.
	rows, _ := db.Query(ctx, dbsqlc.RunList, dbsqlc.RunListParams{
		IncludeIo: f.IncludeIO, Tenant: tenant, Function: f.Function, Status: string(f.Status),
		CreatedAfter: nullTime(f.CreatedAfter), CreatedBefore: nullTime(f.CreatedBefore), AfterCreatedAt: afterT, AfterID: afterID,
		IdempotencyKey: f.IdempotencyKey, ErrorGroup: f.ErrorGroup, MaxRuns: int64(limit) + 1}.Args()...)
	defer rows.Close()
	runs, limit, err := readPage(rows, limit, budget, func(rows pgx.Rows) (Run, int64, error) {
		r, err := scanRun(rows)
		if err != nil {
			return Run{}, 0, err
		}
		size := int64(len(r.Input) + len(r.Output))
		if r.Error != nil {
			size += int64(len(r.Error.Message))
		}
		return *r, size, nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("list runs: %w", err)
	}
	runs, next := cutPage(runs, limit, func(r Run) Cursor { return Cursor{r.CreatedAt, r.ID} })
	return runs, next, nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// Attach marks the tenant's run so that its terminal update sends a notification, and
// returns it as it is now. A waiter LISTENs first and then attaches: either the run was
// already terminal here, or its terminal update will see the mark and notify.
func Attach(ctx context.Context, db DB, tenant, id string) (*Run, error) {
	row, err := dbsqlc.New(db).RunAttach(ctx, dbsqlc.RunAttachParams{ID: id, Tenant: tenant})
	var run *Run
	if err == nil {
		run, err = storedRun(dbsqlc.RunsByIDRow(row))
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return GetRun(ctx, db, tenant, id) // terminal, already marked, or not found
	}
	if err != nil {
		return nil, fmt.Errorf("attach to run %s: %w", id, err)
	}
	return run, nil
}

// rolesOf returns id's roles as a text[] argument: never NULL.
func rolesOf(id Identity) []string {
	if id.Roles == nil {
		return []string{}
	}
	return id.Roles
}

// RevisionOfRun returns the tenant, function and revision of a run, any tenant's (the
// invoker works by run id), or ErrNotFound.
func RevisionOfRun(ctx context.Context, db DB, runID string) (tenant, function string, revision int, err error) {
	row, err := dbsqlc.New(db).RunRevision(ctx, runID)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", "", 0, ErrNotFound
	}
	if err != nil {
		return "", "", 0, fmt.Errorf("load run %s: %w", runID, err)
	}
	tenant, function, revision = row.Tenant, row.Function, int(row.Revision)
	return tenant, function, revision, nil
}

// NonceLen is the length of an invocation's owner nonce: 128 random bits in lowercase
// hex.
const NonceLen = 32

// ValidNonce reports whether nonce is NonceLen lowercase hex digits.
func ValidNonce(nonce string) bool {
	if len(nonce) != NonceLen {
		return false
	}
	for i := range len(nonce) {
		if c := nonce[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// ClaimInvocation claims invocation of run runID for the process that sent nonce, once:
// the first nonce asked while the invocation owns the running run is stored with the
// run, and only that nonce is answered nil again (a repeat of it is the same process: its
// parallel steps, a retried question). It returns ErrSuperseded otherwise: the run
// finished, was cancelled, suspended or claimed again, another nonce claimed this
// invocation first, or there is no such run. Every claim of the run for a new invocation
// clears the nonce. One statement (RunClaimInvocation). Any tenant's run: the invocation
// token that names both is what scopes the question.
func ClaimInvocation(ctx context.Context, db DB, runID string, invocation int, nonce string) error {
	_, err := dbsqlc.New(db).RunClaimInvocation(ctx, dbsqlc.RunClaimInvocationParams{
		RunID: runID, Invocation: int32(invocation), Nonce: nonce,
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ErrSuperseded
	case err != nil:
		return fmt.Errorf("claim invocation %d of run %s: %w", invocation, runID, err)
	}
	return nil
}

// SeqRangeError: a rerun's from_seq is outside 1 to Max: the run's last seq + 1, or the
// seq of its first sleep not over yet (Sleeping), which a copy could not replay as done.
type SeqRangeError struct {
	RunID    string
	Max      int
	Sleeping bool
}

func (e *SeqRangeError) Error() string {
	if e.Sleeping {
		return fmt.Sprintf("from_seq must be between 1 and %d (run %s's sleep at seq %d is not over)", e.Max, e.RunID, e.Max)
	}
	return fmt.Sprintf("from_seq must be between 1 and %d (run %s's last seq + 1)", e.Max, e.RunID)
}

// CopyEntries copies the entries of the tenant's run from with seq < before into the
// journal of the run to (just created, with an empty journal), each marked as copied
// from from, and returns how many it copied. The copies keep their kind, name, outcome,
// attempt, times and journal bytes, so a replay of to takes the path from took up to
// before. Only finished entries are copied: a sleep whose wake time has not come (a
// cancelled run's) caps before at its seq. It returns a *SeqRangeError when before is not
// between 1 and from's last seq + 1 (or that sleep's seq), and ErrNotFound when from is
// not the tenant's run. Callers own the transaction
// that created to.
//
// A callback is copied as a fresh callback of to, made with fresh (see FreshCallbacks):
// from's token is neither in to's journal nor resolves to's callback. When the
// callback's await is copied too (journaled before before), the copy keeps the
// callback's outcome (resolved or rejected as it was, by whom, or expired), its times
// and the expiry its entry shows, so the replay takes the same path; otherwise it is
// pending, made now, and expires after the callback's timeout (its entry's expires_at
// less its started_at), as if the rerun had made it. Its entry counts the journal bytes
// of the one it copies.
func CopyEntries(ctx context.Context, db DB, tenant, from, to string, before int, fresh FreshCallbacks) (int, error) {
	if err := CheckCopyEntries(ctx, db, tenant, from, before); err != nil {
		return 0, err
	}
	q := dbsqlc.New(db)
	n, err := q.RunCopyEntries(ctx, dbsqlc.RunCopyEntriesParams{ToRun: to, Tenant: tenant, FromRun: from, Before: int32(before)})
	if err != nil {
		return 0, fmt.Errorf("copy entries of run %s before %d: %w", from, before, err)
	}
	cbs, err := copyCallbacks(ctx, q, tenant, from, to, before, fresh)
	if err != nil {
		return 0, err
	}
	return int(n) + cbs, nil
}

// CheckCopyEntries returns the error CopyEntries would return for the bounds of its
// copy, writing nothing: a *SeqRangeError when before is out of the bounds of from's
// journal, ErrNotFound when from is not the tenant's run.
func CheckCopyEntries(ctx context.Context, db DB, tenant, from string, before int) error {
	var last, sleeping *int
	// Scanned by hand: sqlc does not type last_seq nor sleeping_seq.
	err := db.QueryRow(ctx, dbsqlc.RunCopyBounds, dbsqlc.RunCopyBoundsParams{ID: from, Tenant: tenant}.Args()...).Scan(&last, &sleeping)
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("find last seq of run %s: %w", from, err)
	}
	limit := 1
	if last != nil {
		limit = *last + 1
	}
	if sleeping != nil && *sleeping < limit {
		// A cancelled run's last sleep may not be over: it is journaled when the run
		// suspends, and a replay takes a journaled sleep as done.
		if before < 1 || before > *sleeping {
			return &SeqRangeError{RunID: from, Max: *sleeping, Sleeping: true}
		}
	}
	if before < 1 || before > limit {
		return &SeqRangeError{RunID: from, Max: limit}
	}
	return nil
}
