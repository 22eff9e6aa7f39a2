package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/output"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

// What runs publish while they run: values (step.SetValue), journal entries of kind
// value, and streams (step.Stream), chunks in a table of their own. Readers wait on the
// process's listener (output.OutputChannel for writes, journal.NotifyChannel for the
// run's end), never by polling.

// MaxValueWait bounds a value's long-poll (GET /v1/runs/{id}/values/{key}?wait=).
const MaxValueWait = time.Minute

// streamPage is how many chunks a stream reader reads at once.
const streamPage = 100

func checkKey(what, key string) error {
	if err := names.CheckFunction(what, key); err != nil {
		return badRequest("%v", err)
	}
	return nil
}

func valueToAPI(v *output.Value) protocol.RunValue {
	return protocol.RunValue{Key: v.Key, Value: protocol.AnyJSON(v.Value), Version: v.Version, SetAt: v.SetAt}
}

func etag(version int) *string { return new(`"` + strconv.Itoa(version) + `"`) }

// ListRunValues lists the latest value of each key of a run of the caller's tenant.
func (s *Server) ListRunValues(ctx context.Context, req server.ListRunValuesRequestObject) (server.ListRunValuesResponseObject, error) {
	if !validRunID(req.ID) {
		return server.ListRunValues404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	}
	db := s.tenantDB(ctx)
	if _, err := journal.GetRun(ctx, db, db.Tenant(), req.ID); errors.Is(err, journal.ErrNotFound) {
		return server.ListRunValues404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	} else if err != nil {
		return nil, err
	}
	vs, err := output.ListValues(ctx, db, db.Tenant(), req.ID)
	if err != nil {
		return nil, err
	}
	out := protocol.RunValueList{Values: make([]protocol.RunValue, 0, len(vs))}
	for i := range vs {
		out.Values = append(out.Values, valueToAPI(&vs[i]))
	}
	return server.ListRunValues200JSONResponse(out), nil
}

// GetRunValue answers the latest value of a run's key, waiting up to wait for one newer
// than after (or If-None-Match), or for the run's end. A request that waits holds a
// place among the caller's live streams (streamSlots) until it is answered or its
// caller leaves.
func (s *Server) GetRunValue(ctx context.Context, req server.GetRunValueRequestObject) (server.GetRunValueResponseObject, error) {
	p := req.Params
	var wait time.Duration
	if p.Wait != nil && *p.Wait != "" {
		d, err := time.ParseDuration(*p.Wait)
		if err != nil || d < 0 {
			return nil, badRequest("wait %q is not a duration such as 30s", *p.Wait)
		}
		if d > MaxValueWait {
			return nil, badRequest("wait %s is longer than the maximum of %s", d, MaxValueWait)
		}
		wait = d
	}
	after := -1
	switch {
	case p.After != nil:
		if *p.After < 0 {
			return nil, badRequest("after %d is not a version", *p.After)
		}
		after = *p.After
	case p.IfNoneMatch != nil && *p.IfNoneMatch != "":
		tag := strings.Trim(strings.TrimPrefix(strings.TrimSpace(*p.IfNoneMatch), "W/"), `"`)
		n, err := strconv.Atoi(tag)
		if err != nil || n < 0 {
			return nil, badRequest("If-None-Match %q is not an ETag this API returned", *p.IfNoneMatch)
		}
		after = n
	}
	if err := checkKey("value key", req.Key); err != nil {
		return nil, err
	}
	notFound := func(detail string) server.GetRunValueResponseObject {
		return server.GetRunValue404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: notFound(detail)}
	}
	if !validRunID(req.ID) {
		return notFound(fmt.Sprintf("run %q does not exist", req.ID)), nil
	}
	db := s.tenantDB(ctx)
	var changes, ended <-chan struct{}
	var run *journal.Run
	var err error
	if wait > 0 {
		var watch *runWatch
		watch, run, err = s.watchRun(ctx, db, req.ID)
		if watch != nil {
			defer watch.close()
			changes, ended = watch.changes, watch.ended
		}
	} else {
		run, err = journal.GetRun(ctx, db, db.Tenant(), req.ID)
	}
	if errors.Is(err, journal.ErrNotFound) {
		return notFound(fmt.Sprintf("run %q does not exist", req.ID)), nil
	}
	if err != nil {
		return nil, err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		// The run's status is read before the value: a run seen finished has published
		// all it ever will.
		v, err := output.GetValue(ctx, db, db.Tenant(), req.ID, req.Key)
		if err != nil && !errors.Is(err, journal.ErrNotFound) {
			return nil, err
		}
		if v != nil && v.Version > after {
			return server.GetRunValue200JSONResponse{Body: valueToAPI(v), Headers: server.GetRunValue200ResponseHeaders{ETag: etag(v.Version)}}, nil
		}
		done := wait == 0 || run.Status.Terminal()
		if !done {
			select {
			case <-changes:
				continue
			case <-ended:
				if run, err = journal.GetRun(ctx, db, db.Tenant(), req.ID); err != nil {
					return nil, err
				}
				continue
			case <-timer.C:
			case <-ctx.Done():
				// The client left, or the gateway stops: answer what there is.
			}
		}
		if v == nil {
			return notFound(fmt.Sprintf("run %q has no value %q", req.ID, req.Key)), nil
		}
		return server.GetRunValue304Response{Headers: server.GetRunValue304ResponseHeaders{ETag: etag(v.Version)}}, nil
	}
}

