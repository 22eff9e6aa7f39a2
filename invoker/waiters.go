package invoker

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/journal"
)

// waiters tells the requests waiting on a run's result that it may have finished. It is
// fed by this process's own terminal updates and by journal.NotifyChannel, so a waiter
// learns of a run finished by any gateway. A signal means "look again", never "done".
//
// Its listener connection also receives journal.EventChannel, passed on to the events
// handler: one listening connection per gateway for both.
type waiters struct {
	mu    sync.Mutex
	byRun map[string]map[chan struct{}]struct{}

	events atomic.Pointer[func(*journal.RunEvent)]
}

// event hands a run event to the events handler, if one is set; nil means events may
// have been missed.
func (w *waiters) event(ev *journal.RunEvent) {
	if fn := w.events.Load(); fn != nil {
		(*fn)(ev)
	}
}

func newWaiters() *waiters {
	return &waiters{byRun: map[string]map[chan struct{}]struct{}{}}
}

// subscribe returns a channel that receives a value each time runID may have finished.
func (w *waiters) subscribe(runID string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	w.mu.Lock()
	set := w.byRun[runID]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		w.byRun[runID] = set
	}
	set[ch] = struct{}{}
	w.mu.Unlock()
	return ch, func() {
		w.mu.Lock()
		delete(set, ch)
		if len(w.byRun[runID]) == 0 {
			delete(w.byRun, runID)
		}
		w.mu.Unlock()
	}
}

func (w *waiters) signal(runID string) {
	w.mu.Lock()
	for ch := range w.byRun[runID] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	w.mu.Unlock()
}

func (w *waiters) signalAll() {
	w.mu.Lock()
	for _, set := range w.byRun {
		for ch := range set {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
	w.mu.Unlock()
}

// listen holds a connection LISTENing on journal.NotifyChannel and journal.EventChannel
// until ctx ends, reconnecting after failures. ready is closed once the first LISTEN is
// in place. After a reconnect every waiter is told to look again, and the events handler
// gets nil, since notifications may have been missed.
func (w *waiters) listen(ctx context.Context, pool *pgxpool.Pool, log *slog.Logger, ready chan<- struct{}) {
	first := true
	for ctx.Err() == nil {
		err := func() error {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, "LISTEN "+journal.NotifyChannel+"; LISTEN "+journal.EventChannel); err != nil {
				conn.Conn().Close(context.WithoutCancel(ctx)) // don't return a listening conn to the pool
				return err
			}
			if first {
				close(ready)
				first = false
			} else {
				w.signalAll()
				w.event(nil)
			}
			for {
				n, err := conn.Conn().WaitForNotification(ctx)
				if err != nil {
					conn.Conn().Close(context.WithoutCancel(ctx))
					return err
				}
				if n.Channel != journal.EventChannel {
					w.signal(n.Payload)
					continue
				}
				ev, err := journal.ParseRunEvent(n.Payload)
				if err != nil {
					log.WarnContext(ctx, "run event notification dropped", slog.Any("error", err))
					continue
				}
				w.event(&ev)
			}
		}()
		if ctx.Err() != nil {
			return
		}
		log.WarnContext(ctx, "run notification listener failed; reconnecting", slog.Any("error", err))
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
