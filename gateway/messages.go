package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/uuid"

	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// SendMessage puts a message in the mailbox of a run of the caller's tenant, with the
// caller's identity (see invoker.SendMessage).
func (s *Server) SendMessage(ctx context.Context, req server.SendMessageRequestObject) (server.SendMessageResponseObject, error) {
	if !validRunID(req.ID) {
		return server.SendMessage404ApplicationProblemPlusJSONResponse{NotFoundApplicationProblemPlusJSONResponse: runNotFound(req.ID)}, nil
	}
	b := req.Body
	if err := checkName("message topic", b.Topic); err != nil {
		return nil, err
	}
	n := journal.NewMessage{RunID: req.ID, Topic: b.Topic}
	if b.ID != nil {
		if err := checkClientID("message id", *b.ID); err != nil {
			return nil, err
		}
		n.ID = *b.ID
	} else {
		n.ID = uuid.Must(uuid.NewV7()).String()
	}
	if b.Data != nil {
		n.Data = json.RawMessage(*b.Data)
		if err := journal.CheckJSON(n.Data); err != nil {
			return nil, badRequest("data %v", err)
		}
	}
	id := identity(ctx)
	n.Tenant, n.Identity = id.Tenant, id
	sent, err := s.inv.SendMessage(ctx, s.tenantDB(ctx), n)
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

// sendOutput is the output of a journal entry of kind send.
type sendOutput struct {
	RunID string          `json:"run_id"`
	Topic string          `json:"topic"`
	Data  json.RawMessage `json:"data"`
	ID    string          `json:"id"`
}

// checkpointSend checks a send entry of the invocation that owns runID, and journals it
// and sends its message (invoker.CheckpointSend). The message's id defaults to
// "<run id>:<seq>" (see checkRunSentID). It returns the error journaled for a message that could not be sent.
func (s *Server) checkpointSend(ctx context.Context, runID string, invocation int, e protocol.JournalEntry) (*protocol.ErrorInfo, error) {
	var out sendOutput
	if e.Output == nil || json.Unmarshal(*e.Output, &out) != nil {
		return nil, badRequest("a send entry's output is the message: {\"run_id\", \"topic\", \"data\", \"id\"}")
	}
	if e.Error != nil {
		return nil, badRequest("a send entry has no error; the gateway journals one when the message cannot be sent")
	}
	if !validRunID(out.RunID) {
		return nil, badRequest("a send entry's run_id %q is not a run id (a UUID)", out.RunID)
	}
	if out.Topic == "" {
		out.Topic = e.Name
	}
	if err := checkName("message topic", out.Topic); err != nil {
		return nil, err
	}
	if out.Topic != e.Name {
		return nil, badRequest("a send entry is named after its topic: %q, not %q", out.Topic, e.Name)
	}
	if err := checkRunSentID("message id", &out.ID, runID, e.Seq); err != nil {
		return nil, err
	}
	if len(out.Data) == 0 {
		out.Data = json.RawMessage("null")
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return nil, badRequest("a send entry's data is not valid JSON: %v", err)
	}
	output := protocol.AnyJSON(raw)
	e.Output = &output
	return s.inv.CheckpointSend(ctx, runID, invocation, e,
		invoker.SentMessage{RunID: out.RunID, ID: out.ID, Topic: out.Topic, Data: out.Data})
}
