package maintenance_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/invoker/internal/maintenance"
)

// TestMaintainer: the Maintainer waits at least half its interval on its clock, and
// less than one and a half, then calls its passes in order, and again after each wait;
// it stops when its context ends.
func TestMaintainer(t *testing.T) {
	t.Parallel()
	var (
		mu    sync.Mutex
		calls []string
	)
	pass := func(name string) func(context.Context) {
		return func(context.Context) {
			mu.Lock()
			defer mu.Unlock()
			calls = append(calls, name)
		}
	}
	called := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(calls)
	}
	const every = time.Second
	clk := clock.NewTest(time.Now())
	m := maintenance.NewMaintainer(every, clk, pass("reap"), pass("sweep"), pass("tick"))
	ctx, cancel := context.WithCancel(t.Context())
	stopped := make(chan struct{})
	go func() { defer close(stopped); m.Run(ctx) }()

	for round := 1; round <= 3; round++ {
		eventually(t, "the maintainer waits", func() bool { return clk.Timers() == 1 })
		clk.Advance(every/2 - time.Nanosecond)
		require.Equal(t, 1, clk.Timers(), "not before half its interval")
		require.Len(t, called(), 3*(round-1))
		clk.Advance(every)
		eventually(t, "a pass", func() bool { return len(called()) == 3*round })
		require.Equal(t, []string{"reap", "sweep", "tick"}, called()[3*(round-1):], "in order")
	}
	eventually(t, "the maintainer waits", func() bool { return clk.Timers() == 1 })
	cancel()
	<-stopped
	require.Zero(t, clk.Timers())
}
