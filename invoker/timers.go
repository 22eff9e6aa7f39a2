package invoker

import (
	"sync"
	"time"

	"github.com/stepgate/stepgate/invoker/internal/clock"
)

// Clock is the invoker's one clock: it makes its timers (timers.go) and its maintenance
// services (maintenance.go) read the time and wait on it; tests inject a test clock they
// advance by hand.
type Clock = clock.Clock

// timers are this process's keyed one-shot timers: runs' wake-ups ("run:<id>"), runs'
// deadlines ("deadline:<id>") and schedules' next ticks ("tick:<schedule id>"). Arming a key replaces its timer; a timer
// that fires runs its func in its own goroutine, counted in wg, unless it was replaced,
// cancelled or the timers stopped. Each is a shortcut: the River job scheduled with
// the same wake-up, and the maintenance passes, move the run when this process is gone.
type timers struct {
	clock   Clock
	wg      *sync.WaitGroup
	mu      sync.Mutex
	byKey   map[string]clock.Timer
	stopped bool
}

func newTimers(c Clock, wg *sync.WaitGroup) *timers {
	return &timers{clock: c, wg: wg, byKey: map[string]clock.Timer{}}
}

// arm runs fn after d (at once when d <= 0), replacing key's timer.
func (t *timers) arm(key string, d time.Duration, fn func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	if old := t.byKey[key]; old != nil {
		old.Stop()
	}
	var tm clock.Timer
	tm = t.clock.AfterFunc(max(d, 0), func() {
		t.mu.Lock() // arm holds it until tm is set
		if t.stopped || t.byKey[key] != tm {
			t.mu.Unlock()
			return
		}
		delete(t.byKey, key)
		t.wg.Add(1)
		t.mu.Unlock()
		defer t.wg.Done()
		fn()
	})
	t.byKey[key] = tm
}

// cancel stops key's timer, if any.
func (t *timers) cancel(key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if tm := t.byKey[key]; tm != nil {
		tm.Stop()
		delete(t.byKey, key)
	}
}

// stop stops every timer, for good.
func (t *timers) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	for key, tm := range t.byKey {
		tm.Stop()
		delete(t.byKey, key)
	}
}

// has reports whether key's timer is armed.
func (t *timers) has(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byKey[key] != nil
}

// armed returns how many timers are armed.
func (t *timers) armed() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byKey)
}

func runTimer(runID string) string       { return "run:" + runID }
func deadlineTimer(runID string) string  { return "deadline:" + runID }
func tickTimer(scheduleID string) string { return "tick:" + scheduleID }
