package maintenance_test

import (
	"context"
	"errors"
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
