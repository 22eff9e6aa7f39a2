package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"

	"github.com/google/uuid"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/storable"
	"github.com/stepgate/stepgate/protocol"
)

// StartRunWithMessage starts the run of the caller's Idempotency-Key unless the tenant
// has it, and puts the message in its mailbox, in one transaction
// (invoker.Messages.StartWith). The message's id is the key, so a retry with the same
// input and message creates and delivers nothing again; another message under the key
// is a 409. The caller needs events:send besides the operation's runs:invoke, checked
// before anything is read or stored.
func (s *Server) StartRunWithMessage(ctx context.Context, req server.StartRunWithMessageRequestObject) (server.StartRunWithMessageResponseObject, error) {
	if s.draining.Load() {
		return nil, errDraining
	}
	id := identity(ctx)
	if !id.Has(access.PermissionEventsSend) {
		return nil, &problemError{http.StatusForbidden, fmt.Sprintf(
			"this operation needs the %s permission besides %s, as it sends a message; the token's roles (%s) do not grant it",
			access.PermissionEventsSend, access.PermissionRunsInvoke, access.RoleList(id.Roles))}
	}
	key := req.Params.IdempotencyKey
	// The key is the message's id: the form runs' messages use is not the caller's.
	if err := checkClientID("Idempotency-Key", key); err != nil {
		return nil, err
	}
	b := req.Body
	if err := checkName("message topic", b.Message.Topic); err != nil {
		return nil, err
	}
	input, data := json.RawMessage("null"), json.RawMessage("null")
	if b.Input != nil {
		input = json.RawMessage(*b.Input)
	}
	if b.Message.Data != nil {
		data = json.RawMessage(*b.Message.Data)
	}
	if err := storable.CheckJSON(input); err != nil {
		return nil, badRequest("input %v", err)
	}
	if err := storable.CheckJSON(data); err != nil {
		return nil, badRequest("message data %v", err)
	}
	n := journal.NewRun{ID: uuid.Must(uuid.NewV7()).String(), Tenant: id.Tenant, Function: req.Name, Input: input,
		Identity: id, IdempotencyKey: key}
	m := journal.NewMessage{ID: key, Topic: b.Message.Topic, Data: data, Tenant: id.Tenant, Identity: id}
	out, err := s.inv.Messages().StartWith(ctx, journal.ForTenant(s.api, id.Tenant), n, m)
	if fe := (*journal.ForbiddenError)(nil); errors.As(err, &fe) {
		return nil, &problemError{http.StatusForbidden, fmt.Sprintf(
			"function %s may be invoked only by the roles (%s) or admin; the token's roles (%s) include none of them",
			req.Name, strings.Join(fe.InvokeRoles, ", "), access.RoleList(id.Roles))}
	}
	if fe := (*journal.ResumeForbiddenError)(nil); errors.As(err, &fe) {
		return nil, &problemError{http.StatusForbidden, fe.Error()}
	}
	switch {
	case errors.Is(err, journal.ErrNotFound):
		return server.StartRunWithMessage404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: functionNotFound(req.Name)}, nil
	case errors.Is(err, invoker.ErrDebouncedStart):
		return nil, badRequest("function %s is debounced (config.debounce): its starts collapse into another start's run, so they cannot carry a message; start it, then send the message to its run", req.Name)
	case errors.Is(err, journal.ErrIdempotencyMismatch):
		return server.StartRunWithMessage409ApplicationProblemPlusJSONResponse{ConflictApplicationProblemPlusJSONResponse: conflict(
			fmt.Sprintf("idempotency key %q was used with a different input for function %s", key, req.Name))}, nil
	case errors.Is(err, journal.ErrFinished):
		return server.StartRunWithMessage409ApplicationProblemPlusJSONResponse{ConflictApplicationProblemPlusJSONResponse: conflict(fmt.Sprintf(
			"run %s, the run of idempotency key %q, is already %s; a finished run takes no messages, and the key names that run for good: use another key to start another run",
			out.Run.ID, key, out.Sent.Status))}, nil
	case errors.Is(err, journal.ErrMailboxFull):
		return server.StartRunWithMessage429ApplicationProblemPlusJSONResponse{BusyApplicationProblemPlusJSONResponse: server.BusyApplicationProblemPlusJSONResponse{
			Body: problem(http.StatusTooManyRequests, fmt.Sprintf(
				"run %s, the run of idempotency key %q, already holds %d messages it has not received, the limit of a run's mailbox; send again once it has received some",
				out.Run.ID, key, journal.MaxUnconsumedMessages)),
			Headers: server.BusyResponseHeaders{RetryAfter: new(1)}}}, nil
	case err != nil:
		return nil, err
	}
	sent := out.Sent.Message
	if out.Sent.Duplicate && (sent.Topic != m.Topic || !sameJSON(sent.Data, m.Data)) {
		// Nothing was stored: a duplicate's run existed already.
		return server.StartRunWithMessage409ApplicationProblemPlusJSONResponse{ConflictApplicationProblemPlusJSONResponse: conflict(fmt.Sprintf(
			"idempotency key %q was used with a different message (topic %q) for run %s; a retry sends the same message",
			key, sent.Topic, out.Run.ID))}, nil
	}
	receipt := protocol.MessageReceipt{ID: sent.ID, RunID: sent.RunID, Topic: sent.Topic, Consumed: sent.ConsumedSeq != nil, SentAt: sent.CreatedAt}
	if out.Sent.Duplicate {
		receipt.Duplicate = new(true)
	}
	return server.StartRunWithMessage202JSONResponse{
		Body:    protocol.StartedWithMessage{ID: out.Run.ID, Status: protocol.RunStatus(out.Sent.Status), Created: out.Created, Message: receipt},
		Headers: server.StartRunWithMessage202ResponseHeaders{Location: resultLocation(out.Run.ID)},
	}, nil
}

// sameJSON says whether a and b are the same JSON value (as Postgres stores it, one of
// them having gone through jsonb: numbers compared as numbers, objects' keys unordered).
func sameJSON(a, b json.RawMessage) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}
