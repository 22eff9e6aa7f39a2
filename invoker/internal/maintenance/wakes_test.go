package maintenance_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/invoker/internal/maintenance"
	"github.com/stepgate/stepgate/journal"
)

// armings records the timers a service arms, and answers which are armed.
type armings struct {
	mu    sync.Mutex
	armed map[string]time.Duration
}

func newArmings() *armings { return &armings{armed: map[string]time.Duration{}} }

func (a *armings) has(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.armed[id]
	return ok
}

func (a *armings) armAt(id string, _ time.Time, d time.Duration) { a.arm(id, d) }

func (a *armings) arm(id string, d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.armed[id] = d
}

func (a *armings) get() map[string]time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]time.Duration{}
	for k, v := range a.armed {
		out[k] = v
	}
	return out
}

// TestWakes: each pass arms the timers of the runs due within the lead that are not
// armed, each to fire at its wake time on the database clock less what the service's
// clock says passed since it read it, and not those due past the lead.
func TestWakes(t *testing.T) {
	t.Parallel()
	db := pgtest.DB(t)
	startAt := func(d time.Duration) func(*journal.NewRun) {
		return func(n *journal.NewRun) { at := time.Now().Add(d); n.StartAt = &at }
	}
	near, far := newRun(t, db, startAt(30*time.Second)), newRun(t, db, startAt(time.Hour))

	clk := clock.NewTest(time.Now())
	a := newArmings()
	w := maintenance.NewWakes(db, time.Minute, a.has, a.armAt, maintenance.NewHealth(clk), (&logs{}).logger(), clk)
	w.Pass(t.Context())
	got := a.get()
	require.Len(t, got, 1, "the run due within the lead only")
	d := got[near.ID]
	require.Positive(t, d)
	require.LessOrEqual(t, d, 30*time.Second, "at its wake time")

	// Armed already: left alone.
	w.Pass(t.Context())
	require.Equal(t, d, a.get()[near.ID])

	// The time the service's clock says passed between reading and arming is taken off.
	a = newArmings()
	w = maintenance.NewWakes(db, time.Minute, a.has, a.armAt, maintenance.NewHealth(clk), (&logs{}).logger(), clk)
	clk.Step(10 * time.Second)
	w.Pass(t.Context())
	require.LessOrEqual(t, a.get()[near.ID], 20*time.Second)
	require.NotContains(t, a.get(), far.ID)
}
