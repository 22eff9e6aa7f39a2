package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// Live run events (GET /v1/runs/stream) work like this:
//
//   - Every statement that changes a run's status notifies journal.EventChannel, but
//     only while a row of stepgate.run_watch for the run's tenant has not expired, so
//     runs nobody watches pay no NOTIFY.
//   - A gateway with open streams of a tenant keeps that row (journal.Watch) and
//     refreshes it every watchRefresh; it deletes it when the tenant's last stream closes.
//   - Each gateway's one listener connection (the invoker's) receives the events and
//     hands them to the streamHub, which loads the runs of a batch of events in one query
//     and fans them out to the streams of their tenant, filtered by function or run.
//   - A stream's buffer is bounded: a client that falls behind loses events and gets an
//     `event: resync`, and so does every client after the listener reconnected. On
//     resync a client reloads what it shows.
const (
	watchTTL          = 90 * time.Second
	watchRefresh      = 30 * time.Second
	keepaliveInterval = 15 * time.Second
	streamBuffer      = 256              // events a client may fall behind by
	streamWriteWait   = 30 * time.Second // a write blocked longer ends the stream
)

// streamHub fans this gateway's run events out to its open streams. Its pump goroutine
// runs only while some stream is open.
type streamHub struct {
	pool      *pgxpool.Pool
	log       *slog.Logger
	gatewayID string
	in        chan *journal.RunEvent // from the listener; nil: events were missed
	lost      atomic.Bool            // in overflowed
	open      atomic.Int32           // streams open, read without mu by receive

	mu       sync.Mutex
	clients  map[*streamClient]struct{}
	tenants  map[string]int // open streams per tenant
	pumping  bool
	wake     chan struct{}         // tells the pump to look at clients again
	shutdown map[*http.Server]bool // servers whose shutdown ends the streams

	// watchMu orders watch upserts and deletes, so a delete for a tenant's last stream
	// never lands after the upsert of a stream opened meanwhile.
	watchMu sync.Mutex
}

type streamClient struct {
	tenant, function, run string
	out                   chan []byte   // SSE frames
	resync                chan struct{} // events were dropped
	done                  chan struct{} // closed on server shutdown
	closeOnce             sync.Once
	leaveOnce             sync.Once
}

func newStreamHub(pool *pgxpool.Pool, log *slog.Logger, inv *invoker.Invoker) *streamHub {
	h := &streamHub{
		pool:      pool,
		log:       log,
		gatewayID: uuid.NewString(),
		in:        make(chan *journal.RunEvent, 4096),
		clients:   map[*streamClient]struct{}{},
		tenants:   map[string]int{},
		wake:      make(chan struct{}, 1),
		shutdown:  map[*http.Server]bool{},
	}
	inv.HandleRunEvents(h.receive)
	return h
}

// receive runs on the listener's goroutine: it never blocks.
func (h *streamHub) receive(ev *journal.RunEvent) {
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

// subscribe opens a stream of tenant's run events, filtered by function and run when
// they are not empty. Once it returns, every later status change of the tenant's runs
// reaches the stream: the watch row is committed.
func (h *streamHub) subscribe(ctx context.Context, tenant, function, run string) (*streamClient, error) {
	c := &streamClient{
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
	err := journal.Watch(ctx, h.pool, h.gatewayID, []string{tenant}, watchTTL)
	h.watchMu.Unlock()
	if err != nil {
		h.unsubscribe(c)
		return nil, err
	}
	return c, nil
}

// unsubscribe closes c's stream; the tenant's watch goes with its last stream. It may
// be called more than once.
func (h *streamHub) unsubscribe(c *streamClient) {
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
		if err := journal.Unwatch(ctx, h.pool, h.gatewayID, c.tenant); err != nil {
			// The row expires by itself; meanwhile the tenant's runs notify for nothing.
			h.log.Warn("run event watch not removed", slog.String("tenant", c.tenant), slog.Any("error", err))
		}
	})
}

// endOnShutdown makes srv's graceful shutdown end the open streams, which would
// otherwise hold it up until its deadline.
func (h *streamHub) endOnShutdown(srv *http.Server) {
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
func (h *streamHub) pump() {
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
			batch := []*journal.RunEvent{ev}
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

func (h *streamHub) refresh() {
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
	if err := journal.Watch(ctx, h.pool, h.gatewayID, tenants, watchTTL); err != nil {
		// The next refresh tries again, well before the rows expire.
		h.log.Warn("run event watches not refreshed", slog.Any("error", err))
	}
}

// deliver loads the runs of a batch of events and sends each event to the streams it
// matches, in the order the events came.
func (h *streamHub) deliver(batch []*journal.RunEvent) {
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
				data, err := json.Marshal(eventRun(run, ev))
				if err != nil {
					h.log.Error("run event not encoded", slog.String("run_id", ev.ID), slog.Any("error", err))
					break
				}
				frame = append(append([]byte("event: run\ndata: "), data...), "\n\n"...)
			}
			select {
			case c.out <- frame:
			default:
				c.dropped()
			}
		}
	}
}

func (c *streamClient) dropped() {
	select {
	case c.resync <- struct{}{}:
	default:
	}
}

