package invoker

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stepgate/stepgate/invoker/internal/clock"
)

// fakeClock makes timers that fire only when the test says so, in the test's goroutine,
// even once stopped: what clock.Test cannot show, a func on its way when its timer was
// stopped or replaced.
type fakeClock struct{ timers []*fakeTimer }

type fakeTimer struct {
	d       time.Duration
	f       func()
	stopped bool
}

func (c *fakeClock) Now() time.Time { return time.Time{} }

func (c *fakeClock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := &fakeTimer{d: d, f: f}
	c.timers = append(c.timers, t)
	return t
}

func (t *fakeTimer) Stop() bool {
	was := !t.stopped
	t.stopped = true
	return was
}

// fire runs timer i's func as the clock would when it is due: even a stopped timer's
// func may already be on its way (time.AfterFunc's Stop does not wait for it), and the
// timers must ignore it then.
func (c *fakeClock) fire(i int) { c.timers[i].f() }

func TestTimers(t *testing.T) {
	t.Parallel()
	fake := &fakeClock{}
	var wg sync.WaitGroup
	ts := newTimers(fake, &wg)
	var fired []string
	record := func(what string) func() { return func() { fired = append(fired, what) } }

	ts.arm(runTimer("a"), time.Second, record("a1"))
	ts.arm(runTimer("a"), -time.Second, record("a2")) // replaces a1; at once
	ts.arm(tickTimer("a"), time.Minute, record("tick"))
	if got := fake.timers[1].d; got != 0 {
		t.Fatalf("a negative delay arms for %s, want 0", got)
	}
	if !fake.timers[0].stopped || ts.armed() != 2 {
		t.Fatalf("a re-armed key stops its old timer and keeps one: stopped %v, armed %d", fake.timers[0].stopped, ts.armed())
	}
	fake.fire(0) // the replaced timer, late
	fake.fire(1)
	fake.fire(1) // once only
	if want := []string{"a2"}; !slices.Equal(fired, want) {
		t.Fatalf("fired %v, want %v", fired, want)
	}

	ts.cancel(tickTimer("a"))
	fake.fire(2)
	if ts.armed() != 0 || len(fired) != 1 {
		t.Fatalf("a cancelled timer fired: %v, armed %d", fired, ts.armed())
	}

	ts.arm(runTimer("b"), time.Second, record("b"))
	ts.stop()
	ts.arm(runTimer("c"), time.Second, record("c"))
	fake.fire(3)
	if len(fake.timers) != 4 || len(fired) != 1 {
		t.Fatalf("stopped timers armed or fired: %d timers, fired %v", len(fake.timers), fired)
	}
	wg.Wait()
}
