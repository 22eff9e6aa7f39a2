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
	"github.com/stepgate/stepgate/journal/storable"
)

// An entry of kind "send" is a message a run sent (step.Send), checkpointed like a step:
// its output is {"run_id", "topic", "id", "data"}, the message, stored in the target
// run's mailbox in the checkpoint's transaction (SendFromRun). A message that could not
// be sent is journaled too, with an error (errorTypeNotFound, errorTypeForbidden,
// errorTypeFinished, errorTypeLimit) and no output, so that a replay takes the path the run took.

// kindReceive is the entry of a run's receive (Receive), journaled when the receive
// ends: its output is {"message": {id, topic, data, identity, source_run_id, sent_at}},
// the message taken (identity is its sender's; source_run_id the sending run's, when a
// run sent it), or {"timed_out": true}.
const kindReceive = awaitReceive

// Error types of a send refused (SendFromRun), journaled as the send entry's error.
const (
	errorTypeFinished = "finished"       // the target run is completed, failed or cancelled
	errorTypeLimit    = "limit_exceeded" // the target's mailbox is full
)

// MaxUnconsumedMessages bounds the messages waiting in a run's mailbox (sent, not yet
// received): past it a send is refused with ErrMailboxFull.
const MaxUnconsumedMessages = 1000

// ErrMailboxFull: the target run holds MaxUnconsumedMessages unconsumed messages.
var ErrMailboxFull = errors.New("journal: mailbox full")

// errResumeForbidden: the sender of a message may not resume the target run (its
// revision's invoke_roles and resume_roles exclude the sender).
var errResumeForbidden = errors.New("journal: the function's invoke_roles and resume_roles exclude the sender")

// ResumeForbiddenError is errResumeForbidden with the roles the target's revision allows.
type ResumeForbiddenError struct {
	RunID       string
	Function    string
	InvokeRoles []string
	ResumeRoles []string
	SenderRoles []string
	// Callbacks says that what was refused is resolving the run's callbacks by name or
	// listing them (mayResolveCallbacks), not sending it a message.
	Callbacks bool
}

func (e *ResumeForbiddenError) Error() string {
	allowed := fmt.Sprintf("the roles that may invoke it (invoke_roles: %s) or admin", strings.Join(e.InvokeRoles, ", "))
	if len(e.ResumeRoles) > 0 {
		allowed = fmt.Sprintf("the roles that may invoke it (invoke_roles: %s), admin or its resume_roles (%s)",
			strings.Join(e.InvokeRoles, ", "), strings.Join(e.ResumeRoles, ", "))
	}
	roles := "none"
	if len(e.SenderRoles) > 0 {
		roles = strings.Join(e.SenderRoles, ", ")
	}
	if e.Callbacks {
		return fmt.Sprintf("run %s is a run of function %s, whose callbacks are resolved by name or listed only by %s; the caller's roles (%s) include none of them",
			e.RunID, e.Function, allowed, roles)
	}
	return fmt.Sprintf("run %s is a run of function %s, which takes messages only from %s; the sender's roles (%s) include none of them",
		e.RunID, e.Function, allowed, roles)
}

// Unwrap makes errors.Is(err, errResumeForbidden) hold.
func (e *ResumeForbiddenError) Unwrap() error { return errResumeForbidden }

// resumeForbidden is the error of a sender with roles whom target's revision config
// does not let resume it.
func resumeForbidden(target, function string, config json.RawMessage, roles []string) *ResumeForbiddenError {
	f := Function{Config: config}
	return &ResumeForbiddenError{RunID: target, Function: function, InvokeRoles: f.InvokeRoles(),
		ResumeRoles: f.ResumeRoles(), SenderRoles: roles}
}

