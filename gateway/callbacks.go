package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/storable"
	"github.com/stepgate/stepgate/protocol"
)

// maxTokenBytes bounds what the callback routes look up: a token is 43 bytes.
const maxTokenBytes = 256

// ResolveCallback resolves the callback of the token in the path with the body as its
// data. It takes no bearer token: the callback's token is the credential.
func (s *Server) ResolveCallback(ctx context.Context, req server.ResolveCallbackRequestObject) (server.ResolveCallbackResponseObject, error) {
	res, err := s.resolution(req.Body)
	if err != nil {
		return nil, err
	}
	out, err := s.byToken(ctx, req.Token, res)
	if err != nil {
		return nil, err
	}
	return server.ResolveCallback200JSONResponse(*out), nil
}

// RejectCallback rejects the callback of the token in the path with the body's error.
func (s *Server) RejectCallback(ctx context.Context, req server.RejectCallbackRequestObject) (server.RejectCallbackResponseObject, error) {
	res, err := s.rejection(req.Body)
	if err != nil {
		return nil, err
	}
	out, err := s.byToken(ctx, req.Token, res)
	if err != nil {
		return nil, err
	}
	return server.RejectCallback200JSONResponse(*out), nil
}

// ResolveRunCallback resolves a run's callback by its name, as the caller.
func (s *Server) ResolveRunCallback(ctx context.Context, req server.ResolveRunCallbackRequestObject) (server.ResolveRunCallbackResponseObject, error) {
	res, err := s.resolution(req.Body)
	if err != nil {
		return nil, err
	}
	out, err := s.byName(ctx, req.ID, req.Name, res)
	if err != nil {
		return nil, err
	}
	return server.ResolveRunCallback200JSONResponse(*out), nil
}

// RejectRunCallback rejects a run's callback by its name, as the caller.
func (s *Server) RejectRunCallback(ctx context.Context, req server.RejectRunCallbackRequestObject) (server.RejectRunCallbackResponseObject, error) {
	res, err := s.rejection(req.Body)
	if err != nil {
		return nil, err
	}
	out, err := s.byName(ctx, req.ID, req.Name, res)
	if err != nil {
		return nil, err
	}
	return server.RejectRunCallback200JSONResponse(*out), nil
}

// resolution checks a resolution's data (absent is null): within the bound of a journal
// entry's output (a 413), and storable.
func (s *Server) resolution(body *json.RawMessage) (journal.Resolution, error) {
	data := json.RawMessage("null")
	if body != nil && len(*body) > 0 {
		data = *body
	}
	if n := s.inv.Limits().MaxOutputBytes; len(data) > n {
		return journal.Resolution{}, &problemError{http.StatusRequestEntityTooLarge, fmt.Sprintf(
			"the callback's data is %d bytes, more than the limit of %d (STEPGATE_MAX_OUTPUT_BYTES)", len(data), n)}
	}
	if err := storable.CheckJSON(data); err != nil {
		return journal.Resolution{}, badRequest("request body %v", err)
	}
	return journal.Resolution{Data: data}, nil
}

// rejection checks a rejection: a message, and a type that is a name (default
// "rejected").
func (s *Server) rejection(body *protocol.CallbackRejection) (journal.Resolution, error) {
	if body == nil || body.Message == "" {
		return journal.Resolution{}, badRequest(`a rejection needs a message: {"type"?, "message"}`)
	}
	typ := cmp.Or(ptrValue(body.Type), invoker.DefaultRejection)
	if err := checkName("type", typ); err != nil {
		return journal.Resolution{}, err
	}
	if n := s.inv.Limits().MaxOutputBytes; len(body.Message) > n {
		return journal.Resolution{}, &problemError{http.StatusRequestEntityTooLarge, fmt.Sprintf(
			"the rejection's message is %d bytes, more than the limit of %d (STEPGATE_MAX_OUTPUT_BYTES)", len(body.Message), n)}
	}
	for field, v := range map[string]string{"type": typ, "message": body.Message} {
		if err := checkText(field, v); err != nil {
			return journal.Resolution{}, err
		}
	}
	return journal.Resolution{Error: &journal.ErrorInfo{Type: typ, Message: body.Message}}, nil
}