func streamToAPI(st *output.Stream) protocol.RunStream {
	return protocol.RunStream{
		Key: st.Key, Length: st.Length, Bytes: int(st.Bytes), Closed: st.ClosedAt != nil,
		ClosedAt: st.ClosedAt, CreatedAt: &st.CreatedAt,
	}
}

// ListRunStreams lists the streams of a run of the caller's tenant.
func (s *Server) ListRunStreams(ctx context.Context, req server.ListRunStreamsRequestObject) (server.ListRunStreamsResponseObject, error) {
	if !validRunID(req.ID) {
		return server.ListRunStreams404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	}
	db := s.tenantDB(ctx)
	if _, err := journal.GetRun(ctx, db, db.Tenant(), req.ID); errors.Is(err, journal.ErrNotFound) {
		return server.ListRunStreams404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	} else if err != nil {
		return nil, err
	}
	sts, err := output.ListStreams(ctx, db, db.Tenant(), req.ID)
	if err != nil {
		return nil, err
	}
	out := protocol.RunStreamList{Streams: make([]protocol.RunStream, 0, len(sts))}
	for i := range sts {
		out.Streams = append(out.Streams, streamToAPI(&sts[i]))
	}
	return server.ListRunStreams200JSONResponse(out), nil
}

// ReadRunStream streams the chunks of a run's stream as server-sent events, from an
// offset, until the stream is closed or the run finishes.
func (s *Server) ReadRunStream(ctx context.Context, req server.ReadRunStreamRequestObject) (server.ReadRunStreamResponseObject, error) {
	if err := checkKey("stream key", req.Key); err != nil {
		return nil, err
	}
	offset := 0
	if o := req.Params.Offset; o != nil {
		if *o < 0 {
			return nil, badRequest("offset %d is negative", *o)
		}
		offset = *o
	}
	if last := req.Params.LastEventID; last != nil && *last != "" {
		n, err := strconv.Atoi(*last)
		if err != nil || n < 0 || n == math.MaxInt {
			return nil, badRequest("Last-Event-ID %q is not a chunk's id", *last)
		}
		offset = n + 1
	}
	if !validRunID(req.ID) {
		return server.ReadRunStream404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	}
	id := identity(ctx)
	db := journal.ForTenant(s.api, id.Tenant)
	watch, run, err := s.watchRun(ctx, db, req.ID)
	if errors.Is(err, journal.ErrNotFound) {
		return server.ReadRunStream404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	}
	if err != nil {
		return nil, err
	}
	changes, ended, closeAll := watch.changes, watch.ended, sync.OnceFunc(watch.close)
	// Should the response never be written, the subscriptions still end with the request.
	context.AfterFunc(ctx, closeAll)
	exp, _ := auth.ExpiryFrom(ctx)
	return &chunkStream{
		ctx: ctx, s: s, db: db, run: run, key: req.Key, offset: offset,
		changes: changes, ended: ended, shutdown: s.shutdownOf(ctx), expires: exp, close: closeAll,
	}, nil
}

