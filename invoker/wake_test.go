package invoker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/bench/ledger"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/journal"
)

// TestLongWaitsHoldNoTimer: a run that suspends until a time beyond the maintenance
// passes' lead has no timer in memory, and a pass arms one when the time nears, so it
// wakes on time without River's scheduler (whose job is due an hour later here).
func TestLongWaitsHoldNoTimer(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{MaintainInterval: 100 * time.Millisecond})
	app := s.NewApp()
	functions.Register(app, "nap", func(ctx context.Context, _ struct{}) (string, error) {
		if err := step.Sleep(ctx, "nap", time.Hour); err != nil {
			return "", err
		}
		return "awake", nil
	})
	s.Sync(t, s.ServeApp(t, app))
	db := journal.ForTenant(s.APIPool, auth.DefaultTenant)
	run, _, err := s.Invoker.StartRun(t.Context(), db, journal.NewRun{
		ID: uuid.Must(uuid.NewV7()).String(), Tenant: auth.DefaultTenant, Function: "nap", Input: []byte(`{}`),
		Identity: access.Identity{Subject: "ada", Tenant: auth.DefaultTenant, Roles: []string{"developer"}},
	})
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		got, err := journal.GetRun(context.Background(), db, auth.DefaultTenant, run.ID)
		if assert.NoError(ct, err) {
			assert.Equal(ct, journal.StatusSuspended, got.Status)
		}
	}, 30*time.Second, 5*time.Millisecond)
	require.False(t, s.Invoker.TimerArmed(run.ID), "an hour's sleep holds no timer")

	// As if the hour had nearly passed: due in a second, beyond the passes' lead (200ms).
	_, err = s.Pool.Exec(t.Context(), `UPDATE stepgate.run SET wake_at = now() + interval '1 second' WHERE id = $1`, run.ID)
	require.NoError(t, err)
	got, err := s.Invoker.AwaitRun(t.Context(), db, run.ID, nil, time.Now().Add(30*time.Second))
	require.NoError(t, err)
	require.Equal(t, journal.StatusCompleted, got.Status, "a pass armed its timer")
	require.JSONEq(t, `"awake"`, string(got.Output))
}

// TestSleepIsClaimedAheadOfItsEnd: a run that only sleeps is claimed before its wake
// time (so the claim's commit is not in the sleep's lateness), yet its function is not
// invoked before the database clock has passed that time.
func TestSleepIsClaimedAheadOfItsEnd(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	var mu sync.Mutex
	var claims []*journal.Claim
	s.Invoker.OnEarlyClaim(func(c *journal.Claim) {
		mu.Lock()
		defer mu.Unlock()
		claims = append(claims, c)
	})
	app := s.NewApp()
	functions.Register(app, "nap", func(ctx context.Context, _ struct{}) (time.Time, error) {
		if err := step.Sleep(ctx, "nap", 300*time.Millisecond); err != nil {
			return time.Time{}, err
		}
		// The database clock when the code after the sleep runs (not a step: replays
		// would read it again, and only the last invocation's answer is the output).
		return journal.ClockNow(ctx, s.Pool)
	})
	s.Sync(t, s.ServeApp(t, app))
	db := journal.ForTenant(s.APIPool, auth.DefaultTenant)
	run, _, err := s.Invoker.StartRun(t.Context(), db, journal.NewRun{
		ID: uuid.Must(uuid.NewV7()).String(), Tenant: auth.DefaultTenant, Function: "nap", Input: []byte(`{}`),
		Identity: access.Identity{Subject: "ada", Tenant: auth.DefaultTenant, Roles: []string{"developer"}},
	})
	require.NoError(t, err)
	got, err := s.Invoker.AwaitRun(t.Context(), db, run.ID, nil, time.Now().Add(30*time.Second))
	require.NoError(t, err)
	require.Equal(t, journal.StatusCompleted, got.Status)
	var after time.Time
	require.NoError(t, json.Unmarshal(got.Output, &after))

	whole, err := journal.GetWholeRun(t.Context(), db, auth.DefaultTenant, run.ID)
	require.NoError(t, err)
	require.Equal(t, "sleep", whole.Journal[0].Kind)
	until := *whole.Journal[0].WakeAt
	require.False(t, after.Before(until), "the code after the sleep ran at %s, before its end %s (database clock)", after, until)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, claims, 1, "the wake was claimed ahead")
	require.Equal(t, run.ID, claims[0].Run.ID)
	require.Equal(t, 2, claims[0].Run.Invocation)
	require.True(t, claims[0].NotBefore.Equal(until), "its invocation waited for the sleep's end: %s, not %s", claims[0].NotBefore, until)
}

// TestAWakeThatLosesLooksNoMore: a run made due by a committed transaction (a new child,
// a parent whose child has ended) is woken by this gateway at once and by its River job;
// whichever claims it first, the other finds nothing to claim, once, and does not look
// again (a wake that lost used to look three times more, as if the database clock lagged).
func TestAWakeThatLosesLooksNoMore(t *testing.T) {
	t.Parallel()
	tracer := ledger.NewTracer(1 << 12)
	s := stack.Start(t, stack.Options{Database: func(c *pgxpool.Config) { c.ConnConfig.Tracer = tracer }})
	app := s.NewApp()
	functions.Register(app, "leaf", func(ctx context.Context, n int) (int, error) { return n, nil })
	const children = 8
	functions.Register(app, "tree", func(ctx context.Context, _ struct{}) (int, error) {
		sum := 0
		for i := range children {
			n, err := step.Invoke[int](ctx, fmt.Sprintf("leaf %d", i), "leaf", i).Get()
			if err != nil {
				return 0, err
			}
			sum += n
		}
		return sum, nil
	})
	s.Sync(t, s.ServeApp(t, app))
	db := journal.ForTenant(s.APIPool, auth.DefaultTenant)
	run, _, err := s.Invoker.StartRun(t.Context(), db, journal.NewRun{
		ID: uuid.Must(uuid.NewV7()).String(), Tenant: auth.DefaultTenant, Function: "tree", Input: []byte(`{}`),
		Identity: access.Identity{Subject: "ada", Tenant: auth.DefaultTenant, Roles: []string{"developer"}},
	})
	require.NoError(t, err)
	got, err := s.Invoker.AwaitRun(t.Context(), db, run.ID, nil, time.Now().Add(30*time.Second))
	require.NoError(t, err)
	require.Equal(t, journal.StatusCompleted, got.Status)
	require.Eventually(t, func() bool {
		var due bool
		err := s.Pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT FROM public.river_job WHERE state IN ('available', 'running'))`).Scan(&due)
		return err == nil && !due && s.Invoker.Status().InFlight == 0 && tracer.Open() == 0
	}, 30*time.Second, 5*time.Millisecond, "River's jobs are done")

	won, lost := 0, 0
	for _, st := range tracer.Statements() {
		if st.Name == "ClaimRun" {
			if st.Rows > 0 {
				won++
			} else {
				lost++
			}
		}
	}
	// Each child is woken twice at its start, and the parent twice at each child's end.
	require.Equal(t, 1+2*children, won, "claims: the run's start, one per child's end, and each child's start")
	require.Equal(t, 2*children, lost, "one claim that found nothing per wake that lost")
}