func ptrValue[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// byToken resolves the callback of token as its holder.
func (s *Server) byToken(ctx context.Context, token string, res journal.Resolution) (*protocol.CallbackResolution, error) {
	if token == "" || len(token) > maxTokenBytes {
		return nil, callbackNotFound()
	}
	cb, err := s.inv.Callbacks().Resolve(ctx, nil, invoker.CallbackRef{Token: token}, res)
	if err != nil {
		return nil, callbackError(err, false)
	}
	s.log.InfoContext(ctx, "callback resolved", "run_id", cb.RunID, "function", cb.Function, "tenant", cb.Tenant,
		"seq", cb.Seq, "state", cb.State, "resolver", journal.ResolverToken)
	out := callbackToAPI(cb)
	out.RunID = nil // the token's holder learns nothing of the run but what it resolved
	return out, nil
}

// byName resolves a run's callback named name as the caller, in the caller's tenant: a
// caller whom the run's revision does not let resume it (invoke_roles, resume_roles)
// gets a 403 naming both lists and the caller's roles.
func (s *Server) byName(ctx context.Context, runID, name string, res journal.Resolution) (*protocol.CallbackResolution, error) {
	if !validRunID(runID) {
		return nil, &problemError{http.StatusNotFound, fmt.Sprintf("run %q does not exist", runID)}
	}
	if err := checkName("callback name", name); err != nil {
		return nil, err
	}
	id := identity(ctx)
	res.By = &id
	cb, err := s.inv.Callbacks().Resolve(ctx, s.tenantDB(ctx), invoker.CallbackRef{RunID: runID, Name: name}, res)
	if fe := (*journal.ResumeForbiddenError)(nil); errors.As(err, &fe) {
		return nil, &problemError{http.StatusForbidden, fe.Error()}
	}
	if errors.Is(err, journal.ErrNotFound) {
		return nil, &problemError{http.StatusNotFound, fmt.Sprintf("run %s has no callback named %q (or does not exist)", runID, name)}
	}
	if err != nil {
		return nil, callbackError(err, true)
	}
	s.log.InfoContext(ctx, "callback resolved", "run_id", cb.RunID, "function", cb.Function, "tenant", id.Tenant,
		"seq", cb.Seq, "state", cb.State, "by", id.Subject)
	return callbackToAPI(cb), nil
}

func callbackNotFound() error {
	return &problemError{http.StatusNotFound, "no callback has this token"}
}

// callbackError maps a resolution's expected errors to their problems. A closed
// callback's 409 names its run and who resolved it only when detailed (a caller of the
// run's own tenant); to a token's holder it says only why the callback is closed.
func callbackError(err error, detailed bool) error {
	var closed *journal.ClosedCallbackError
	switch {
	case errors.Is(err, journal.ErrNotFound):
		return callbackNotFound()
	case errors.As(err, &closed) && detailed:
		return &problemError{http.StatusConflict, closed.Reason}
	case errors.As(err, &closed):
		return &problemError{http.StatusConflict, closed.Public}
	}
	return err
}

func callbackToAPI(cb *journal.Callback) *protocol.CallbackResolution {
	out := &protocol.CallbackResolution{
		RunID: &cb.RunID, Name: cb.Name, Seq: cb.Seq, State: protocol.CallbackResolutionState(cb.State),
		Resolver: protocol.CallbackResolutionResolver(ptrValue(cb.Resolver)), ResolvedBy: cb.ResolvedBy,
		Resumed: cb.Woken,
	}
	if cb.ResolvedAt != nil {
		out.ResolvedAt = *cb.ResolvedAt
	}
	return out
}

// ListRunCallbacks lists a run's open callbacks with their URLs in clear, for a caller
// who may resolve them by name anyway (runs:manage, and a role the run's revision lets
// resume it: else a 403, as byName's) to hand one on; other reads show the tokens
// masked. Another tenant's run is a 404.
func (s *Server) ListRunCallbacks(ctx context.Context, req server.ListRunCallbacksRequestObject) (server.ListRunCallbacksResponseObject, error) {
	if !validRunID(req.ID) {
		return server.ListRunCallbacks404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	}
	db := s.tenantDB(ctx)
	cbs, more, err := s.inv.Callbacks().Open(ctx, db, req.ID, identity(ctx))
	if fe := (*journal.ResumeForbiddenError)(nil); errors.As(err, &fe) {
		return nil, &problemError{http.StatusForbidden, fe.Error()}
	}
	if errors.Is(err, journal.ErrNotFound) {
		return server.ListRunCallbacks404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: s.runGone(ctx, db, req.ID)}, nil
	}
	if err != nil {
		return nil, err
	}
	out := protocol.RunCallbackList{RunID: req.ID, Callbacks: make([]protocol.RunCallback, 0, len(cbs)), More: more}
	for _, cb := range cbs {
		out.Callbacks = append(out.Callbacks, protocol.RunCallback{Seq: cb.Seq, Name: cb.Name, URL: cb.URL, ExpiresAt: cb.ExpiresAt, Awaited: &cb.Awaited})
	}
	return server.ListRunCallbacks200JSONResponse(out), nil
}
