package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// SendMessage puts a message in the mailbox of a run of the caller's tenant, with the
// caller's identity (see invoker.Messages.Send).
func (s *Server) SendMessage(ctx context.Context, req server.SendMessageRequestObject) (server.SendMessageResponseObject, error) {
	if !validRunID(req.ID) {
		return server.SendMessage404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	}
	b := req.Body
	if err := checkName("message topic", b.Topic); err != nil {
		return nil, err
	}
	n := journal.NewMessage{RunID: req.ID, Topic: b.Topic}
	var err error
	if n.ID, n.Data, err = clientSent("message", b.ID, b.Data); err != nil {
		return nil, err
	}
	id := identity(ctx)
	n.Tenant, n.Identity = id.Tenant, id
	sent, err := s.inv.Messages().Send(ctx, s.tenantDB(ctx), n)
	if fe := (*journal.ResumeForbiddenError)(nil); errors.As(err, &fe) {
		return nil, &problemError{http.StatusForbidden, fe.Error()}
	}
	switch {
	case errors.Is(err, journal.ErrNotFound):
		return server.SendMessage404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	case errors.Is(err, journal.ErrFinished):
		return server.SendMessage409ApplicationProblemPlusJSONResponse{ConflictApplicationProblemPlusJSONResponse: conflict(
			fmt.Sprintf("run %s is already %s; a finished run takes no messages", req.ID, sent.Status))}, nil
	case errors.Is(err, journal.ErrMailboxFull):
		return server.SendMessage429ApplicationProblemPlusJSONResponse{TooManyRequestsApplicationProblemPlusJSONResponse: server.TooManyRequestsApplicationProblemPlusJSONResponse(
			problem(429, fmt.Sprintf("run %s already holds %d messages it has not received, the limit of a run's mailbox; send again once it has received some",
				req.ID, journal.MaxUnconsumedMessages)))}, nil
	case err != nil:
		return nil, err
	}
	m := sent.Message
	out := protocol.MessageReceipt{ID: m.ID, RunID: m.RunID, Topic: m.Topic, Consumed: m.ConsumedSeq != nil, SentAt: m.CreatedAt}
	if sent.Duplicate {
		out.Duplicate = new(true)
	}
	return server.SendMessage202JSONResponse(out), nil
}
