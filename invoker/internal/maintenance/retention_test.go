package maintenance_test

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/invoker/internal/maintenance"
	"github.com/stepgate/stepgate/journal"
)

const def = 30 * 24 * time.Hour

// seed registers function work of tenant t1 and stores n runs of it that finished ago
// (by the database's clock), returning their ids.
func seed(t *testing.T, db *pgxpool.Pool, n int, ago time.Duration) []string {
	t.Helper()
	_, err := journal.RegisterFunction(t.Context(), db, "t1", "work", "http://127.0.0.1:1/work", json.RawMessage(`{}`), time.Minute, 0)
	require.NoError(t, err)
	rows, err := db.Query(t.Context(), `
		INSERT INTO stepgate.run (id, tenant, function, revision, status, input, output, identity, created_at, started_at, finished_at)
		SELECT gen_random_uuid(), f.tenant, f.name, f.revision, 'completed', '{}', '1', '{"subject":"seed","tenant":"t1"}',
			now() - $2 * interval '1 second' - interval '1 day', now() - $2 * interval '1 second' - interval '1 day',
			now() - $2 * interval '1 second' + i * interval '1 millisecond'
		FROM stepgate.function f, generate_series(1, $1) i WHERE f.tenant = 't1' AND f.name = 'work'
		RETURNING id::text`, n, ago.Seconds())
	require.NoError(t, err)
	var ids []string
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, n)
	return ids
}

func count(t *testing.T, db *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(t.Context(), sql, args...).Scan(&n))
	return n
}

// TestRetention: the retention service deletes, in batches, finished runs past their
// retention, then old events and tombstones, and logs what it deleted; what is expired
// is the database's to say, whatever its clock says; its clock ends a pass whose time is
// up, leaving the rest to the next.
func TestRetention(t *testing.T) {
	t.Parallel()

	t.Run("DeletesWhatIsPastItInBatches", func(t *testing.T) {
		t.Parallel()
		db := pgtest.DB(t)
		expired := seed(t, db, 5, 40*24*time.Hour)
		_, err := db.Exec(t.Context(), `
			INSERT INTO stepgate.run (id, tenant, function, revision, status, input, output, identity, created_at, started_at, finished_at)
			SELECT gen_random_uuid(), tenant, name, revision, 'completed', '{}', '1', '{"subject":"seed","tenant":"t1"}', now(), now(), now() - interval '10 days'
			FROM stepgate.function, generate_series(1, 2) WHERE tenant = 't1' AND name = 'work'`)
		require.NoError(t, err)
		_, err = db.Exec(t.Context(), `INSERT INTO stepgate.event (tenant, id, name, data, identity, created_at) VALUES
			('t1', 'old', 'e', '{}', '{}', now() - interval '31 days'), ('t1', 'new', 'e', '{}', '{}', now())`)
		require.NoError(t, err)
		_, err = db.Exec(t.Context(), `INSERT INTO stepgate.run_tombstone (tenant, id, function, finished_at, deleted_at)
			VALUES ('t1', gen_random_uuid(), 'work', now() - interval '70 days', now() - interval '31 days')`)
		require.NoError(t, err)

		var logs bytes.Buffer
		// The service's clock is decades ahead: it does not decide what is expired.
		clk := clock.NewTest(time.Now().AddDate(50, 0, 0))
		r := maintenance.NewRetention(db, def, 2, slog.New(slog.NewJSONHandler(&logs, nil)), clk)
		require.NoError(t, r.Work(t.Context(), nil))

		require.Zero(t, count(t, db, `SELECT count(*) FROM stepgate.run WHERE id = ANY($1::uuid[])`, expired), "every expired run, over 3 batches of 2")
		require.Equal(t, 2, count(t, db, `SELECT count(*) FROM stepgate.run`), "runs within their retention stay")
		require.Equal(t, 5, count(t, db, `SELECT count(*) FROM stepgate.run_tombstone WHERE id = ANY($1::uuid[])`, expired), "a tombstone for each")
		require.Equal(t, 5, count(t, db, `SELECT count(*) FROM stepgate.run_tombstone`), "the old tombstone is gone")
		require.Equal(t, 1, count(t, db, `SELECT count(*) FROM stepgate.event WHERE id = 'new'`))
		require.Equal(t, 1, count(t, db, `SELECT count(*) FROM stepgate.event`), "the old event is gone")

		var line struct {
			Msg                      string
			Runs, Events, Tombstones int
			Retention                int64
		}
		require.NoError(t, json.Unmarshal(logs.Bytes(), &line), logs.String())
		require.Equal(t, "retention deleted what is past it", line.Msg)
		require.Equal(t, 5, line.Runs)
		require.Equal(t, 1, line.Events)
		require.Equal(t, 1, line.Tombstones)
		require.Equal(t, int64(def), line.Retention)

		// Nothing left: nothing deleted, nothing logged.
		logs.Reset()
		require.NoError(t, r.Work(t.Context(), nil))
		require.Empty(t, logs.String())
	})

	t.Run("APassEndsWhenItsTimeIsUp", func(t *testing.T) {
		t.Parallel()
		db := pgtest.DB(t)
		seed(t, db, 3, 40*24*time.Hour)
		clk := clock.NewTest(time.Now())
		// Each reading of the clock moves it half a pass on: a pass has time for one
		// batch, then its time is up.
		clk.Step(maintenance.RetentionPass / 2)
		r := maintenance.NewRetention(db, def, 1, slog.New(slog.DiscardHandler), clk)
		for left := 2; left >= 0; left-- {
			require.NoError(t, r.Work(t.Context(), nil))
			require.Equal(t, left, count(t, db, `SELECT count(*) FROM stepgate.run`), "one batch per pass")
		}
	})
}