// runMessage is a message sent to a run. Messages are immutable but for ConsumedSeq;
// (RunID, ID) is unique.
type runMessage struct {
	RunID       string          `db:"run_id"`
	ID          string          `db:"id"`
	Topic       string          `db:"topic"`
	Data        json.RawMessage `db:"data"`
	Identity    Identity        `db:"identity"`      // The sender's.
	SourceRunID *string         `db:"source_run_id"` // The run that sent it; nil for one sent through the API.
	CreatedAt   time.Time       `db:"created_at"`
	// ConsumedSeq is the seq of the target's receive entry that took it; nil while it
	// waits in the mailbox.
	ConsumedSeq *int `db:"consumed_seq"`
}

// messageOf is the message a row of stepgate.message holds.
func messageOf(r dbsqlc.MessageGetRow) *runMessage {
	m := &runMessage{
		RunID: r.RunID, ID: r.ID, Topic: r.Topic, Data: r.Data, Identity: r.Identity, SourceRunID: r.SourceRunID,
		CreatedAt: r.CreatedAt,
	}
	if r.ConsumedSeq != nil {
		seq := int(*r.ConsumedSeq)
		m.ConsumedSeq = &seq
	}
	return m
}

// NewMessage is what SendMessage needs to store a message.
type NewMessage struct {
	Tenant string // The sender's, which must be the target run's.
	RunID  string // The target run.
	// ID deduplicates the target's messages: the first message with an id wins. Required.
	ID    string
	Topic string
	Data  json.RawMessage // Defaults to JSON null.
	// Identity is the sender's, stored with the message and journaled by its receive.
	Identity    Identity
	SourceRunID *string // The run that sends the message, if any.
	// MaxTenantMailboxBytes caps the bytes of the tenant's messages not yet received
	// (usage.Quotas.MaxMailboxBytes): a message that would wait past it is refused with a
	// *QuotaError. 0 does not limit.
	MaxTenantMailboxBytes int64
	// Request says the message is a client's request (see SendMessage), on a topic of
	// requests (RequestTopic), which plain messages may not use.
	Request bool
}

// Sent is what SendMessage did.
type Sent struct {
	// Message is the message stored, or for a duplicate the first message with its id.
	Message   *runMessage
	Duplicate bool
	// Resumed says the target was suspended on a receive of the message's topic and
	// took the message at once: it is due now, and the caller enqueues its invocation in
	// the same transaction.
	Resumed bool
	// Status is the target run's status, also when it is finished (ErrFinished).
	Status Status
}

