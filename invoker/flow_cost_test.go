package invoker_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/journal"
)

// TestStartCosts counts the round trips of starts: a function without flow control
// costs what it cost before flow control existed; a throttled one, three more.
func TestStartCosts(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	app := s.NewApp()
	functions.Register(app, "plain", func(ctx context.Context, _ struct{}) (int, error) { return 1, nil })
	functions.Register(app, "throttled", func(ctx context.Context, _ struct{}) (int, error) { return 1, nil },
		functions.Throttle(functions.Rate{Limit: 1000, Period: time.Hour, Burst: 10})) // admits both starts now
	s.Sync(t, s.ServeApp(t, app))

	var trips pgtest.RoundTrips
	cfg := s.APIPool.Config().Copy()
	cfg.ConnConfig.Tracer = &trips
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	tenant := auth.DefaultTenant
	db := journal.ForTenant(pool, tenant)
	who := access.Identity{Subject: "ada", Tenant: tenant, Roles: []string{"admin"}}
	cost := func(f func(n journal.NewRun) error, function string) int32 {
		require.NoError(t, pool.Ping(t.Context())) // connect first
		trips.Reset()
		require.NoError(t, f(journal.NewRun{ID: uuid.Must(uuid.NewV7()).String(), Tenant: tenant, Function: function,
			Input: json.RawMessage(`{}`), Identity: who}))
		return trips.Count()
	}
	start := func(n journal.NewRun) error {
		_, _, err := s.Invoker.StartRun(t.Context(), db, n)
		return err
	}
	var wg sync.WaitGroup
	startNow := func(n journal.NewRun) error {
		wg.Add(1)
		_, _, _, err := s.Invoker.StartRunNow(t.Context(), db, n, wg.Done)
		return err
	}
	plain, throttled := cost(start, "plain"), cost(start, "throttled")
	plainNow, throttledNow := cost(startNow, "plain"), cost(startNow, "throttled")
	wg.Wait()
	t.Logf("round trips: StartRun plain %d, throttled %d; StartRunNow plain %d, throttled %d", plain, throttled, plainNow, throttledNow)
	require.EqualValues(t, 1, plainNow, "the hot path is one statement")
	require.Equal(t, plain+3, throttled, "a throttle adds the refused insert, its lookup and the throttle's upsert")
	// Outside a transaction, the throttled start opens one: BEGIN, the upsert, the
	// insert, COMMIT after the refused insert and its lookup.
	require.Equal(t, plainNow+5, throttledNow)
}
