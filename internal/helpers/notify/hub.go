package notify

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/runevents"
)

// Live run events (GET /v1/runs/stream) work like this:
//
//   - Every statement that changes a run's status notifies runevents.EventChannel, but
//     only while a row of stepgate.run_watch for the run's tenant has not expired, so
//     runs nobody watches pay no NOTIFY.
//   - A gateway with open streams of a tenant keeps that row (runevents.Watch) and
//     refreshes it every watchRefresh; it deletes it when the tenant's last stream closes.
//   - Each gateway's one listener connection (Listener) receives the events and
//     hands them to the Hub, which loads the runs of a batch of events in one query
//     and fans them out to the streams of their tenant, filtered by function or run.
//   - A stream's buffer is bounded: a client that falls behind loses events and gets an
//     `event: resync`, and so does every client after the listener reconnected. On
//     resync a client reloads what it shows.
const (
	watchTTL     = 90 * time.Second
	watchRefresh = 30 * time.Second
	streamBuffer = 256 // events a client may fall behind by
)

// Hub fans this gateway's run events out to its open streams, each event encoded once
// (by the Encoder it was made with) for all the streams it matches. Its pump goroutine
// runs only while some stream is open.
type Hub struct {
	encode    Encoder
	pool      *pgxpool.Pool
	log       *slog.Logger
	gatewayID string
	in        chan *runevents.RunEvent // from the listener; nil: events were missed
	lost      atomic.Bool              // in overflowed
	open      atomic.Int32             // streams open, read without mu by receive

	mu       sync.Mutex
	clients  map[*Stream]struct{}
	tenants  map[string]int // open streams per tenant
	pumping  bool
	wake     chan struct{}         // tells the pump to look at clients again
	shutdown map[*http.Server]bool // servers whose shutdown ends the streams

	// watchMu orders watch upserts and deletes, so a delete for a tenant's last stream
	// never lands after the upsert of a stream opened meanwhile.
	watchMu sync.Mutex
}

// Stream is one open stream of a tenant's run events.
type Stream struct {
	tenant, function, run string
	out                   chan []byte   // encoded events
	resync                chan struct{} // events were dropped
	done                  chan struct{} // closed on server shutdown
	closeOnce             sync.Once
	leaveOnce             sync.Once
}

// Events delivers the stream's events, encoded.
func (c *Stream) Events() <-chan []byte { return c.out }

// Resync is told when events were dropped (the client fell behind, or the listener
// reconnected): the client should reload what it shows. Drop what Events holds then.
func (c *Stream) Resync() <-chan struct{} { return c.resync }

// Done is closed when the server shuts down.
func (c *Stream) Done() <-chan struct{} { return c.done }

// Encoder encodes a run event for the streams: the run as loaded after the event, and
// the event.
type Encoder func(run *journal.Run, ev *runevents.RunEvent) ([]byte, error)

// NewHub returns a Hub fed by l's run events, reading runs and keeping watches with pool
// (the system pool).
func NewHub(l *Listener, pool *pgxpool.Pool, log *slog.Logger, encode Encoder) *Hub {
	h := &Hub{
		encode:    encode,
		pool:      pool,
		log:       log,
		gatewayID: uuid.NewString(),
		in:        make(chan *runevents.RunEvent, 4096),
		clients:   map[*Stream]struct{}{},
		tenants:   map[string]int{},
		wake:      make(chan struct{}, 1),
		shutdown:  map[*http.Server]bool{},
	}
	l.HandleRunEvents(h.receive)
	return h
}

// receive runs on the listener's goroutine: it never blocks.
func (h *Hub) receive(ev *runevents.RunEvent) {
	if h.open.Load() == 0 {
		return
	}
	select {
	case h.in <- ev:
	default:
		h.lost.Store(true)
		select {
		case h.wake <- struct{}{}:
		default:
		}
	}
}

// Subscribe opens a stream of tenant's run events, filtered by function and run when
// they are not empty. Once it returns, every later status change of the tenant's runs
// reaches the stream: the watch row is committed.
func (h *Hub) Subscribe(ctx context.Context, tenant, function, run string) (*Stream, error) {
	c := &Stream{
		tenant: tenant, function: function, run: run,
		out:    make(chan []byte, streamBuffer),
		resync: make(chan struct{}, 1),
		done:   make(chan struct{}),
	}
	h.mu.Lock()
	h.clients[c] = struct{}{}
	h.tenants[tenant]++
	h.open.Add(1)
	if !h.pumping {
		h.pumping = true
		go h.pump()
	}
	h.mu.Unlock()

	h.watchMu.Lock()
	err := runevents.Watch(ctx, h.pool, h.gatewayID, []string{tenant}, watchTTL)
	h.watchMu.Unlock()
	if err != nil {
		h.Unsubscribe(c)
		return nil, err
	}
	return c, nil
}

