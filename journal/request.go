package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// A request is a message on the topic RequestTopicPrefix + its name, sent by
// SendRequest only: the run takes it with a receive of that topic (its KindReceive
// entry holds the request's id and data), and answers it with one entry of KindReply
// named after the request's id (Reply). Its status is derived, never stored: replied
// once the reply is journaled, failed when the run ended without one, pending else.

// RequestTopicPrefix begins the topic of every request: "request:<name>". Plain
// messages may not use it (the gateway refuses them), so a receive of such a topic
// takes requests only.
const RequestTopicPrefix = "request:"

// KindReply is a run's reply to a request it received, checkpointed like a step
// (Reply): named after the request's id, its output is the reply, or its error an
// error reply.
const KindReply = "reply"

// MaxPendingRequests bounds a run's requests that no reply answers yet: past it,
// SendRequest returns an error wrapping ErrTooManyRequests.
const MaxPendingRequests = 100

// ErrorTypeNoReply is the error of a request whose run ended without replying to it.
const ErrorTypeNoReply = "no_reply"

var (
	// ErrTooManyRequests: the run has MaxPendingRequests requests not replied to.
	ErrTooManyRequests = errors.New("journal: too many requests not replied to")
	// ErrIDTaken: a request's id is the id of a message of the run on another topic.
	ErrIDTaken = errors.New("journal: the id is another message's")
	// ErrBadReply: a reply to a request the run has not received, or has replied to
	// already; nothing is journaled.
	ErrBadReply = errors.New("journal: bad reply")
)

// RequestTopic is the topic of the requests named name.
func RequestTopic(name string) string { return RequestTopicPrefix + name }

// IsRequestTopic reports whether topic is a request's, which plain messages may not use.
func IsRequestTopic(topic string) bool { return strings.HasPrefix(topic, RequestTopicPrefix) }

// SendRequest stores the request n (n.Topic is RequestTopic(name)) in the mailbox of a
// run of n.Tenant, as SendMessage stores a message, in db, which must be a transaction
// (it locks the run's row): the same duplicates, errors and resumption (Sent.Resumed:
// the caller enqueues the run's invocation in the same transaction). Besides, a run
// with MaxPendingRequests requests not replied to takes no new one (an error wrapping
// ErrTooManyRequests), and an id of one of the run's plain messages is refused with an
// error wrapping ErrIDTaken.
func SendRequest(ctx context.Context, db DB, n NewMessage) (*Sent, error) {
	if !IsRequestTopic(n.Topic) {
		return nil, fmt.Errorf("journal: a request's topic begins with %q, not %q", RequestTopicPrefix, n.Topic)
	}
	identity, err := json.Marshal(n.Identity)
	if err != nil {
		return nil, fmt.Errorf("lock run %s: %w", n.RunID, err)
	}
	q := dbsqlc.New(db)
	r, err := q.MessageLockTarget(ctx, dbsqlc.MessageLockTargetParams{RunID: n.RunID, Tenant: n.Tenant, Identity: identity})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("lock run %s: %w", n.RunID, err)
	}
	status := Status(r.Status)
	if !r.MayResume {
		return &Sent{Status: status}, resumeForbidden(n.RunID, r.Function, r.Config, n.Identity.Roles)
	}
	if !status.Terminal() {
		// A duplicate is answered whatever the bound; deliver finds it again.
		_, err := q.MessageByID(ctx, dbsqlc.MessageByIDParams{RunID: n.RunID, ID: n.ID})
		if errors.Is(err, pgx.ErrNoRows) {
			pending, err := q.RequestPending(ctx, dbsqlc.RequestPendingParams{RunID: n.RunID, Max: MaxPendingRequests})
			if err != nil {
				return nil, fmt.Errorf("count requests of run %s: %w", n.RunID, err)
			}
			if pending >= MaxPendingRequests {
				return &Sent{Status: status}, fmt.Errorf("%w: run %s has %d requests not replied to, the limit of a run (MaxPendingRequests); send again once it has replied to some",
					ErrTooManyRequests, n.RunID, MaxPendingRequests)
			}
		} else if err != nil {
			return nil, fmt.Errorf("load message %s of run %s: %w", n.ID, n.RunID, err)
		}
	}
	sent, err := deliver(ctx, db, n, status)
	if err == nil && sent.Duplicate && sent.Message.Topic != n.Topic {
		return nil, fmt.Errorf("%w: run %s already has a message with id %q, on topic %q: choose another id",
			ErrIDTaken, n.RunID, n.ID, sent.Message.Topic)
	}
	return sent, err
}

