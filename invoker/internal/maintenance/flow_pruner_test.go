package maintenance_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/invoker/internal/maintenance"
)

// TestFlowPruner: the first pass prunes flow control's stale rows (not the live ones);
// a later pass prunes again only once FlowPruneEvery has passed on its clock since.
func TestFlowPruner(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	rate := func(key, ago string) {
		exec(t, db, `INSERT INTO stepgate.flow_rate (tenant, function, kind, key, tat)
			VALUES ('t1', 'work', 'rate_limit', $1, now() - $2::interval)`, key, ago)
	}
	rate("stale", "2 minutes")
	rate("live", "0 seconds")

	clk := clock.NewTest(time.Now())
	p := maintenance.NewFlowPruner(db, (&logs{}).logger(), clk)
	p.Pass(t.Context())
	require.Equal(t, []string{"live"}, rateKeys(t, db), "the first pass prunes")

	rate("stale", "2 minutes")
	p.Pass(t.Context())
	clk.Advance(maintenance.FlowPruneEvery)
	p.Pass(t.Context())
	require.Equal(t, []string{"live", "stale"}, rateKeys(t, db), "not again within FlowPruneEvery")
	clk.Advance(time.Nanosecond)
	p.Pass(t.Context())
	require.Equal(t, []string{"live"}, rateKeys(t, db), "once FlowPruneEvery has passed")
}

func rateKeys(t *testing.T, db *pgxpool.Pool) []string {
	t.Helper()
	var keys []string
	require.NoError(t, db.QueryRow(t.Context(), `SELECT coalesce(array_agg(key ORDER BY key), '{}') FROM stepgate.flow_rate`).Scan(&keys))
	return keys
}