// chunkStream writes a run's stream as server-sent events.
type chunkStream struct {
	ctx            context.Context
	s              *Server
	db             *journal.TenantDB
	run            *journal.Run
	key            string
	offset         int
	changes, ended <-chan struct{}
	shutdown       <-chan struct{}
	expires        time.Time // zero: never
	close          func()
}

func (st *chunkStream) VisitReadRunStreamResponse(w http.ResponseWriter) error {
	defer st.close()
	send, err := openEventStream(w)
	if err != nil {
		return nil
	}
	keepalive := time.NewTicker(keepaliveInterval)
	defer keepalive.Stop()
	expired, stop := expiry(st.expires)
	defer stop()
	for {
		more, end, err := st.step(send)
		if err != nil {
			if st.ctx.Err() == nil {
				st.s.log.WarnContext(st.ctx, "stream read ended", slog.String("run_id", st.run.ID), slog.String("function", st.run.Function),
					slog.String("tenant", st.run.Tenant), slog.String("key", st.key), slog.Any("error", err))
			}
			return nil // the client reconnects with its Last-Event-ID
		}
		if end != nil {
			_ = send(fmt.Appendf(nil, "event: end\ndata: {\"length\":%d,\"reason\":%q}\n\n", end.length, end.reason))
			return nil
		}
		if more {
			continue
		}
		select {
		case <-st.ctx.Done():
			return nil
		case <-st.shutdown:
			return nil
		case <-expired:
			_ = send([]byte("event: expired\ndata: {}\n\n"))
			return nil
		case <-st.changes:
		case <-st.ended:
			run, err := journal.GetRun(st.ctx, st.db, st.db.Tenant(), st.run.ID)
			if err != nil {
				return nil
			}
			st.run = run
		case <-keepalive.C:
			if send([]byte(": keepalive\n\n")) != nil {
				return nil
			}
		}
	}
}

// streamEnd is why a stream ended (closed, run_finished) and its length then.
type streamEnd struct {
	reason string
	length int
}

// step sends the chunks from st.offset on, a page at a time: more says another page may
// follow at once, end that the stream has ended.
func (st *chunkStream) step(send func([]byte) error) (more bool, end *streamEnd, err error) {
	// st.run was read before the chunks: once it is finished, these are all of them.
	chunks, err := output.ReadChunks(st.ctx, st.db, st.db.Tenant(), st.run.ID, st.key, st.offset, streamPage)
	if err != nil {
		return false, nil, err
	}
	var frame []byte
	for _, c := range chunks {
		frame = fmt.Appendf(frame[:0], "id: %d\nevent: chunk\ndata: %s\n\n", c.Offset, c.Data)
		if err := send(frame); err != nil {
			return false, nil, err
		}
		st.offset = c.Offset + 1
	}
	if len(chunks) == streamPage {
		return true, nil, nil
	}
	stream, err := output.GetStream(st.ctx, st.db, st.db.Tenant(), st.run.ID, st.key)
	if err != nil && !errors.Is(err, journal.ErrNotFound) {
		return false, nil, err
	}
	length := 0
	if stream != nil {
		length = stream.Length
	}
	switch {
	case stream != nil && stream.ClosedAt != nil && st.offset < length:
		return true, nil, nil // chunks committed with the close since the read
	case stream != nil && stream.ClosedAt != nil:
		return false, &streamEnd{"closed", length}, nil
	case st.run.Status.Terminal():
		return false, &streamEnd{"run_finished", length}, nil
	}
	return false, nil, nil
}

// CheckpointStream appends chunks to a stream of the run whose invocation token the
// request carries.
func (s *Server) CheckpointStream(ctx context.Context, req server.CheckpointStreamRequestObject) (server.CheckpointStreamResponseObject, error) {
	claim, _ := ctx.Value(invocationKey{}).(invocationClaim)
	if claim.runID != req.ID {
		return server.CheckpointStream401ApplicationProblemPlusJSONResponse{UnauthorizedApplicationProblemPlusJSONResponse: server.UnauthorizedApplicationProblemPlusJSONResponse(
			problem(http.StatusUnauthorized, "invocation token is for another run"))}, nil
	}
	w, err := s.inv.Checkpoints().StreamWriteOf(*req.Body)
	var st *output.Stream
	if err == nil {
		st, err = s.inv.Checkpoints().WriteStream(ctx, req.ID, claim.invocation, w)
	}
	if err != nil {
		r := invoker.StreamRefusal(err)
		switch {
		case r == nil:
			return nil, err
		case r.Status == http.StatusBadRequest:
			return nil, badRequest("%s", r.Detail)
		}
		return server.CheckpointStream409ApplicationProblemPlusJSONResponse{ConflictApplicationProblemPlusJSONResponse: server.ConflictApplicationProblemPlusJSONResponse(r.Problem())}, nil
	}
	return server.CheckpointStream200JSONResponse{Key: st.Key, Length: st.Length, Closed: st.ClosedAt != nil}, nil
}

