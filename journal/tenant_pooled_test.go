package journal_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
)

// TestActAsAppPerTransaction: behind a transaction pooler the pool's session acts as
// journal.SystemRole (the pooler's connect_query, here an AfterConnect) and is never
// switched by the gateway; a pool marked with ActAsAppPerTransaction makes each
// ForTenant statement and transaction act as journal.AppRole, seeing its tenant's rows
// only, and the session is journal.SystemRole again after each (a second tenant's rows
// visible), so that no role or tenant outlives its transaction on a shared server
// connection.
func TestActAsAppPerTransaction(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(pgtest.DBURL(t))
	require.NoError(t, err)
	cfg.MaxConns = 1 // every use gets the connection the previous one used
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SET ROLE `+journal.SystemRole)
		return err
	}
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	a := mustFillTenant(t, pool, newTenant())
	b := mustFillTenant(t, pool, newTenant())

	session := func(t *testing.T, after string) {
		t.Helper()
		var user string
		var setting *string
		var runs int
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT current_user::text, nullif(current_setting('stepgate.tenant', true), ''),
			(SELECT count(*) FROM stepgate.run WHERE tenant = ANY($1))`, []string{a.tenant, b.tenant}).Scan(&user, &setting, &runs))
		require.Equal(t, journal.SystemRole, user, "the session's role after %s", after)
		require.Nil(t, setting, "the tenant outlived %s", after)
		require.Equal(t, 2, runs, "the session sees every tenant after %s", after)
	}
	session(t, "nothing")

	// Unmarked, ForTenant would act as the session's role and see both tenants: the mark
	// is what fences the API's statements.
	var user string
	var runs int
	require.NoError(t, journal.ForTenant(pool, a.tenant).QueryRow(t.Context(), `SELECT current_user::text, (SELECT count(*) FROM stepgate.run)`).Scan(&user, &runs))
	require.Equal(t, journal.SystemRole, user)

	journal.ActAsAppPerTransaction(pool)
	db := journal.ForTenant(pool, a.tenant)
	require.NoError(t, db.QueryRow(t.Context(), `SELECT current_user::text, (SELECT count(*) FROM stepgate.run)`).Scan(&user, &runs))
	require.Equal(t, journal.AppRole, user)
	require.Equal(t, 1, runs, "tenant %s sees its own run only", a.tenant)
	session(t, "QueryRow")

	run, err := journal.GetRun(t.Context(), db, a.tenant, b.run.ID)
	require.Error(t, err, "tenant %s does not see %s's run %v", a.tenant, b.tenant, run)
	session(t, "a read of another tenant's run")

	tag, err := db.Exec(t.Context(), `UPDATE stepgate.run SET notify = notify WHERE true`)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
	session(t, "Exec")

	for _, commit := range []bool{true, false} {
		tx, err := db.Begin(t.Context())
		require.NoError(t, err)
		require.NoError(t, tx.QueryRow(t.Context(), `SELECT current_user::text, (SELECT count(*) FROM stepgate.run)`).Scan(&user, &runs))
		require.Equal(t, journal.AppRole, user)
		require.Equal(t, 1, runs)
		require.NoError(t, tx.QueryRow(t.Context(), `SELECT current_user::text`).Scan(&user), "the role holds for the whole transaction")
		require.Equal(t, journal.AppRole, user)
		if commit {
			require.NoError(t, tx.Commit(t.Context()))
		} else {
			require.NoError(t, tx.Rollback(t.Context()))
		}
		session(t, "a transaction")
	}
}
