package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/internal/helpers/memlimit"
	"github.com/stepgate/stepgate/internal/helpers/notify"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/runevents"
	"github.com/stepgate/stepgate/protocol"
)

// Live run events: see notify.Hub, which fans them out; this file writes them as
// server-sent events.
const (
	keepaliveInterval = 15 * time.Second
	streamWriteWait   = 30 * time.Second // a write blocked longer ends the stream
)

// encodeEvent is a stream's `event: run` frame of a run event.
func encodeEvent(run *journal.Run, ev *runevents.RunEvent) ([]byte, error) {
	data, err := json.Marshal(eventRun(run, ev))
	if err != nil {
		return nil, err
	}
	return append(append([]byte("event: run\ndata: "), data...), "\n\n"...), nil
}

// eventRun is the run as the event saw it: the event's status, counts and timing, with the
// rest of the run as loaded after the event. The output and error are the loaded ones
// only when the run still has the event's status, so an early event never carries a
// later outcome.
func eventRun(run *journal.Run, ev *runevents.RunEvent) protocol.Run {
	r := runToAPI(run, false)
	r.Status = protocol.RunStatus(ev.Status)
	r.Invocations, r.FailedInvocations, r.Recoveries = ev.Invocations, ev.FailedInvocations, ev.Recoveries
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

// StreamRuns streams the tenant's run events as server-sent events; see notify.Hub.
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
	c, err := s.stream.Subscribe(ctx, id.Tenant, function, run)
	if err != nil {
		release()
		return nil, err
	}
	// Should the response never be written, the stream still closes with the request.
	context.AfterFunc(ctx, func() {
		s.stream.Unsubscribe(c)
		release()
	})
	if srv, ok := ctx.Value(http.ServerContextKey).(*http.Server); ok {
		s.stream.EndOnShutdown(srv)
	}
	exp, _ := auth.ExpiryFrom(ctx)
	return runStream{ctx: ctx, hub: s.stream, c: c, expires: exp, release: release}, nil
}

// streamSlots takes a place among the live streams and long-polls (a run's result or
// value with ?wait) of the caller's tenant and subject, or answers a 429 naming the
// limit, with Retry-After. The place is held until release.
func (s *Server) streamSlots(id auth.Identity) (release func(), err error) {
	return takeSlots(s.tenantStreams, s.subjectStreams, id,
		"live streams open on this gateway", "long-polls with ?wait count", "close one first")
}

// syncStartSlots takes a place among the starts with ?wait of the caller's tenant and
// subject that wait for their runs' results, or answers a 429 naming the limit, with
// Retry-After. The place is held until release.
func (s *Server) syncStartSlots(id auth.Identity) (release func(), err error) {
	return takeSlots(s.tenantSyncStarts, s.subjectSyncStarts, id,
		"starts with ?wait waiting on this gateway", "", "start without wait, or once one is answered")
}

// heavyReadNames are the requests heavyRead counts, for its 429's detail.
const heavyReadNames = "exports, deploy checks, GET /v1/failures, GET /v1/events, GET /v1/runs with include_io"

// heavyRead takes a place among the heavy reads the caller's tenant and subject run at
// once on this gateway — a request whose answer may be megabytes (a run's export, a
// deploy check, the failures view, an event list, a run list with include_io) — and
// holds it until the request's context ends, which is after its answer is written. Past
// the limits it answers a 429 naming the limit, with Retry-After; while the gateway's
// live heap is near its memory limit (memlimit.Near), a 503 with Retry-After, so that
// new heavy work waits for memory rather than exhausting it.
func (s *Server) heavyRead(ctx context.Context) error {
	if live := memlimit.Live(); memlimit.Near(live, s.memoryLimit) {
		return &unavailableError{fmt.Sprintf("this gateway's memory is near its limit (%s live of %s; STEPGATE_MEMORY_LIMIT sets it): "+
			"it takes no new heavy read (%s) until it is lower; retry shortly",
			memlimit.FormatBytes(live), memlimit.FormatBytes(s.memoryLimit), heavyReadNames)}
	}
	release, err := takeSlots(s.tenantHeavyReads, s.subjectHeavyReads, identity(ctx),
		"heavy reads running on this gateway", heavyReadNames+"; STEPGATE_MAX_HEAVY_READS_PER_SUBJECT, …_PER_TENANT", "retry once one is answered")
	if err != nil {
		return err
	}
	context.AfterFunc(ctx, release)
	return nil
}