// eventRun is the run as the event saw it: the event's status and its timing, with the
// rest of the run as loaded after the event. The output and error are the loaded ones
// only when the run still has the event's status, so an early event never carries a
// later outcome.
func eventRun(run *journal.Run, ev *journal.RunEvent) protocol.Run {
	r := runToAPI(run, false)
	r.Status, r.Attempts = protocol.RunStatus(ev.Status), ev.Attempts
	r.WakeAt, r.FinishedAt = ev.WakeAt, ev.FinishedAt
	switch {
	case run.Status != ev.Status:
		r.Error = nil
	case r.Error != nil && len(r.Error.Message) > 300:
		// An event stays small, as a run in a list does.
		e := *r.Error
		e.Message = strings.ToValidUTF8(e.Message[:300], "") + "…"
		r.Error = &e
	}
	return r
}

// StreamRuns streams the tenant's run events as server-sent events; see streamHub.
func (s *Server) StreamRuns(ctx context.Context, req server.StreamRunsRequestObject) (server.StreamRunsResponseObject, error) {
	var function, run string
	if req.Params.Function != nil {
		function = *req.Params.Function
	}
	if req.Params.Run != nil && *req.Params.Run != "" {
		if !validRunID(*req.Params.Run) {
			return nil, badRequest("run %q is not a run id", *req.Params.Run)
		}
		run = *req.Params.Run
	}
	id := identity(ctx)
	release, err := s.streamSlots(id)
	if err != nil {
		return nil, err
	}
	c, err := s.stream.subscribe(ctx, id.Tenant, function, run)
	if err != nil {
		release()
		return nil, err
	}
	// Should the response never be written, the stream still closes with the request.
	context.AfterFunc(ctx, func() {
		s.stream.unsubscribe(c)
		release()
	})
	if srv, ok := ctx.Value(http.ServerContextKey).(*http.Server); ok {
		s.stream.endOnShutdown(srv)
	}
	exp, _ := auth.ExpiryFrom(ctx)
	return runStream{ctx: ctx, hub: s.stream, c: c, expires: exp, release: release}, nil
}

// streamSlots takes a stream's place among the caller's tenant's and subject's, or
// answers a 429 naming the limit.
func (s *Server) streamSlots(id auth.Identity) (release func(), err error) {
	tenant := s.tenantStreams.acquire(id.Tenant)
	if tenant == nil {
		return nil, &problemError{http.StatusTooManyRequests, fmt.Sprintf(
			"tenant %q has %d live streams open on this gateway, its limit: close one first", id.Tenant, s.tenantStreams.maxPerKey)}
	}
	subject := s.subjectStreams.acquire(id.Tenant + "\n" + id.Subject)
	if subject == nil {
		tenant()
		return nil, &problemError{http.StatusTooManyRequests, fmt.Sprintf(
			"%s has %d live streams open on this gateway, the limit per subject: close one first", id.Subject, s.subjectStreams.maxPerKey)}
	}
	return func() { subject(); tenant() }, nil
}

// runStream writes a stream until the client goes away, the server shuts down or the
// caller's token expires.
type runStream struct {
	ctx     context.Context
	hub     *streamHub
	c       *streamClient
	expires time.Time // zero: never
	release func()
}

func (st runStream) VisitStreamRunsResponse(w http.ResponseWriter) error {
	defer st.release()
	defer st.hub.unsubscribe(st.c)
	h := w.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // no proxy buffering (nginx)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(frame []byte) error {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteWait)) // not every writer has deadlines
		if _, err := w.Write(frame); err != nil {
			return err
		}
		return rc.Flush()
	}
	// EventSource reconnects after 2s; the comment also sends the headers at once.
	if err := send([]byte("retry: 2000\n\n")); err != nil {
		return nil
	}
	keepalive := time.NewTicker(keepaliveInterval)
	defer keepalive.Stop()
	var expired <-chan time.Time
	if !st.expires.IsZero() {
		t := time.NewTimer(time.Until(st.expires))
		defer t.Stop()
		expired = t.C
	}
	for {
		var err error
		select {
		case <-st.ctx.Done():
			return nil
		case <-st.c.done:
			return nil
		case <-expired:
			// The token that opened the stream is no longer valid: the client signs in
			// again with a new one.
			_ = send([]byte("event: expired\ndata: {}\n\n"))
			return nil
		case frame := <-st.c.out:
			err = send(frame)
		case <-st.c.resync:
			// What is buffered predates the reload the client is about to make.
			for len(st.c.out) > 0 {
				<-st.c.out
			}
			err = send([]byte("event: resync\ndata: {}\n\n"))
		case <-keepalive.C:
			err = send([]byte(": keepalive\n\n"))
		}
		if err != nil {
			return nil // the client went away; nothing to answer
		}
	}
}

// streamToken lets GET /v1/runs/stream take its token from the access_token query
// parameter when the request has no Authorization header, because a browser's
// EventSource cannot send headers. The parameter is removed once read; tokens in URLs
// end up in logs and histories, so clients that can send the header should.
func streamToken(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if r.URL.Path == "/v1/runs/stream" && r.Header.Get(echo.HeaderAuthorization) == "" {
			q := r.URL.Query()
			if tok := q.Get("access_token"); tok != "" {
				r.Header.Set(echo.HeaderAuthorization, "Bearer "+tok)
				q.Del("access_token")
				r.URL.RawQuery = q.Encode()
			}
		}
		return next(c)
	}
}