// Reply journals e, a reply entry (KindReply, named after a request's id) of the
// invocation that owns runID, in db, which must be a transaction: it locks the run's
// row, so two replies to one request are serialized. The request must be one the run
// has received by a receive below e.Seq, and not one it has replied to at another seq:
// else an error wrapping ErrBadReply says which, and nothing is journaled. An identical
// repeat of a journaled reply is a no-op, as AppendEntry's. A run rerun from a step
// may also reply to a request taken by a receive copied from the run it reruns (the
// request is in that run's mailbox: no one waits for this reply). Other errors are
// AppendEntry's (ErrSuperseded, ErrConflict, ErrGap, a *LimitError). The run's readers
// (the requests waiting on a reply) are told once it commits (NotifyOutput).
func Reply(ctx context.Context, db DB, runID string, invocation int, e Entry, b Bounds) error {
	if e.Kind != KindReply {
		return fmt.Errorf("journal: Reply journals a %s entry, not %s", KindReply, e.Kind)
	}
	tag, err := db.Exec(ctx, dbsqlc.EntryLockRun, runID, invocation)
	if err != nil {
		return fmt.Errorf("lock run %s: %w", runID, err)
	}
	if tag.RowsAffected() == 0 {
		return ErrSuperseded
	}
	_, err = entryAt(ctx, db, runID, e.Seq)
	switch {
	case err == nil:
		// A repeat, or nondeterminism: AppendEntry tells which.
		return AppendEntry(ctx, db, runID, invocation, e, b)
	case !errors.Is(err, pgx.ErrNoRows):
		return err
	}
	q := dbsqlc.New(db)
	r, err := q.RequestForReply(ctx, dbsqlc.RequestForReplyParams{RunID: runID, ID: e.Name, Seq: int32(e.Seq)})
	if errors.Is(err, pgx.ErrNoRows) {
		// A run rerun from a step may reply to a request whose receive it copied.
		c, cerr := q.RequestCopiedForReply(ctx, dbsqlc.RequestCopiedForReplyParams{RunID: runID, ID: e.Name, Seq: int32(e.Seq)})
		if cerr == nil {
			seq := c.ReceivedSeq
			r, err = dbsqlc.RequestForReplyRow{Topic: RequestTopicPrefix, ConsumedSeq: &seq, RepliedSeq: c.RepliedSeq}, nil
		} else if !errors.Is(cerr, pgx.ErrNoRows) {
			err = cerr
		}
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows) || err == nil && !IsRequestTopic(r.Topic):
		return fmt.Errorf("%w: run %s has no request with id %q: a reply is named after the id of a request the run received", ErrBadReply, runID, e.Name)
	case err != nil:
		return fmt.Errorf("load request %s of run %s: %w", e.Name, runID, err)
	case r.ConsumedSeq == nil:
		return fmt.Errorf("%w: run %s has not received request %q yet (it waits in the mailbox for a receive of topic %q)", ErrBadReply, runID, e.Name, r.Topic)
	case int(*r.ConsumedSeq) >= e.Seq:
		return fmt.Errorf("%w: run %s received request %q at seq %d, not before the reply's seq %d", ErrBadReply, runID, e.Name, *r.ConsumedSeq, e.Seq)
	case r.RepliedSeq != 0:
		return fmt.Errorf("%w: run %s already replied to request %q, at seq %d: a request takes one reply", ErrBadReply, runID, e.Name, r.RepliedSeq)
	}
	if err := AppendEntry(ctx, db, runID, invocation, e, b); err != nil {
		return err
	}
	return NotifyOutput(ctx, db, runID)
}

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
	Error     *ErrorInfo
	ReplySeq  *int
	RepliedAt *time.Time
	n         int64
}

// requestOf is the request a row of RequestOfRun holds.
func requestOf(runID string, r dbsqlc.RequestOfRunRow) (*Request, error) {
	q := &Request{RunID: runID, ID: r.ID, Name: strings.TrimPrefix(r.Topic, RequestTopicPrefix), Data: r.Data,
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
			q.Error = &ErrorInfo{}
			if err := json.Unmarshal(r.ReplyError, q.Error); err != nil {
				return nil, fmt.Errorf("decode reply %d of run %s: %w", seq, runID, err)
			}
		}
	case Status(r.RunStatus).Terminal():
		q.Status = RequestFailed
		q.Error = &ErrorInfo{Type: ErrorTypeNoReply, Message: fmt.Sprintf(
			"run %s is %s: it ended without replying to request %q", runID, r.RunStatus, r.ID)}
	}
	return q, nil
}

// RequestOf returns a request of a run of the tenant, or ErrNotFound (no such run or
// request in the tenant).
func RequestOf(ctx context.Context, db DB, tenant, runID, id string) (*Request, error) {
	r, err := dbsqlc.New(db).RequestOfRun(ctx, dbsqlc.RequestOfRunParams{RunID: runID, Tenant: tenant, ID: id})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get request %s of run %s: %w", id, runID, err)
	}
	return requestOf(runID, r)
}

// ListRequests returns the requests of a run of the tenant, newest first, at most
// limit (1 to 500; 100 when 0), from after the position before (0: the newest), and
// the position of the next page (0 on the last).
func ListRequests(ctx context.Context, db DB, tenant, runID string, limit int, before int64) ([]Request, int64, error) {
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