// takeSlots takes a place for id's tenant in tenant and for its subject in subject, or
// answers a 429 with Retry-After whose detail says how many of what (what, with note)
// the tenant or subject holds, and what to do then.
func takeSlots(tenant, subject *slots, id auth.Identity, what, note, then string) (release func(), err error) {
	if note != "" {
		note = " (" + note + ")"
	}
	releaseTenant := tenant.acquire(id.Tenant)
	if releaseTenant == nil {
		return nil, &busyError{fmt.Sprintf("tenant %q has %d %s, its limit%s: %s", id.Tenant, tenant.maxPerKey, what, note, then)}
	}
	releaseSubject := subject.acquire(id.Tenant + "\n" + id.Subject)
	if releaseSubject == nil {
		releaseTenant()
		return nil, &busyError{fmt.Sprintf("%s has %d %s, the limit per subject%s: %s", id.Subject, subject.maxPerKey, what, note, then)}
	}
	return func() { releaseSubject(); releaseTenant() }, nil
}

// openEventStream answers w with a server-sent event stream and returns how to send
// a frame: written and flushed within streamWriteWait. The first frame, sent here, sets
// EventSource's reconnection delay (2s) and sends the headers at once.
func openEventStream(w http.ResponseWriter) (send func(frame []byte) error, err error) {
	h := w.Header()
	h.Set(echo.HeaderContentType, "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // no proxy buffering (nginx)
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send = func(frame []byte) error {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteWait)) // not every writer has deadlines
		if _, err := w.Write(frame); err != nil {
			return err
		}
		return rc.Flush()
	}
	return send, send([]byte("retry: 2000\n\n"))
}

// expiry returns a channel told when the token that opened a stream expires
// at, never for a zero at, and how to stop its timer.
func expiry(at time.Time) (<-chan time.Time, func()) {
	if at.IsZero() {
		return nil, func() {}
	}
	t := time.NewTimer(time.Until(at))
	return t.C, func() { t.Stop() }
}

// runStream writes a stream until the client goes away, the server shuts down or the
// caller's token expires.
type runStream struct {
	ctx     context.Context
	hub     *notify.Hub
	c       *notify.Stream
	expires time.Time // zero: never
	release func()
}

func (st runStream) VisitStreamRunsResponse(w http.ResponseWriter) error {
	defer st.release()
	defer st.hub.Unsubscribe(st.c)
	send, err := openEventStream(w)
	if err != nil {
		return nil
	}
	keepalive := time.NewTicker(keepaliveInterval)
	defer keepalive.Stop()
	expired, stop := expiry(st.expires)
	defer stop()
	for {
		var err error
		select {
		case <-st.ctx.Done():
			return nil
		case <-st.c.Done():
			return nil
		case <-expired:
			// The token that opened the stream is no longer valid: the client signs in
			// again with a new one.
			_ = send([]byte("event: expired\ndata: {}\n\n"))
			return nil
		case frame := <-st.c.Events():
			err = send(frame)
		case <-st.c.Resync():
			// What is buffered predates the reload the client is about to make.
			for len(st.c.Events()) > 0 {
				<-st.c.Events()
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

// takesQueryToken reports whether path is a stream's: GET /v1/runs/stream or
// /v1/runs/{id}/streams/{key}.
func takesQueryToken(path string) bool {
	if path == "/v1/runs/stream" {
		return true
	}
	parts := strings.Split(strings.TrimPrefix(path, "/v1/runs/"), "/")
	return strings.HasPrefix(path, "/v1/runs/") && len(parts) == 3 && parts[1] == "streams"
}

// streamToken lets GET /v1/runs/stream (and a run's stream) take its token from the access_token query
// parameter when the request has no Authorization header, because a browser's
// EventSource cannot send headers. The parameter is removed once read; tokens in URLs
// end up in logs and histories, so clients that can send the header should.
func streamToken(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		if takesQueryToken(r.URL.Path) && r.Header.Get(echo.HeaderAuthorization) == "" {
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
