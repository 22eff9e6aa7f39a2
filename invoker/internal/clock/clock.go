// Package clock is the one clock of the invoker: its timers (runs' wake-ups and
// deadlines, schedules' ticks) and its maintenance services read the time and wait on
// it, so that their tests advance time by hand instead of sleeping.
package clock

import (
	"slices"
	"sync"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	// AfterFunc runs f in its own goroutine once d has passed (at once when d <= 0),
	// unless the returned timer is stopped first, as time.AfterFunc does.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is a timer a Clock made.
type Timer interface {
	// Stop stops the timer; it reports whether it stopped it before it fired. It does
	// not wait for a func already on its way.
	Stop() bool
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// AfterFunc is time.AfterFunc.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

// Sleep waits d on c, or until done is closed; it reports whether d passed.
func Sleep(c Clock, done <-chan struct{}, d time.Duration) bool {
	passed := make(chan struct{})
	t := c.AfterFunc(d, func() { close(passed) })
	select {
	case <-passed:
		return true
	case <-done:
		t.Stop()
		return false
	}
}

// Test is a clock that moves only when its test moves it: by Advance, or by Step on
// every Now (for a service that reads the time in a loop). Its timers fire when Advance
// reaches their time (at once when armed with d <= 0), each func in its own goroutine, as
// the system clock's do; Step moves Now only. Safe for concurrent use.
type Test struct {
	mu     sync.Mutex
	now    time.Time
	step   time.Duration
	timers []*testTimer
}

type testTimer struct {
	c  *Test
	at time.Time
	f  func()
}

// NewTest returns a test clock at now.
func NewTest(now time.Time) *Test { return &Test{now: now} }

// Now returns the clock's time, then moves it on by its step (0 unless Step set one).
func (c *Test) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now
	c.now = c.now.Add(c.step)
	return now
}

// AfterFunc arms a timer that runs f once Advance reaches now + d.
func (c *Test) AfterFunc(d time.Duration, f func()) Timer {
	t := &testTimer{c: c, f: f}
	if d <= 0 {
		go f()
		return t
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t.at = c.now.Add(d)
	c.timers = append(c.timers, t)
	return t
}

// Stop implements Timer.
func (t *testTimer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	i := slices.Index(t.c.timers, t)
	if i < 0 {
		return false
	}
	t.c.timers = slices.Delete(t.c.timers, i, i+1)
	return true
}

// Advance moves the clock on by d and fires the timers whose time it reached, earliest
// first, each in its own goroutine.
func (c *Test) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	var due []*testTimer
	c.timers = slices.DeleteFunc(c.timers, func(t *testTimer) bool {
		if t.at.After(c.now) {
			return false
		}
		due = append(due, t)
		return true
	})
	c.mu.Unlock()
	slices.SortStableFunc(due, func(a, b *testTimer) int { return a.at.Compare(b.at) })
	for _, t := range due {
		go t.f()
	}
}

// Timers returns how many timers are armed and have not fired: a test waits for the
// timer of the service it drives before it advances the clock past it.
func (c *Test) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// Step makes every later Now move the clock on by d after reading it.
func (c *Test) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step = d
}
