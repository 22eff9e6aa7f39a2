package clock_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/invoker/internal/clock"
)

func TestTest(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c := clock.NewTest(t0)
	require.Equal(t, t0, c.Now())
	require.Equal(t, t0, c.Now(), "still, until moved")
	c.Advance(time.Hour)
	require.Equal(t, t0.Add(time.Hour), c.Now())
	c.Step(time.Minute)
	require.Equal(t, t0.Add(time.Hour), c.Now(), "read, then moved on")
	require.Equal(t, t0.Add(time.Hour+time.Minute), c.Now())
}

// TestTestTimers: a test clock's timers fire when Advance reaches their time, not
// before, once; a stopped one never; one armed with d <= 0 at once.
func TestTestTimers(t *testing.T) {
	t.Parallel()
	c := clock.NewTest(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	var (
		mu    sync.Mutex
		fired []string
		wg    sync.WaitGroup
	)
	record := func(what string) func() {
		wg.Add(1)
		return func() {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			fired = append(fired, what)
		}
	}
	c.AfterFunc(time.Second, record("1s"))
	c.AfterFunc(time.Minute, record("1m"))
	stopped := c.AfterFunc(time.Second, func() { t.Error("a stopped timer fired") })
	require.True(t, stopped.Stop())
	require.False(t, stopped.Stop(), "stopped once")
	require.Equal(t, 2, c.Timers())

	c.Advance(999 * time.Millisecond)
	require.Equal(t, 2, c.Timers(), "not yet")
	c.Advance(time.Millisecond)
	require.Equal(t, 1, c.Timers())
	c.AfterFunc(0, record("now"))
	c.Advance(time.Hour)
	require.Zero(t, c.Timers())
	wg.Wait()
	require.ElementsMatch(t, []string{"1s", "1m", "now"}, fired)

	c.Advance(time.Hour)
	require.Len(t, fired, 3, "each once")
}

// TestSleep: Sleep returns true once its time has passed on the clock, false when done
// closes first.
func TestSleep(t *testing.T) {
	t.Parallel()
	c := clock.NewTest(time.Now())
	slept := make(chan bool, 1)
	go func() { slept <- clock.Sleep(c, nil, time.Minute) }()
	require.Eventually(t, func() bool { return c.Timers() == 1 }, 10*time.Second, time.Millisecond)
	c.Advance(time.Minute)
	require.True(t, <-slept)

	done := make(chan struct{})
	go func() { slept <- clock.Sleep(c, done, time.Minute) }()
	require.Eventually(t, func() bool { return c.Timers() == 1 }, 10*time.Second, time.Millisecond)
	close(done)
	require.False(t, <-slept)
	require.Zero(t, c.Timers(), "its timer stopped")
}
