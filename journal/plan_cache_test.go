package journal_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/pgtest"
	"github.com/stepgate/stepgate/journal"
)

// TestSystemPoolPlansOnce: the system pool's connections, which run the hot path's
// statements on the partitioned journal, keep one generic plan per prepared statement;
// the API pool's plan as Postgres chooses.
func TestSystemPoolPlansOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.DBURL(t)
	for system, want := range map[bool]string{true: "force_generic_plan", false: "auto"} {
		cfg, err := pgxpool.ParseConfig(url)
		require.NoError(t, err)
		journal.ConfigurePool(cfg, system)
		pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
		require.NoError(t, err)
		var mode string
		require.NoError(t, pool.QueryRow(t.Context(), `SHOW plan_cache_mode`).Scan(&mode))
		pool.Close()
		require.Equal(t, want, mode, "system pool: %v", system)
	}
}
