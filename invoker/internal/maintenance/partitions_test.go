package maintenance_test

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/pgtest"
	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/invoker/internal/maintenance"
	"github.com/stepgate/stepgate/journal"
)

// TestPartitions: the first pass makes the journal's partitions of its clock's month and
// the two after it, and moves there the rows of those months that DEFAULT held; a pass
// within PartitionsEvery of it makes nothing, and the first after makes the new month's.
func TestPartitions(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	// Far from today, so that no other partition is of these months.
	clk := clock.NewTest(time.Date(2031, 5, 20, 12, 0, 0, 0, time.UTC))
	run := newRun(t, db, func(n *journal.NewRun) { n.ID = runIDAt(clk.Now()) })
	exec(t, db, `INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, output, invocation, journal_bytes)
		VALUES ('t1', $1, 1, 'step', 's', '1', 1, 1)`, run.ID)
	require.Equal(t, "stepgate.journal_entry_default", partitionOf(t, db, run.ID), "no partition yet")

	p := maintenance.NewPartitions(db, (&logs{}).logger(), clk)
	p.Pass(t.Context())
	months := []string{"203105", "203106", "203107"}
	require.Equal(t, months, partitionMonths(t, db), "this month and the two after")
	require.Equal(t, "stepgate.journal_entry_p203105", partitionOf(t, db, run.ID), "the month's rows moved out of DEFAULT")

	clk.Advance(maintenance.PartitionsEvery)
	exec(t, db, `DROP TABLE stepgate.journal_entry_p203107, stepgate.attempt_failure_p203107`)
	p.Pass(t.Context())
	require.Equal(t, months[:2], partitionMonths(t, db), "not again within PartitionsEvery")
	clk.Advance(time.Nanosecond)
	p.Pass(t.Context())
	require.Equal(t, months, partitionMonths(t, db), "again once PartitionsEvery has passed")
	clk.Advance(31 * 24 * time.Hour)
	p.Pass(t.Context())
	require.Equal(t, append(months, "203108"), partitionMonths(t, db), "a month on, the next month's")

	// While a transaction writes the journal, the lock is not free: it fails at once
	// and tries again PartitionsRetry later.
	clk.Advance(31 * 24 * time.Hour)
	tx, err := db.Begin(t.Context())
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), `LOCK TABLE stepgate.journal_entry IN ROW EXCLUSIVE MODE`)
	require.NoError(t, err)
	p.Pass(t.Context())
	require.NoError(t, tx.Rollback(t.Context()))
	require.Equal(t, append(months, "203108"), partitionMonths(t, db), "the lock was taken")
	clk.Advance(maintenance.PartitionsRetry)
	p.Pass(t.Context())
	require.Equal(t, append(months, "203108"), partitionMonths(t, db), "not again within PartitionsRetry")
	clk.Advance(time.Nanosecond)
	p.Pass(t.Context())
	require.Equal(t, append(months, "203108", "203109"), partitionMonths(t, db), "again after PartitionsRetry")
}

// runIDAt returns a UUIDv7 of the instant at, as the gateway would have made it then.
func runIDAt(at time.Time) string {
	u := uuid.Must(uuid.NewV7())
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(at.UnixMilli()))
	copy(u[:6], ms[2:])
	return u.String()
}

// partitionMonths returns the months of the partitions of journal_entry, which are
// attempt_failure's too (it fails otherwise).
func partitionMonths(t *testing.T, db *pgxpool.Pool) []string {
	t.Helper()
	months := func(table string) []string {
		rows, _ := db.Query(t.Context(), `SELECT substring(c.relname FROM '_p([0-9]{6})$') FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE i.inhparent = $1::regclass AND c.relname ~ '_p[0-9]{6}$' ORDER BY 1`, table)
		ms, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return ms
	}
	entries := months("stepgate.journal_entry")
	require.Equal(t, entries, months("stepgate.attempt_failure"))
	return entries
}

// partitionOf returns the partition that holds run's journal entries.
func partitionOf(t *testing.T, db *pgxpool.Pool, run string) string {
	t.Helper()
	var p string
	require.NoError(t, db.QueryRow(t.Context(), `SELECT DISTINCT tableoid::regclass::text FROM stepgate.journal_entry WHERE run_id = $1`, run).Scan(&p))
	return p
}
