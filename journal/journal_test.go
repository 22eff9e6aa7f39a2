package journal_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stepgate/stepgate/journal"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newTenant returns a tenant no other test uses, so tests sharing tables do not meet.
func newTenant() string { return "tenant-" + rand.Text()[:12] }

// newID returns a random run id (UUIDv4, so ids of runs created together sort randomly).
func newID() string { return uuid.NewString() }

// mustRegister registers a revision of tenant's function name with a one-minute timeout.
func mustRegister(tb testing.TB, db journal.DB, tenant, name string) *journal.Function {
	tb.Helper()
	fn, err := journal.RegisterFunction(tb.Context(), db, tenant, name, "http://127.0.0.1:1/"+name, nil, time.Minute, 0)
	if err != nil {
		tb.Fatal(err)
	}
	return fn
}

// claimed makes mustCreateRun create the run already claimed by invocation 1.
// notifying returns o, marked to notify a later terminal update.
func notifying(o journal.Outcome) journal.Outcome {
	o.Notify = true
	return o
}

// withSteps returns o, journaling steps first.
func withSteps(o journal.Outcome, steps ...journal.Entry) journal.Outcome {
	o.Steps = append(o.Steps, steps...)
	return o
}

// terminal returns an outcome that ends a run with status, completed or failed.
func terminal(status journal.Status) journal.Outcome {
	if status == journal.StatusCompleted {
		return journal.Completed(json.RawMessage(`1`))
	}
	return journal.Failed(journal.ErrorInfo{Type: "t", Message: "m"})
}

// outcomeWith returns an outcome that leaves a run with status, journaling nothing:
// queued (a failed invocation retried in an hour), suspended (step 2's retry in an
// hour), completed or failed.
func outcomeWith(status journal.Status) journal.Outcome {
	switch status {
	case journal.StatusQueued:
		return journal.RetryingInvocation(journal.ErrorInfo{Type: "t", Message: "m"}, time.Hour)
	case journal.StatusSuspended:
		return journal.RetryingStep(journal.StepRetry{
			Failure: journal.Failure{Seq: 2, Attempt: 1, Name: "b", Error: journal.ErrorInfo{Type: "t", Message: "m"}}, After: time.Hour})
	}
	return terminal(status)
}

func claimed(n *journal.NewRun) { n.Claim, n.Lease = true, time.Minute }

// mustCreateRun registers a function "fn" of a new tenant and creates a run of it, queued
// unless an option says otherwise.
func mustCreateRun(tb testing.TB, db journal.DB, opts ...func(*journal.NewRun)) *journal.Run {
	tb.Helper()
	tenant := newTenant()
	mustRegister(tb, db, tenant, "fn")
	return mustCreateRunOf(tb, db, tenant, "fn", opts...)
}

// mustCreateRunOf creates a run of a registered function.
func mustCreateRunOf(tb testing.TB, db journal.DB, tenant, function string, opts ...func(*journal.NewRun)) *journal.Run {
	tb.Helper()
	n := journal.NewRun{
		ID: newID(), Tenant: tenant, Function: function, Input: json.RawMessage(`{}`),
		Identity: journal.Identity{Subject: "tester", Tenant: tenant, Roles: []string{"admin"}},
	}
	for _, o := range opts {
		o(&n)
	}
	run, created, err := journal.CreateRun(tb.Context(), db, n)
	if err != nil {
		tb.Fatal(err)
	}
	if !created {
		tb.Fatalf("run %s was not created", n.ID)
	}
	return run
}

// mustGetRun re-reads a run.
func mustGetRun(tb testing.TB, db journal.DB, run *journal.Run) *journal.Run {
	tb.Helper()
	got, err := journal.GetRun(tb.Context(), db, run.Tenant, run.ID)
	if err != nil {
		tb.Fatal(err)
	}
	return got
}

// mustEntries loads a run's journal.
func mustEntries(tb testing.TB, db journal.DB, runID string) []journal.Entry {
	tb.Helper()
	rows, _ := db.Query(tb.Context(), `
		SELECT seq, kind, name, output, error, attempt, wake_at, started_at, finished_at, copied_from IS NOT NULL AS copied
		FROM stepgate.journal_entry WHERE run_id = $1 ORDER BY seq`, runID)
	es, err := pgx.CollectRows(rows, pgx.RowToStructByName[journal.Entry])
	if err != nil {
		tb.Fatal(err)
	}
	return es
}

// mustFailures loads a run's failed attempts.
func mustFailures(tb testing.TB, db journal.DB, runID string) []journal.Failure {
	tb.Helper()
	rows, _ := db.Query(tb.Context(), `
		SELECT seq, attempt, name, error, created_at FROM stepgate.attempt_failure
		WHERE run_id = $1 ORDER BY created_at, seq, attempt`, runID)
	fs, err := pgx.CollectRows(rows, pgx.RowToStructByName[journal.Failure])
	if err != nil {
		tb.Fatal(err)
	}
	return fs
}

// dbNow returns the database clock; in a transaction, its start, which every now() in
// it returns.
func dbNow(t *testing.T, db journal.DB) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, db.QueryRow(t.Context(), `SELECT now()`).Scan(&now))
	return now
}

// mustExec runs a statement that must succeed.
func mustExec(t *testing.T, db journal.DB, sql string, args ...any) {
	t.Helper()
	_, err := db.Exec(t.Context(), sql, args...)
	require.NoError(t, err)
}

// refused runs sql in a savepoint of tx, which it rolls back, and returns the Postgres
// error it must fail with, so that tx stays usable after the expected failure.
func refused(t *testing.T, tx pgx.Tx, sql string, args ...any) *pgconn.PgError {
	t.Helper()
	ctx := t.Context()
	sp, err := tx.Begin(ctx)
	require.NoError(t, err)
	defer func() { require.NoError(t, sp.Rollback(context.WithoutCancel(ctx))) }()
	_, err = sp.Exec(ctx, sql, args...)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "want a Postgres error, got %v", err)
	return pgErr
}

// inSavepoint runs fn in a savepoint of tx and rolls it back when fn fails, for calls
// whose expected error leaves the transaction aborted.
func inSavepoint(t *testing.T, tx pgx.Tx, fn func(sp pgx.Tx) error) error {
	t.Helper()
	sp, err := tx.Begin(t.Context())
	require.NoError(t, err)
	if err := fn(sp); err != nil {
		require.NoError(t, sp.Rollback(context.WithoutCancel(t.Context())))
		return err
	}
	require.NoError(t, sp.Commit(t.Context()))
	return nil
}

func step(seq int, name, output string) journal.Entry {
	e := journal.Entry{Seq: seq, Kind: journal.KindStep, Name: name}
	if output != "" {
		e.Output = json.RawMessage(output)
	}
	return e
}
