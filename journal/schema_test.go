package journal_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
)

// TestDatabaseEnforces checks that the guarantees hold for any writer, not only for this
// package's SQL: the schema refuses what the Go code never writes.
func TestDatabaseEnforces(t *testing.T) {
	t.Parallel()
	const (
		checkViolation  = "23514"
		uniqueViolation = "23505"
		fkViolation     = "23503"
	)

	t.Run("JournalEntriesAreImmutable", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, step(1, "charge", `1`), journal.Bounds{}))

		for _, sql := range []string{
			`UPDATE stepgate.journal_entry SET output = '2' WHERE run_id = $1`,
			`UPDATE stepgate.journal_entry SET name = name WHERE run_id = $1`,
		} {
			err := refused(t, tx, sql, run.ID)
			require.Equal(t, checkViolation, err.Code, sql)
			require.Contains(t, err.Message, "immutable")
		}
		err := refused(t, tx, `INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, invocation) VALUES ($2, $1, 1, 'step', 'refund', 1)`, run.ID, run.Tenant)
		require.Equal(t, uniqueViolation, err.Code, "(tenant, run_id, seq) is unique")
		err = refused(t, tx, `INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, invocation) VALUES ($2, $1, 0, 'step', 'a', 1)`, run.ID, run.Tenant)
		require.Equal(t, checkViolation, err.Code, "seq counts from 1")
		err = refused(t, tx, `INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, invocation) VALUES ($2, $1, 1, 'step', 'a', 1)`, newID(), run.Tenant)
		require.Equal(t, fkViolation, err.Code, "an entry of no run")
		err = refused(t, tx, `INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, invocation) VALUES ($2, $1, 2, 'step', 'a', 1)`, run.ID, run.Tenant+"-other")
		require.Equal(t, fkViolation, err.Code, "an entry of the run under another tenant")

		es := mustEntries(t, tx, run.ID)
		require.Len(t, es, 1)
		require.JSONEq(t, `1`, string(es[0].Output))
	})

	t.Run("TerminalRunsAreFinal", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		for _, status := range []journal.Status{journal.StatusCompleted, journal.StatusFailed} {
			run := mustCreateRun(t, tx, claimed)
			_, err := journal.Finish(ctx, tx, run.ID, 1, terminal(status))
			require.NoError(t, err)
			for _, sql := range []string{
				`UPDATE stepgate.run SET status = 'queued', finished_at = NULL WHERE id = $1`,
				`UPDATE stepgate.run SET output = '2' WHERE id = $1`,
				`UPDATE stepgate.run SET notify = true WHERE id = $1`,
			} {
				pgErr := refused(t, tx, sql, run.ID)
				require.Equal(t, checkViolation, pgErr.Code, sql)
				require.Contains(t, pgErr.Message, "terminal runs are immutable")
			}
		}
		// A run that is not terminal may change.
		run := mustCreateRun(t, tx)
		mustExec(t, tx, `UPDATE stepgate.run SET wake_at = now() WHERE id = $1`, run.ID)
	})

	t.Run("IdempotencyKeysAreUnique", func(t *testing.T) {
		t.Parallel()
		tx := pgtest.Tx(t)
		run := mustCreateRun(t, tx, func(n *journal.NewRun) { n.IdempotencyKey = "k" })
		insert := `INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity, idempotency_key)
			VALUES ($1, $2, 'fn', 1, 'queued', '{}', '{}', $3)`
		err := refused(t, tx, insert, newID(), run.Tenant, "k")
		require.Equal(t, uniqueViolation, err.Code)
		require.Equal(t, "run_idempotency_key", err.ConstraintName)
		mustExec(t, tx, insert, newID(), run.Tenant, "k2")
		mustExec(t, tx, insert, newID(), run.Tenant, nil)
		mustExec(t, tx, insert, newID(), run.Tenant, nil) // no key, no limit
	})

	t.Run("ChecksRefuseBadRows", func(t *testing.T) {
		t.Parallel()
		tx := pgtest.Tx(t)
		run := mustCreateRun(t, tx)
		insert := `INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity, lease_until, finished_at)
			VALUES ($1, $2, 'fn', 1, $3, '{}', '{}', $4, $5)`
		now := time.Now()
		for _, tc := range []struct {
			name, status      string
			lease, finishedAt *time.Time
		}{
			{"RunningWithoutLease", "running", nil, nil},
			{"QueuedWithLease", "queued", &now, nil},
			{"CompletedNotFinished", "completed", nil, nil},
			{"SuspendedButFinished", "suspended", nil, &now},
			{"NoSuchStatus", "paused", nil, nil},
		} {
			err := refused(t, tx, insert, newID(), run.Tenant, tc.status, tc.lease, tc.finishedAt)
			require.Equal(t, checkViolation, err.Code, tc.name)
		}
		// The same checks hold for updates.
		err := refused(t, tx, `UPDATE stepgate.run SET status = 'running' WHERE id = $1`, run.ID)
		require.Equal(t, checkViolation, err.Code)
		err = refused(t, tx, `INSERT INTO stepgate.attempt_failure (tenant, run_id, seq, attempt, error) VALUES ($2, $1, -1, 1, '{}')`, run.ID, run.Tenant)
		require.Equal(t, checkViolation, err.Code)
		err = refused(t, tx, `INSERT INTO stepgate.function_revision (tenant, name, revision, url, timeout_ms) VALUES ($1, 'fn', 2, 'http://f/', 0)`, run.Tenant)
		require.Equal(t, checkViolation, err.Code, "a timeout is positive")
		mustExec(t, tx, insert, newID(), run.Tenant, "running", now, nil)
		mustExec(t, tx, insert, newID(), run.Tenant, "completed", nil, now)
	})
}
