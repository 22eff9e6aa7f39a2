package maintenance_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/invoker/internal/maintenance"
)

// TestHealth: the database counts as failed at start; only an unavailable database
// (not a statement's error, nor a context that ended) restarts the steady time, which
// its clock measures.
func TestHealth(t *testing.T) {
	t.Parallel()
	clk := clock.NewTest(time.Now())
	h := maintenance.NewHealth(clk)
	require.False(t, h.SteadyFor(time.Nanosecond), "failed at start")
	clk.Advance(time.Second)
	require.True(t, h.SteadyFor(time.Second))
	require.False(t, h.SteadyFor(time.Second+time.Nanosecond))

	h.Observe(nil)
	h.Observe(errors.New("duplicate key"))
	h.Observe(context.Canceled)
	require.True(t, h.SteadyFor(time.Second), "not an outage")

	h.Observe(io.EOF) // a connection that broke
	require.False(t, h.SteadyFor(time.Nanosecond), "an outage restarts it")
	clk.Advance(time.Minute)
	require.True(t, h.SteadyFor(time.Minute))
}

// TestHealthHang: a database that hangs instead of failing counts as out of reach: a
// statement that ran out of its time, a stalled reap, and a pass that took longer than
// its limit (ending without an error once the database answered again) restart the
// steady time; a pass within its limit does not.
func TestHealthHang(t *testing.T) {
	t.Parallel()
	clk := clock.NewTest(time.Now())
	h := maintenance.NewHealth(clk)
	steady := func() {
		clk.Advance(time.Minute)
		require.True(t, h.SteadyFor(time.Minute))
	}
	steady()
	h.Observe(fmt.Errorf("renew: %w", context.DeadlineExceeded))
	require.False(t, h.SteadyFor(time.Nanosecond), "a statement out of time")
	steady()
	h.Observe(fmt.Errorf("%w: rolled back", maintenance.ErrStalled))
	require.False(t, h.SteadyFor(time.Nanosecond), "a stalled reap")
	steady()

	took := time.Second
	pass := h.Timed(3*time.Second, func(context.Context) { clk.Advance(took) })
	pass(t.Context())
	require.True(t, h.SteadyFor(time.Minute), "a pass within its limit")
	took = 8 * time.Second // held up by a database that hung, then answered
	pass(t.Context())
	require.False(t, h.SteadyFor(time.Nanosecond), "a pass past its limit")
}

// TestHealthSteadySince: at start the shorter wait applies, after an outage the longer.
func TestHealthSteadySince(t *testing.T) {
	t.Parallel()
	clk := clock.NewTest(time.Now())
	h := maintenance.NewHealth(clk)
	clk.Advance(2 * time.Second)
	require.True(t, h.SteadySince(2*time.Second, 5*time.Second), "at start: two intervals")
	h.Observe(io.EOF)
	clk.Advance(2 * time.Second)
	require.False(t, h.SteadySince(2*time.Second, 5*time.Second), "after an outage: not two intervals")
	clk.Advance(3 * time.Second)
	require.True(t, h.SteadySince(2*time.Second, 5*time.Second), "after an outage: the longer wait")
}
