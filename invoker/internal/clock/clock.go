// Package clock is the one clock the invoker's maintenance services read the time from,
// so that their tests advance time by hand instead of sleeping.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time.
type Clock interface {
	Now() time.Time
}

// Real is the system clock.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Test is a clock that moves only when its test moves it: by Advance, or by Step on
// every Now (for a service that reads the time in a loop). Safe for concurrent use.
type Test struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
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

// Advance moves the clock on by d.
func (c *Test) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Step makes every later Now move the clock on by d after reading it.
func (c *Test) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.step = d
}
