package maintenance

import (
	"sync"
	"time"

	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/journal"
)

// Health tracks whether this process reaches the database, for the Reaper's rule: after
// this process could not reach it, it reaps no lease until it has reached it for two
// renewal intervals. The services that read or write the database observe their errors
// in it. Safe for concurrent use.
type Health struct {
	clock    clock.Clock
	mu       sync.Mutex
	failedAt time.Time // the last statement that failed unavailable; at start, the start
}

// NewHealth returns a Health whose database failed just now, so that nothing is reaped
// before the other gateways could renew their leases.
func NewHealth(clk clock.Clock) *Health { return &Health{clock: clk, failedAt: clk.Now()} }

// Observe notes err, a statement's error (nil: none): an unavailable database
// (journal.IsUnavailable) restarts the steady time.
func (h *Health) Observe(err error) {
	if err != nil && journal.IsUnavailable(err) {
		h.mu.Lock()
		h.failedAt = h.clock.Now()
		h.mu.Unlock()
	}
}

// SteadyFor reports whether the database has answered for at least d.
func (h *Health) SteadyFor(d time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.clock.Now().Sub(h.failedAt) >= d
}
