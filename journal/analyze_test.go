package journal_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
)

// TestAnalyzeGrown shows the hazard AnalyzeGrown removes, the finish's generic plan
// scanning the whole run table because it was made while the table was tiny, and checks
// that once the table has grown the call analyzes it, after which the plan uses the
// unique index on the run id (run_id_lookup), and that it leaves a table that has not
// grown alone.
func TestAnalyzeGrown(t *testing.T) {
	t.Parallel()
	ctx, db := t.Context(), pgtest.DB(t)
	run := mustCreateRun(t, db)
	mustExec(t, db, `ALTER TABLE stepgate.run SET (autovacuum_enabled = false)`) // this database's: no ANALYZE but ours
	mustExec(t, db, `ANALYZE stepgate.run`)
	require.Contains(t, finishPlan(t, db, run.ID), "Seq Scan on run ", "a generic plan made for a tiny table")

	conn, err := db.Acquire(ctx)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `INSERT INTO stepgate.run
		SELECT (jsonb_populate_record(NULL::stepgate.run, to_jsonb(r) || jsonb_build_object('id', gen_random_uuid()))).*
		FROM stepgate.run r, generate_series(1, 3000) WHERE r.id = $1`, run.ID)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`) // the insert's counts, to the statistics now
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `SELECT 1`)
	require.NoError(t, err)
	conn.Release()

	require.EventuallyWithT(t, func(c *assert.CollectT) {
		grown, err := journal.AnalyzeGrown(context.WithoutCancel(ctx), db)
		if assert.NoError(c, err) {
			assert.Equal(c, []string{"run"}, grown)
		}
	}, 30*time.Second, 50*time.Millisecond)
	var tuples float64
	require.NoError(t, db.QueryRow(ctx, `SELECT reltuples FROM pg_class WHERE oid = 'stepgate.run'::regclass`).Scan(&tuples))
	require.GreaterOrEqual(t, tuples, 3001.0)
	require.Contains(t, finishPlan(t, db, run.ID), "Index Scan using run_id_lookup on run ", "the plan made after the ANALYZE")

	grown, err := journal.AnalyzeGrown(ctx, db)
	require.NoError(t, err)
	require.Empty(t, grown, "analyzed already")
}

// finishPlan returns the generic plan of Finish's statement (an answered completion of
// run id, which counts its journal's entries), as a connection of db would cache it.
func finishPlan(t *testing.T, db *pgxpool.Pool, id string) string {
	t.Helper()
	ctx := t.Context()
	// RunFinish's parameters, in order: each one's type and value.
	params := []struct{ typ, value string }{
		{"int", "0"},             // await_seq
		{"int", "1"},             // window_size
		{"text", "'completed'"},  // status
		{"jsonb", "'1'"},         // output
		{"jsonb", "NULL"},        // error
		{"bool", "true"},         // timed
		{"timestamptz", "NULL"},  // until
		{"float8", "0"},          // after_seconds
		{"uuid", "'" + id + "'"}, // run_id
		{"jsonb", "NULL"},        // awaiting
		{"bool", "false"},        // failed_call
		{"bool", "false"},        // uncalled
		{"bool", "false"},        // notify
		{"int", "1"},             // invocation
		{"bool", "true"},         // whole
		{"int", "NULL"},          // step
	}
	sql := journal.FinishSQL
	var ts, vs []string
	for _, p := range params {
		ts, vs = append(ts, p.typ), append(vs, p.value)
	}
	conn, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	for _, q := range []string{`SET plan_cache_mode = force_generic_plan`,
		`PREPARE finish(` + strings.Join(ts, ", ") + `) AS ` + sql} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err)
	}
	rows, _ := conn.Query(ctx, `EXPLAIN EXECUTE finish(`+strings.Join(vs, ", ")+`)`)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, q := range []string{`DEALLOCATE finish`, `RESET plan_cache_mode`} {
		_, err := conn.Exec(ctx, q)
		require.NoError(t, err)
	}
	return strings.Join(lines, "\n")
}
