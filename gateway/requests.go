package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/request"
	"github.com/stepgate/stepgate/protocol"
)

// Requests (POST /v1/runs/{id}/requests): a client sends a run a request and waits for
// its reply. A request is a message on the topic journal.RequestTopic(name), which the
// run takes with a receive, and answers with a reply checkpoint; the client's wait is
// woken by the run's output notification (the reply) or its end, never by polling.

// MaxRequestWait bounds how long a request waits for its reply (?wait= of
// POST /v1/runs/{id}/requests and GET /v1/runs/{id}/requests/{rid}).
const MaxRequestWait = time.Minute

// parseRequestWait reads a request's ?wait=: 0 when absent.
func parseRequestWait(w *string) (time.Duration, error) {
	if w == nil || *w == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(*w)
	if err != nil || d < 0 {
		return 0, badRequest("wait %q is not a duration such as 10s", *w)
	}
	if d > MaxRequestWait {
		return 0, badRequest("wait %s is longer than the maximum of %s", d, MaxRequestWait)
	}
	return d, nil
}

// SendRequest sends a request to a run of the caller's tenant, with the caller's
// identity (invoker.Messages.Send, as a request), and waits up to ?wait= for the run's reply
// (awaitRequest). A request that waits holds a place among the caller's live streams
// (streamSlots) until it is answered or its caller leaves.
func (s *Server) SendRequest(ctx context.Context, req server.SendRequestRequestObject) (server.SendRequestResponseObject, error) {
	wait, err := parseRequestWait(req.Params.Wait)
	if err != nil {
		return nil, err
	}
	if !validRunID(req.ID) {
		return server.SendRequest404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	}
	b := req.Body
	if err := checkName("request name", b.Name); err != nil {
		return nil, err
	}
	n := journal.NewMessage{RunID: req.ID, Topic: journal.RequestTopic(b.Name)}
	if n.ID, n.Data, err = clientSent("request", b.ID, b.Data); err != nil {
		return nil, err
	}
	id := identity(ctx)
	n.Tenant, n.Identity = id.Tenant, id
	db := s.tenantDB(ctx)
	var w *requestWaiter
	if wait > 0 {
		// Subscribed and attached before the request is sent: its reply is announced.
		if w, err = s.waitRequest(ctx, db, req.ID, wait); errors.Is(err, journal.ErrNotFound) {
			return server.SendRequest404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
		} else if err != nil {
			return nil, err
		}
		defer w.close()
	}
	n.Request = true
	sent, err := s.inv.Messages().Send(ctx, db, n)
	if fe := (*journal.ResumeForbiddenError)(nil); errors.As(err, &fe) {
		return nil, &problemError{http.StatusForbidden, strings.Replace(fe.Error(), "takes messages", "takes messages and requests", 1)}
	}
	tooMany := func(detail string) server.SendRequestResponseObject {
		return server.SendRequest429ApplicationProblemPlusJSONResponse{TooManyRequestsApplicationProblemPlusJSONResponse: server.TooManyRequestsApplicationProblemPlusJSONResponse(
			problem(http.StatusTooManyRequests, detail))}
	}
	switch {
	case errors.Is(err, journal.ErrNotFound):
		return server.SendRequest404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	case errors.Is(err, journal.ErrFinished):
		return server.SendRequest409ApplicationProblemPlusJSONResponse{ConflictApplicationProblemPlusJSONResponse: conflict(
			fmt.Sprintf("run %s is already %s; a finished run takes no requests", req.ID, sent.Status))}, nil
	case errors.Is(err, journal.ErrIDTaken):
		return server.SendRequest409ApplicationProblemPlusJSONResponse{ConflictApplicationProblemPlusJSONResponse: conflict(
			strings.TrimPrefix(err.Error(), journal.ErrIDTaken.Error()+": "))}, nil
	case errors.Is(err, journal.ErrTooManyRequests):
		return tooMany(fmt.Sprintf("run %s has %d requests not replied to, the limit of a run; send again once it has replied to some",
			req.ID, journal.MaxPendingRequests)), nil
	case errors.Is(err, journal.ErrMailboxFull):
		return tooMany(fmt.Sprintf("run %s already holds %d messages it has not received, the limit of a run's mailbox; send again once it has received some",
			req.ID, journal.MaxUnconsumedMessages)), nil
	case err != nil:
		return nil, err
	}
	r, err := s.awaitRequest(ctx, db, w, req.ID, sent.Message.ID)
	if err != nil {
		return nil, err
	}
	out := requestToAPI(r)
	if sent.Duplicate {
		out.Duplicate = new(true)
	}
	if r.Status == request.RequestPending {
		return server.SendRequest202JSONResponse{Body: out, Headers: server.SendRequest202ResponseHeaders{Location: requestLocation(r)}}, nil
	}
	return server.SendRequest200JSONResponse(out), nil
}

