// Package request reads the requests sent to a run (its messages on the topics
// journal.RequestTopic makes) and what became of each: pending, replied (journal.Reply),
// or failed when the run ended without replying.
package request

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// ErrorTypeNoReply is the error of a request whose run ended without replying to it.
const ErrorTypeNoReply = "no_reply"

// RequestStatus is what became of a request.
type RequestStatus string

// The statuses of a request.
const (
	RequestPending RequestStatus = "pending" // the run has not replied and has not ended
	RequestReplied RequestStatus = "replied" // the run journaled a reply
	RequestFailed  RequestStatus = "failed"  // the run ended without replying (Error: ErrorTypeNoReply)
)

// Request is a request to a run and what became of it, read in one statement.
type Request struct {
	RunID  string
	ID     string
	Name   string
	Data   json.RawMessage
	SentAt time.Time
	// ReceivedSeq is the seq of the run's receive that took the request; nil while it
	// waits in the mailbox.
	ReceivedSeq *int
	Status      RequestStatus
	// Reply is the reply's output; Error an error reply, or for a failed request why.
	Reply     json.RawMessage
	Error     *journal.ErrorInfo
	ReplySeq  *int
	RepliedAt *time.Time
	n         int64
}

// requestOf is the request a row of RequestOfRun holds.
func requestOf(runID string, r dbsqlc.RequestOfRunRow) (*Request, error) {
	q := &Request{RunID: runID, ID: r.ID, Name: strings.TrimPrefix(r.Topic, journal.RequestTopic("")), Data: r.Data,
		SentAt: r.CreatedAt, Status: RequestPending, n: r.N}
	if r.ConsumedSeq != nil {
		seq := int(*r.ConsumedSeq)
		q.ReceivedSeq = &seq
	}
	switch {
	case r.ReplySeq != 0:
		seq, at := int(r.ReplySeq), r.RepliedAt
		q.Status, q.ReplySeq, q.RepliedAt, q.Reply = RequestReplied, &seq, &at, r.Reply
		if len(r.ReplyError) > 0 && string(r.ReplyError) != "null" {
			q.Error = &journal.ErrorInfo{}
			if err := json.Unmarshal(r.ReplyError, q.Error); err != nil {
				return nil, fmt.Errorf("decode reply %d of run %s: %w", seq, runID, err)
			}
		}
	case journal.Status(r.RunStatus).Terminal():
		q.Status = RequestFailed
		q.Error = &journal.ErrorInfo{Type: ErrorTypeNoReply, Message: fmt.Sprintf(
			"run %s is %s: it ended without replying to request %q", runID, r.RunStatus, r.ID)}
	}
	return q, nil
}

// RequestOf returns a request of a run of the tenant, or journal.ErrNotFound (no such run or
// request in the tenant).
func RequestOf(ctx context.Context, db journal.DB, tenant, runID, id string) (*Request, error) {
	r, err := dbsqlc.New(db).RequestOfRun(ctx, dbsqlc.RequestOfRunParams{RunID: runID, Tenant: tenant, ID: id})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, journal.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get request %s of run %s: %w", id, runID, err)
	}
	return requestOf(runID, r)
}

// ListRequests returns the requests of a run of the tenant, newest first, at most
// limit (1 to 500; 100 when 0), from after the position before (0: the newest), and
// the position of the next page (0 on the last).
func ListRequests(ctx context.Context, db journal.DB, tenant, runID string, limit int, before int64) ([]Request, int64, error) {
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, 500)
	rows, err := dbsqlc.New(db).RequestsOfRun(ctx, dbsqlc.RequestsOfRunParams{
		RunID: runID, Tenant: tenant, Before: before, Max: int64(limit) + 1,
	})
	if err != nil {
		return nil, 0, fmt.Errorf("list requests of run %s: %w", runID, err)
	}
	out := make([]Request, 0, min(len(rows), limit))
	for _, r := range rows[:min(len(rows), limit)] {
		q, err := requestOf(runID, dbsqlc.RequestOfRunRow(r))
		if err != nil {
			return nil, 0, err
		}
		out = append(out, *q)
	}
	var next int64
	if len(rows) > limit {
		next = out[len(out)-1].n
	}
	return out, next, nil
}
