package maintenance

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/journal"
)

// Health tracks whether this process reaches the database, for the Reaper's rule: after
// this process could not reach it, it reaps no lease until it has reached it for two
// renewal intervals. The services that read or write the database observe their errors
// in it. A database that hangs instead of failing (a stopped primary, a cut link) counts
// as out of reach too: a statement that ran out of its time (context.DeadlineExceeded),
// and a maintenance pass that took longer than its limit (Timed), restart the steady
// time, so that leases whose owners could not renew them while it hung are not reaped
// the moment it answers again. Safe for concurrent use.
type Health struct {
	clock    clock.Clock
	mu       sync.Mutex
	failedAt time.Time // the last statement that failed unavailable; at start, the start
	outage   bool      // a statement failed since the start
}

// NewHealth returns a Health whose database failed just now, so that nothing is reaped
// before the other gateways could renew their leases.
func NewHealth(clk clock.Clock) *Health { return &Health{clock: clk, failedAt: clk.Now()} }

// Observe notes err, a statement's error (nil: none): an unavailable database
// (journal.IsUnavailable), or a statement that ran out of its time
// (context.DeadlineExceeded, ErrStalled), restarts the steady time.
func (h *Health) Observe(err error) {
	if err != nil && (journal.IsUnavailable(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, ErrStalled)) {
		h.failed()
	}
}

func (h *Health) failed() {
	h.mu.Lock()
	h.failedAt = h.clock.Now()
	h.outage = true
	h.mu.Unlock()
}

// ErrStalled is the error of a statement that answered, but later than the database
// answers when it is reachable: the Reaper's, which then reaps nothing.
var ErrStalled = errors.New("maintenance: the database answered too late")

// Timed returns pass, noting a failure when it took longer than limit: a pass held up
// by a database that hung ends, without an error, once it answers again.
func (h *Health) Timed(limit time.Duration, pass func(context.Context)) func(context.Context) {
	return func(ctx context.Context) {
		start := h.clock.Now()
		pass(ctx)
		if h.clock.Now().Sub(start) > limit {
			h.failed()
		}
	}
}

// SteadyFor reports whether the database has answered for at least d.
func (h *Health) SteadyFor(d time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.clock.Now().Sub(h.failedAt) >= d
}

// SteadySince reports whether the database has answered for at least atStart since
// the start, or, once a statement failed, for at least afterOutage since the last
// failure: after an outage the other gateways may be reconnecting too, which takes
// longer after a database that hung (every connection to it lost at once) than their
// renewal interval.
func (h *Health) SteadySince(atStart, afterOutage time.Duration) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	d := atStart
	if h.outage {
		d = afterOutage
	}
	return h.clock.Now().Sub(h.failedAt) >= d
}