// GetRequest answers a request of a run of the caller's tenant, waiting up to ?wait= for
// its reply (awaitRequest), holding a place among the caller's live streams meanwhile.
func (s *Server) GetRequest(ctx context.Context, req server.GetRequestRequestObject) (server.GetRequestResponseObject, error) {
	wait, err := parseRequestWait(req.Params.Wait)
	if err != nil {
		return nil, err
	}
	notFound := func(detail string) server.GetRequestResponseObject {
		return server.GetRequest404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: notFound(detail)}
	}
	if !validRunID(req.ID) {
		return notFound(fmt.Sprintf("run %q does not exist", req.ID)), nil
	}
	db := s.tenantDB(ctx)
	var w *requestWaiter
	if wait > 0 {
		if w, err = s.waitRequest(ctx, db, req.ID, wait); errors.Is(err, journal.ErrNotFound) {
			return notFound(fmt.Sprintf("run %q does not exist", req.ID)), nil
		} else if err != nil {
			return nil, err
		}
		defer w.close()
	}
	r, err := s.awaitRequest(ctx, db, w, req.ID, req.Rid)
	if errors.Is(err, journal.ErrNotFound) {
		return notFound(fmt.Sprintf("run %q has no request %q", req.ID, req.Rid)), nil
	}
	if err != nil {
		return nil, err
	}
	if r.Status == request.RequestPending {
		return server.GetRequest202JSONResponse{Body: requestToAPI(r), Headers: server.GetRequest202ResponseHeaders{Location: requestLocation(r)}}, nil
	}
	return server.GetRequest200JSONResponse(requestToAPI(r)), nil
}

// ListRequests lists the requests of a run of the caller's tenant with their status,
// newest first, a page at a time.
func (s *Server) ListRequests(ctx context.Context, req server.ListRequestsRequestObject) (server.ListRequestsResponseObject, error) {
	p := req.Params
	limit := 0
	if p.Limit != nil {
		if *p.Limit < 1 || *p.Limit > 500 {
			return nil, badRequest("limit %d is not between 1 and 500", *p.Limit)
		}
		limit = *p.Limit
	}
	var before int64
	if p.Cursor != nil && *p.Cursor != "" {
		n, err := strconv.ParseInt(*p.Cursor, 10, 64)
		if err != nil || n < 1 {
			return nil, badRequest("cursor is not one this API returned")
		}
		before = n
	}
	if !validRunID(req.ID) {
		return server.ListRequests404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	}
	db := s.tenantDB(ctx)
	if _, err := journal.GetRun(ctx, db, db.Tenant(), req.ID); errors.Is(err, journal.ErrNotFound) {
		return server.ListRequests404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	} else if err != nil {
		return nil, err
	}
	rs, next, err := request.ListRequests(ctx, db, db.Tenant(), req.ID, limit, before)
	if err != nil {
		return nil, err
	}
	out := protocol.RunRequestPage{Requests: make([]protocol.RunRequest, 0, len(rs))}
	for i := range rs {
		out.Requests = append(out.Requests, requestToAPI(&rs[i]))
	}
	if next > 0 {
		out.NextCursor = new(strconv.FormatInt(next, 10))
	}
	return server.ListRequests200JSONResponse(out), nil
}

// requestWaiter is a request's wait for a reply: a watch on its run (a reply is an
// output of the run), until deadline.
type requestWaiter struct {
	*runWatch
	deadline *time.Timer
}

// waitRequest watches run runID (watchRun) for a wait of up to wait; journal.ErrNotFound
// for a run the tenant does not have.
func (s *Server) waitRequest(ctx context.Context, db *journal.TenantDB, runID string, wait time.Duration) (*requestWaiter, error) {
	watch, _, err := s.watchRun(ctx, db, runID)
	if err != nil {
		return nil, err
	}
	w := &requestWaiter{runWatch: watch, deadline: time.NewTimer(wait)}
	unwatch := watch.close
	w.close = func() {
		w.deadline.Stop()
		unwatch()
	}
	return w, nil
}

// awaitRequest reads a request of runID until it is no longer pending, waking on w (nil:
// read once), or until w's deadline passes or the caller leaves; journal.ErrNotFound
// when the run has no such request. Each read takes the request and the run's status in
// one statement, so a run seen finished has journaled every reply it ever will.
func (s *Server) awaitRequest(ctx context.Context, db *journal.TenantDB, w *requestWaiter, runID, id string) (*request.Request, error) {
	for {
		r, err := request.RequestOf(ctx, db, db.Tenant(), runID, id)
		if err != nil || r.Status != request.RequestPending || w == nil {
			return r, err
		}
		select {
		case <-w.changes:
		case <-w.ended:
		case <-w.deadline.C:
			return r, nil
		case <-ctx.Done():
			// The caller left, or the gateway stops: answer what there is.
			return r, nil
		}
	}
}

// requestLocation is where a pending request is read again.
func requestLocation(r *request.Request) *string {
	return new("/v1/runs/" + r.RunID + "/requests/" + url.PathEscape(r.ID))
}

func requestToAPI(r *request.Request) protocol.RunRequest {
	out := protocol.RunRequest{
		ID: r.ID, RunID: r.RunID, Name: r.Name, Status: protocol.RunRequestStatus(r.Status), Data: rawPtr(r.Data),
		Received: r.ReceivedSeq != nil, ReceivedSeq: r.ReceivedSeq, Reply: rawPtr(r.Reply), Error: errorToAPI(r.Error),
		ReplySeq: r.ReplySeq, SentAt: r.SentAt, RepliedAt: r.RepliedAt,
	}
	return out
}