// Unsubscribe closes c's stream; the tenant's watch goes with its last stream. It may
// be called more than once.
func (h *Hub) Unsubscribe(c *Stream) {
	c.leaveOnce.Do(func() {
		h.mu.Lock()
		delete(h.clients, c)
		h.tenants[c.tenant]--
		last := h.tenants[c.tenant] == 0
		if last {
			delete(h.tenants, c.tenant)
		}
		h.open.Add(-1)
		select {
		case h.wake <- struct{}{}:
		default:
		}
		h.mu.Unlock()
		if !last {
			return
		}
		h.watchMu.Lock()
		defer h.watchMu.Unlock()
		h.mu.Lock()
		reopened := h.tenants[c.tenant] > 0
		h.mu.Unlock()
		if reopened {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := runevents.Unwatch(ctx, h.pool, h.gatewayID, c.tenant); err != nil {
			// The row expires by itself; meanwhile the tenant's runs notify for nothing.
			h.log.Warn("run event watch not removed", slog.String("tenant", c.tenant), slog.Any("error", err))
		}
	})
}

// EndOnShutdown makes srv's graceful shutdown end the open streams, which would
// otherwise hold it up until its deadline.
func (h *Hub) EndOnShutdown(srv *http.Server) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shutdown[srv] {
		return
	}
	h.shutdown[srv] = true
	srv.RegisterOnShutdown(func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		for c := range h.clients {
			c.closeOnce.Do(func() { close(c.done) })
		}
	})
}

// pump delivers events in batches and refreshes the watches, until no stream is open.
func (h *Hub) pump() {
	refresh := time.NewTicker(watchRefresh)
	defer refresh.Stop()
	for {
		h.mu.Lock()
		if len(h.clients) == 0 {
			h.pumping = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		select {
		case ev := <-h.in:
			batch := []*runevents.RunEvent{ev}
		drain:
			for len(batch) < 512 {
				select {
				case ev := <-h.in:
					batch = append(batch, ev)
				default:
					break drain
				}
			}
			h.deliver(batch)
		case <-refresh.C:
			h.refresh()
		case <-h.wake:
			h.deliver(nil) // tells the streams if events were lost
		}
	}
}

func (h *Hub) refresh() {
	h.watchMu.Lock()
	defer h.watchMu.Unlock()
	h.mu.Lock()
	tenants := make([]string, 0, len(h.tenants))
	for t := range h.tenants {
		tenants = append(tenants, t)
	}
	h.mu.Unlock()
	if len(tenants) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := runevents.Watch(ctx, h.pool, h.gatewayID, tenants, watchTTL); err != nil {
		// The next refresh tries again, well before the rows expire.
		h.log.Warn("run event watches not refreshed", slog.Any("error", err))
	}
}

// deliver loads the runs of a batch of events and sends each event to the streams it
// matches, in the order the events came.
func (h *Hub) deliver(batch []*runevents.RunEvent) {
	resync := h.lost.Swap(false)
	h.mu.Lock()
	var ids []string
	for _, ev := range batch {
		if ev == nil {
			resync = true
		} else if h.tenants[ev.Tenant] > 0 {
			ids = append(ids, ev.ID)
		}
	}
	h.mu.Unlock()
	runs := map[string]*journal.Run{}
	if len(ids) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		list, err := journal.RunsByID(ctx, h.pool, ids)
		cancel()
		if err != nil {
			h.log.Warn("run events dropped; streams told to resync", slog.Any("error", err))
			resync = true
		}
		for i := range list {
			runs[list[i].ID] = &list[i]
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if resync {
		for c := range h.clients {
			c.dropped()
		}
	}
	for _, ev := range batch {
		if ev == nil {
			continue
		}
		run := runs[ev.ID]
		if run == nil || run.Tenant != ev.Tenant {
			continue // another tenant's, or gone
		}
		var frame []byte
		for c := range h.clients {
			if c.tenant != ev.Tenant || (c.function != "" && c.function != ev.Function) || (c.run != "" && c.run != ev.ID) {
				continue
			}
			if frame == nil {
				var err error
				if frame, err = h.encode(run, ev); err != nil {
					h.log.Error("run event not encoded", slog.String("run_id", ev.ID), slog.String("function", ev.Function),
						slog.String("tenant", ev.Tenant), slog.Any("error", err))
					break
				}
			}
			select {
			case c.out <- frame:
			default:
				c.dropped()
			}
		}
	}
}

func (c *Stream) dropped() {
	select {
	case c.resync <- struct{}{}:
	default:
	}
}
