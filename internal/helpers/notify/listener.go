// Package notify is a process's one connection LISTENing to Postgres: the end of a run,
// for the requests waiting on its result (Listener), and the status changes of watched
// tenants' runs, for the live streams (Hub), and the values and stream writes of runs,
// for their readers (SubscribeOutput). Every gateway has one, whoever changed the
// run: a waiter or a stream learns of a run finished by any gateway.
package notify

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/output"
	"github.com/stepgate/stepgate/journal/runevents"
)

// Listener holds the process's listening connection, on journal.NotifyChannel,
// runevents.EventChannel, output.OutputChannel and journal.SlotChannel. It tells the requests waiting on a run's result that it may have
// finished (a signal means "look again", never "done"), fed by this process's own
// terminal updates (Signal) and by the notifications; and it passes run events to one
// handler (the Hub).
type Listener struct {
	pool  *pgxpool.Pool
	log   *slog.Logger
	ready chan struct{}
	// pollEvery and pollResync, set by NewPollingListener: no connection, a poll instead.
	pollEvery, pollResync time.Duration

	mu       sync.Mutex
	byRun    map[string]map[chan struct{}]struct{}
	byOutput map[string]map[chan struct{}]struct{} // readers of runs' values and streams

	events atomic.Pointer[func(*runevents.RunEvent)]
	slots  atomic.Pointer[func(runID string)]
}

// NewListener returns a Listener on pool, not listening yet: see Run.
func NewListener(pool *pgxpool.Pool, log *slog.Logger) *Listener {
	return &Listener{
		pool: pool, log: log, ready: make(chan struct{}),
		byRun: map[string]map[chan struct{}]struct{}{}, byOutput: map[string]map[chan struct{}]struct{}{},
	}
}

// NewPollingListener returns a Listener that listens to nothing, for a gateway whose
// connections go through a pooler in transaction mode, which cannot carry LISTEN: its
// Run tells every waiter to look again every `every` (so a run's end, or a value or
// stream write, reaches its waiters within that, whoever made it), and the events
// handler nil every `resync` (the live streams resync: they reload what they show). A
// freed concurrency slot wakes its held run through the maintenance's sweep instead
// (see journal.StrandedRuns).
func NewPollingListener(every, resync time.Duration) *Listener {
	return &Listener{
		ready: make(chan struct{}), pollEvery: every, pollResync: resync,
		byRun: map[string]map[chan struct{}]struct{}{}, byOutput: map[string]map[chan struct{}]struct{}{},
	}
}

// Ready is closed once the first LISTEN is in place: from then on, waiters can rely on
// notifications.
func (l *Listener) Ready() <-chan struct{} { return l.ready }

// Subscribe returns a channel told each time runID may have reached a terminal status,
// by this process or another; the caller re-reads the run. Call the func when done.
func (l *Listener) Subscribe(runID string) (<-chan struct{}, func()) {
	return l.subscribe(l.byRun, runID)
}

// SubscribeOutput returns a channel told each time runID may have published a value or
// written to a stream (output.OutputChannel), by this process or another; the caller
// re-reads what it follows. The run's terminal update is told by Subscribe, not here.
// Call the func when done.
func (l *Listener) SubscribeOutput(runID string) (<-chan struct{}, func()) {
	return l.subscribe(l.byOutput, runID)
}

func (l *Listener) subscribe(m map[string]map[chan struct{}]struct{}, runID string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	set := m[runID]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		m[runID] = set
	}
	set[ch] = struct{}{}
	l.mu.Unlock()
	return ch, func() {
		l.mu.Lock()
		delete(set, ch)
		if len(m[runID]) == 0 {
			delete(m, runID)
		}
		l.mu.Unlock()
	}
}

// Signal tells runID's waiters in this process to look again.
func (l *Listener) Signal(runID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch := range l.byRun[runID] {
		poke(ch)
	}
}

func (l *Listener) signalOutput(runID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch := range l.byOutput[runID] {
		poke(ch)
	}
}

func (l *Listener) signalAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range []map[string]map[chan struct{}]struct{}{l.byRun, l.byOutput} {
		for _, set := range m {
			for ch := range set {
				poke(ch)
			}
		}
	}
}

// poke sends on a channel of capacity 1 unless a value is pending already.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// HandleRunEvents passes each runevents.EventChannel notification to fn, in the order
// Postgres delivered them, on the listener's goroutine: fn must not block. fn gets nil
// after the listener reconnected, when events may have been missed. A later call
// replaces fn; nil stops the handling.
func (l *Listener) HandleRunEvents(fn func(ev *runevents.RunEvent)) {
	if fn == nil {
		l.events.Store(nil)
		return
	}
	l.events.Store(&fn)
}

func (l *Listener) event(ev *runevents.RunEvent) {
	if fn := l.events.Load(); fn != nil {
		(*fn)(ev)
	}
}

// HandleSlotWakes passes each journal.SlotChannel notification (the id of a held run a
// freed concurrency slot made due) to fn, on the listener's goroutine: fn must not
// block. A later call replaces fn.
func (l *Listener) HandleSlotWakes(fn func(runID string)) { l.slots.Store(&fn) }

// Run holds the listening connection until ctx ends, reconnecting after failures (a
// second apart). After a reconnect every waiter is told to look again, and the events
// handler gets nil, since notifications may have been missed.
func (l *Listener) Run(ctx context.Context) {
	if l.pool == nil {
		l.poll(ctx)
		return
	}
	first := true
	for ctx.Err() == nil {
		err := func() error {
			conn, err := l.pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, "LISTEN "+journal.NotifyChannel+"; LISTEN "+runevents.EventChannel+"; LISTEN "+output.OutputChannel+"; LISTEN "+journal.SlotChannel); err != nil {
				conn.Conn().Close(context.WithoutCancel(ctx)) // don't return a listening conn to the pool
				return err
			}
			if first {
				close(l.ready)
				first = false
			} else {
				l.signalAll()
				l.event(nil)
			}
			for {
				n, err := conn.Conn().WaitForNotification(ctx)
				if err != nil {
					conn.Conn().Close(context.WithoutCancel(ctx))
					return err
				}
				switch n.Channel {
				case journal.NotifyChannel:
					l.Signal(n.Payload)
					continue
				case output.OutputChannel:
					l.signalOutput(n.Payload)
					continue
				case journal.SlotChannel:
					if fn := l.slots.Load(); fn != nil {
						(*fn)(n.Payload)
					}
					continue
				}
				ev, err := runevents.ParseRunEvent(n.Payload)
				if err != nil {
					l.log.WarnContext(ctx, "run event notification dropped", slog.Any("error", err))
					continue
				}
				l.event(&ev)
			}
		}()
		if ctx.Err() != nil {
			return
		}
		l.log.WarnContext(ctx, "run notification listener failed; reconnecting", slog.Any("error", err))
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

// poll is Run for NewPollingListener's Listener.
func (l *Listener) poll(ctx context.Context) {
	close(l.ready)
	look := time.NewTicker(l.pollEvery)
	defer look.Stop()
	resync := time.NewTicker(l.pollResync)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-look.C:
			l.signalAll()
		case <-resync.C:
			l.event(nil)
		}
	}
}