// SendMessage stores a message in the mailbox of a run of n.Tenant, in db, which must be
// a transaction: it locks the run's row for the rest of it (see docs/schema.md, Messages). When
// the run is suspended on a receive of the message's topic, the message is consumed at
// once: journaled at the receive's seq (kindReceive), the wait deleted and the run due
// now (Sent.Resumed). Otherwise it waits in the mailbox for a receive (Receive).
//
// A message id the run already has returns that first message with Duplicate, whatever
// the run's status, and stores nothing. It returns ErrNotFound when the tenant has no
// such run, ErrFinished (with Sent.Status) when the run is completed, failed or
// cancelled, an error wrapping ErrMailboxFull when MaxUnconsumedMessages wait in its
// mailbox, and a *QuotaError when a message that would wait in the mailbox would pass
// n.MaxTenantMailboxBytes. A sender whom the run's revision does not let resume it (its
// invoke_roles and resume_roles: stepgate.may_resume) gets a *ResumeForbiddenError,
// whatever the run's status and the message's id, and nothing is stored. A topic of
// requests (requestTopicPrefix) is refused with an error wrapping errReservedTopic,
// but for a request (n.Request), which must have one. Besides, a run with
// MaxPendingRequests requests not replied to takes no new one (an error wrapping
// ErrTooManyRequests), and a request with the id of one of the run's plain messages is
// refused with an error wrapping ErrIDTaken.
//
// Triggers that follow it (docs/internals.md): message_usage_on_insert (a message left waiting in the mailbox).
func SendMessage(ctx context.Context, db DB, n NewMessage) (*Sent, error) {
	switch {
	case n.Request && !isRequestTopic(n.Topic):
		return nil, fmt.Errorf("journal: a request's topic begins with %q, not %q", requestTopicPrefix, n.Topic)
	case !n.Request && isRequestTopic(n.Topic):
		return nil, &reservedTopicError{n.Topic}
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
	if !n.Request {
		return deliver(ctx, db, n, status)
	}
	if !status.Terminal() {
		// A duplicate is answered whatever the bound; deliver finds it again.
		_, err := q.MessageByID(ctx, dbsqlc.MessageByIDParams{Tenant: n.Tenant, RunID: n.RunID, ID: n.ID})
		if errors.Is(err, pgx.ErrNoRows) {
			pending, err := q.RequestPending(ctx, dbsqlc.RequestPendingParams{Tenant: n.Tenant, RunID: n.RunID, Max: MaxPendingRequests})
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

// deliver stores n for its target run, whose row lock db holds and whose status is
// status; see SendMessage.
func deliver(ctx context.Context, db DB, n NewMessage, status Status) (*Sent, error) {
	if n.ID == "" || n.Topic == "" {
		return nil, errors.New("journal: a message needs an id and a topic")
	}
	data := n.Data
	if len(data) == 0 {
		data = json.RawMessage("null")
	}
	sent := &Sent{Status: status}
	// New statements, so new snapshots: every send and receive that held the lock
	// before us has committed.
	var waitSeq *int
	var waitName *string
	var waitAlt *int16
	var unconsumed int
	var size, mailbox int64
	var dup []dbsqlc.MessageByIDRow
	// One round trip: the generated statements, queued with their arguments in the
	// generated functions' order.
	b := &pgx.Batch{}
	b.Queue(dbsqlc.MessageByID, dbsqlc.MessageByIDParams{Tenant: n.Tenant, RunID: n.RunID, ID: n.ID}.Args()...).Query(func(rows pgx.Rows) error {
		var err error
		dup, err = pgx.CollectRows(rows, pgx.RowToStructByPos[dbsqlc.MessageByIDRow])
		return err
	})
	b.Queue(dbsqlc.MessageDeliveryState, dbsqlc.MessageDeliveryStateParams{Tenant: n.Tenant, RunID: n.RunID, Topic: n.Topic, MaxUnconsumed: MaxUnconsumedMessages, Data: data}.Args()...).QueryRow(func(row pgx.Row) error {
		return row.Scan(&waitSeq, &waitName, &waitAlt, &unconsumed, &size, &mailbox)
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("send message to run %s: %w", n.RunID, unstorable(err))
	}
	switch {
	case len(dup) == 1:
		sent.Message, sent.Duplicate = messageOf(dbsqlc.MessageGetRow(dup[0])), true
		return sent, nil
	case status.Terminal():
		return sent, ErrFinished
	case waitSeq == nil && unconsumed >= MaxUnconsumedMessages:
		return sent, fmt.Errorf("%w: run %s already holds %d unconsumed messages, the limit of its mailbox",
			ErrMailboxFull, n.RunID, MaxUnconsumedMessages)
	}
	consume := waitSeq != nil && status == StatusSuspended
	if max := n.MaxTenantMailboxBytes; !consume && max > 0 && mailbox+size > max {
		return sent, &QuotaError{Message: fmt.Sprintf(
			"tenant %s's messages not yet received would hold %d bytes, more than its limit of %d (STEPGATE_MAX_TENANT_MAILBOX_BYTES); send again once runs have received some",
			n.Tenant, mailbox+size, max)}
	}
	var seq int
	var name string
	alt := int16(-1)
	if consume {
		seq, name, alt = *waitSeq, *waitName, *waitAlt
	}
	r, err := dbsqlc.New(db).MessageStore(ctx, dbsqlc.MessageStoreParams{
		Tenant: n.Tenant, RunID: n.RunID, ID: n.ID, Topic: n.Topic, Data: data, Identity: n.Identity,
		SourceRunID: n.SourceRunID, Consume: consume, Seq: int32(seq), Name: name, Alt: alt,
	})
	if err != nil {
		return nil, fmt.Errorf("send message to run %s: %w", n.RunID, unstorable(err))
	}
	// Read through the insert's CTE, its identity is JSON to decode, as pgx decodes it.
	var stored Identity
	if err := json.Unmarshal(r.Identity, &stored); err != nil {
		return nil, fmt.Errorf("send message to run %s: %w", n.RunID, err)
	}
	m := messageOf(dbsqlc.MessageGetRow{
		RunID: r.RunID, ID: r.ID, Topic: r.Topic, Data: r.Data, Identity: stored, SourceRunID: r.SourceRunID,
		CreatedAt: r.CreatedAt, ConsumedSeq: r.ConsumedSeq,
	})
	sent.Message, sent.Resumed = m, consume
	return sent, nil
}

// Receive suspends a run until a message of Topic is in its mailbox, or Timeout passes,
// whichever is first; then the entry at Seq, of kind kindReceive named Name, journals
// which (see kindReceive) and the run is due. A message sent before the receive waits
// for it: the oldest unconsumed message of the topic is taken at once, in Finish's
// transaction, and the run is due now. Each message is taken by one receive, once.
type Receive struct {
	Seq     int
	Name    string
	Topic   string
	Timeout time.Duration
}

func (r Receive) awaiting() Awaiting {
	return Awaiting{Kind: awaitReceive, Seq: r.Seq, Name: r.Name, Topic: r.Topic}
}

func (r Receive) wake() (*time.Time, time.Duration, bool) { return nil, r.Timeout, true }

// write takes the oldest unconsumed message of the topic and journals it, making the run
// due now, or stores the wait; Finish's fenced update holds the run's row lock, which
// every send takes first (see docs/schema.md, Messages).
//
// Triggers that follow it (docs/internals.md): message_usage_on_consume.
func (r Receive) write(ctx context.Context, db DB, aw awaitWrite, f *Finished) error {
	if f.WakeAt == nil {
		// (Finish times every receive: its timeout, or never.)
		return fmt.Errorf("store receive of run %s: it has no wake time", aw.runID)
	}
	taken, err := dbsqlc.New(db).MessageReceive(ctx, dbsqlc.MessageReceiveParams{
		RunID: aw.runID, Topic: r.Topic, Seq: int32(r.Seq), Alt: int16(aw.alt), Name: r.Name, Invocation: int32(aw.invocation),
		Tenant: aw.tenant, ExpiresAt: *f.WakeAt,
	})
	if isUniqueViolation(err) {
		return fmt.Errorf("%w: seq %d is already journaled", ErrConflict, r.Seq)
	}
	if err != nil {
		return fmt.Errorf("store receive of run %s: %w", aw.runID, unstorable(err))
	}
	if taken {
		return dueNow(ctx, db, aw.runID, f)
	}
	return nil
}

// SendFromRun journals e, the send entry (kindSend) of the invocation that owns runID,
// and stores its message m in the target's mailbox with the run's tenant and identity
// (as SendMessage does), in db, which must be a transaction. The sender and the target
// are locked in one order (so two runs sending to each other do not deadlock), and only
// a target of the sender's tenant is ever looked at.
//
// When the message cannot be sent (no such run in the tenant, a target whose revision
// does not let the run's identity resume it, as SendMessage, a finished run, a full
// mailbox, the tenant's mailbox quota, m.MaxTenantMailboxBytes), e is journaled with
// that error instead of its output, nothing is stored, and
// the error is returned as refused. A repeated checkpoint of a journaled send (same
// seq, kind and name) returns what the first one journaled and sends nothing again.
// Errors are AppendEntry's: ErrSuperseded when the invocation no longer owns the run,
// ErrConflict, ErrGap, a *LimitError; and an error wrapping errReservedTopic for a topic
// of requests (requestTopicPrefix), when nothing is journaled.
//
// Triggers that follow it (docs/internals.md): message_usage_on_insert (a message left waiting in the mailbox).
func SendFromRun(ctx context.Context, db DB, runID string, invocation int, e Entry, m NewMessage, b Bounds) (sent *Sent, refused *ErrorInfo, err error) {
	if isRequestTopic(m.Topic) {
		return nil, nil, &reservedTopicError{m.Topic}
	}
	q := dbsqlc.New(db)
	sender, err := q.MessageSenderRun(ctx, runID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, ErrSuperseded
	}
	var identity Identity
	if err == nil {
		err = json.Unmarshal(sender.Identity, &identity)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("load run %s: %w", runID, err)
	}
	tenant := sender.Tenant
	encoded, err := json.Marshal(identity)
	if err != nil {
		return nil, nil, fmt.Errorf("lock runs %s and %s: %w", runID, m.RunID, err)
	}
	runs, err := q.MessageLockRuns(ctx, dbsqlc.MessageLockRunsParams{Ids: []string{runID, m.RunID}, Tenant: tenant, Identity: encoded})
	if err != nil {
		return nil, nil, fmt.Errorf("lock runs %s and %s: %w", runID, m.RunID, err)
	}
	var target *dbsqlc.MessageLockRunsRow // MayResume: whether the sender's identity may resume it
	owned := false
	for i := range runs {
		if runs[i].ID == runID {
			owned = Status(runs[i].Status) == StatusRunning && int(runs[i].Invocation) == invocation
		}
		if runs[i].ID == m.RunID {
			target = &runs[i]
		}
	}
	if !owned {
		return nil, nil, ErrSuperseded
	}
	existing, err := entryAt(ctx, db, runID, e.Seq)
	if err == nil {
		if existing.Kind != e.Kind || existing.Name != e.Name {
			return nil, nil, sameEntry(existing, e)
		}
		return nil, existing.Error, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, err
	}
	m.Tenant, m.Identity, m.SourceRunID = tenant, identity, &runID
	switch {
	case target == nil:
		refused = &ErrorInfo{Type: errorTypeNotFound, Message: fmt.Sprintf("run %s is not a run of tenant %s", m.RunID, tenant)}
	case !target.MayResume:
		refused = &ErrorInfo{Type: errorTypeForbidden,
			Message: resumeForbidden(m.RunID, target.Function, target.Config, identity.Roles).Error()}
	default:
		sent, err = deliver(ctx, db, m, Status(target.Status))
		var qe *QuotaError
		switch {
		case errors.Is(err, ErrFinished):
			refused = &ErrorInfo{Type: errorTypeFinished, Message: fmt.Sprintf(
				"run %s is already %s; a finished run takes no messages", m.RunID, target.Status)}
		case errors.Is(err, ErrMailboxFull):
			refused = &ErrorInfo{Type: errorTypeLimit, Message: fmt.Sprintf(
				"run %s already holds %d unconsumed messages, the limit of its mailbox", m.RunID, MaxUnconsumedMessages)}
		case errors.As(err, &qe):
			refused = &ErrorInfo{Type: errorTypeLimit, Message: qe.Message}
		case err != nil:
			return nil, nil, err
		}
	}
	if refused != nil {
		sent, e.Output, e.Error = nil, nil, refused
	}
	if err := AppendEntry(ctx, db, runID, invocation, e, b); err != nil {
		return nil, nil, err
	}
	return sent, refused, nil
}

// A request is a message on the topic requestTopicPrefix + its name, sent by
// SendRequest only: the run takes it with a receive of that topic (its kindReceive
// entry holds the request's id and data), and answers it with one entry of KindReply
// named after the request's id (Reply). Its status is derived, never stored: replied
// once the reply is journaled, failed when the run ended without one, pending else.

// requestTopicPrefix begins the topic of every request: "request:<name>". Plain
// messages may not use it (errReservedTopic), so a receive of such a topic takes
// requests only.
const requestTopicPrefix = "request:"

// KindReply is a run's reply to a request it received, checkpointed like a step
// (Reply): named after the request's id, its output is the reply, or its error an
// error reply.
const KindReply = "reply"

// MaxPendingRequests bounds a run's requests that no reply answers yet: past it,
// SendRequest returns an error wrapping ErrTooManyRequests.
const MaxPendingRequests = 100

var (
	// ErrTooManyRequests: the run has MaxPendingRequests requests not replied to.
	ErrTooManyRequests = errors.New("journal: too many requests not replied to")
	// ErrIDTaken: a request's id is the id of a message of the run on another topic.
	ErrIDTaken = errors.New("journal: the id is another message's")
	// ErrBadReply: a reply to a request the run has not received, or has replied to
	// already; nothing is journaled.
	ErrBadReply = errors.New("journal: bad reply")
)

// errReservedTopic: a plain message (SendMessage, SendFromRun) on a request's topic,
// which only SendRequest sends. Its error also wraps storable.ErrUnstorable, so that an edge
// answers it as the client's mistake, and says what to do instead.
var errReservedTopic = errors.New("journal: the topic is reserved for requests")

type reservedTopicError struct{ topic string }

func (e *reservedTopicError) Error() string {
	return fmt.Sprintf("message topic %q begins with %q, which is reserved for requests: send one with POST /v1/runs/{id}/requests",
		e.topic, requestTopicPrefix)
}

func (e *reservedTopicError) Unwrap() []error {
	return []error{errReservedTopic, storable.ErrUnstorable}
}

// RequestTopic is the topic of the requests named name.
func RequestTopic(name string) string { return requestTopicPrefix + name }

// isRequestTopic reports whether topic is a request's, which plain messages may not use.
func isRequestTopic(topic string) bool { return strings.HasPrefix(topic, requestTopicPrefix) }

// Reply journals e, a reply entry (KindReply, named after a request's id) of the
// invocation that owns runID, in db, which must be a transaction: it locks the run's
// row, so two replies to one request are serialized. The request must be one the run
// has received by a receive below e.Seq, and not one it has replied to at another seq:
// else an error wrapping ErrBadReply says which, and nothing is journaled. An identical
// repeat of a journaled reply is a no-op, as AppendEntry's. A run rerun from a step
// may also reply to a request taken by a receive copied from the run it reruns (the
// request is in that run's mailbox: no one waits for this reply). Other errors are
// AppendEntry's (ErrSuperseded, ErrConflict, ErrGap, a *LimitError). The run's readers
// (the requests waiting on a reply) are told once it commits (notifyOutput).
func Reply(ctx context.Context, db DB, runID string, invocation int, e Entry, b Bounds) error {
	if e.Kind != KindReply {
		return fmt.Errorf("journal: Reply journals a %s entry, not %s", KindReply, e.Kind)
	}
	locked, err := dbsqlc.New(db).EntryLockRun(ctx, dbsqlc.EntryLockRunParams{RunID: runID, Invocation: int32(invocation)})
	if err != nil {
		return fmt.Errorf("lock run %s: %w", runID, err)
	}
	if locked == 0 {
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
			r, err = dbsqlc.RequestForReplyRow{Topic: requestTopicPrefix, ConsumedSeq: &seq, RepliedSeq: c.RepliedSeq}, nil
		} else if !errors.Is(cerr, pgx.ErrNoRows) {
			err = cerr
		}
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows) || err == nil && !isRequestTopic(r.Topic):
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
	return notifyOutput(ctx, db, runID)
}

// notifyOutput announces on the output channel (output.OutputChannel) that runID
// published something, when a reader has attached to it; output.NotifyOutput is the
// same for the writes outside the journal. Call it in the transaction of the write: the
// notification goes out at its commit.
func notifyOutput(ctx context.Context, db DB, runID string) error {
	if err := dbsqlc.New(db).OutputNotify(ctx, runID); err != nil {
		return fmt.Errorf("notify output of run %s: %w", runID, err)
	}
	return nil
}
