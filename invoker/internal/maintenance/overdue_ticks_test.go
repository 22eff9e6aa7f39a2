package maintenance_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/invoker/internal/maintenance"
	"github.com/stepgate/stepgate/journal/schedule"
)

// TestOverdueTicks: each pass hands the ticks more than OverdueLate overdue, at most
// OverdueBatch, to its tick func (here: one that lists them from the database as the
// invoker's does, and fails); a failure is logged at most once a minute by its clock,
// and an unavailable database is observed in its Health.
func TestOverdueTicks(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	var (
		late  time.Duration
		limit int
		fail  error
	)
	tick := func(ctx context.Context, l time.Duration, n int) (int, error) {
		late, limit = l, n
		ticks, err := schedule.OverdueTicks(ctx, db, l, n)
		if err != nil {
			return 0, err
		}
		return len(ticks), fail
	}
	clk := clock.NewTest(time.Now())
	health := maintenance.NewHealth(clk)
	clk.Advance(time.Hour)
	var log logs
	o := maintenance.NewOverdueTicks(tick, health, log.logger(), clk)

	o.Pass(t.Context())
	require.Equal(t, maintenance.OverdueLate, late)
	require.Equal(t, maintenance.OverdueBatch, limit)
	require.Empty(t, log.String(), "nothing failed, nothing logged")

	const msg = "handling overdue schedule ticks failed; the next passes retry"
	fail = errors.New("function gone")
	o.Pass(t.Context())
	o.Pass(t.Context())
	require.Equal(t, 1, strings.Count(log.String(), msg), "once")
	clk.Advance(time.Minute)
	o.Pass(t.Context())
	require.Equal(t, 1, strings.Count(log.String(), msg), "not again within a minute")
	clk.Advance(time.Nanosecond)
	o.Pass(t.Context())
	require.Equal(t, 2, strings.Count(log.String(), msg), "again past a minute")
	require.True(t, health.SteadyFor(time.Hour), "a tick's failure is not an outage")

	fail = io.EOF
	o.Pass(t.Context())
	require.False(t, health.SteadyFor(time.Nanosecond), "an outage is observed")
}