// CheckpointCurrent claims the run for the process that sent the nonce, when the
// invocation whose token the request carries owns the run (see invoker.Checkpoints.Claim):
// 200 to the first nonce asked for the invocation and to it again, 409 superseded to any
// other, 400 to a nonce that is not 32 lowercase hex digits.
func (s *Server) CheckpointCurrent(ctx context.Context, req server.CheckpointCurrentRequestObject) (server.CheckpointCurrentResponseObject, error) {
	claim, _ := ctx.Value(invocationKey{}).(invocationClaim)
	if claim.runID != req.ID {
		return server.CheckpointCurrent401ApplicationProblemPlusJSONResponse{UnauthorizedApplicationProblemPlusJSONResponse: server.UnauthorizedApplicationProblemPlusJSONResponse(
			problem(http.StatusUnauthorized, "invocation token is for another run"))}, nil
	}
	var err error
	if req.Body == nil {
		err = invoker.CheckNonce("")
	} else if err = invoker.CheckNonce(req.Body.Nonce); err == nil {
		err = s.inv.Checkpoints().Claim(ctx, req.ID, claim.invocation, req.Body.Nonce)
	}
	if err != nil {
		r := invoker.ClaimRefusal(err)
		switch {
		case r == nil:
			return nil, err
		case r.Status == http.StatusBadRequest:
			return nil, badRequest("%s", r.Detail)
		}
		return server.CheckpointCurrent409ApplicationProblemPlusJSONResponse{ConflictApplicationProblemPlusJSONResponse: server.ConflictApplicationProblemPlusJSONResponse(r.Problem())}, nil
	}
	return server.CheckpointCurrent200JSONResponse{RunID: req.ID}, nil
}

// shutdownOf returns a channel closed when the http.Server serving ctx's request shuts
// down (nil outside one), so that long requests end rather than hold up its graceful
// shutdown.
func (s *Server) shutdownOf(ctx context.Context) <-chan struct{} {
	srv, ok := ctx.Value(http.ServerContextKey).(*http.Server)
	if !ok {
		return nil
	}
	s.shutdownMu.Lock()
	defer s.shutdownMu.Unlock()
	ch := s.shutdowns[srv]
	if ch == nil {
		ch = make(chan struct{})
		s.shutdowns[srv] = ch
		srv.RegisterOnShutdown(func() { close(ch) })
	}
	return ch
}

// runWatch is a reader's watch on a run: a place among its caller's live streams
// (streamSlots), told each time the run may have written an output (a value, a stream
// chunk, a reply: changes) or ended (ended), on any gateway. close ends it.
type runWatch struct {
	changes, ended <-chan struct{}
	close          func()
}

// watchRun takes a place among the caller's live streams, subscribes to run runID's
// writes and end, then attaches to the run (journal.Attach), so that what happens after
// the attach is announced, and returns the run as it then is. journal.ErrNotFound for a
// run db's tenant does not have; on any error nothing is held.
func (s *Server) watchRun(ctx context.Context, db *journal.TenantDB, runID string) (*runWatch, *journal.Run, error) {
	release, err := s.streamSlots(identity(ctx))
	if err != nil {
		return nil, nil, err
	}
	changes, unsubscribeOutput := s.inv.Listener().SubscribeOutput(runID)
	ended, unsubscribeEnd := s.inv.Listener().Subscribe(runID)
	w := &runWatch{changes: changes, ended: ended, close: func() {
		unsubscribeOutput()
		unsubscribeEnd()
		release()
	}}
	run, err := s.inv.AwaitRun(ctx, db, runID, nil, time.Time{})
	if err != nil {
		w.close()
		return nil, nil, err
	}
	return w, run, nil
}
