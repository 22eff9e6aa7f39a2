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

// KindSend is the entry of a message a run sent (step.Send), checkpointed like a step:
// its output is {"run_id", "topic", "id", "data"}, the message, stored in the target
// run's mailbox in the checkpoint's transaction (SendFromRun). A message that could not
// be sent is journaled too, with an error (ErrorTypeNotFound, ErrorTypeForbidden,
// ErrorTypeFinished, ErrorTypeLimit) and no output, so that a replay takes the path the run took.
const KindSend = "send"

// KindReceive is the entry of a run's receive (Receive), journaled when the receive
// ends: its output is {"message": {id, topic, data, identity, source_run_id, sent_at}},
// the message taken (identity is its sender's; source_run_id the sending run's, when a
// run sent it), or {"timed_out": true}.
const KindReceive = AwaitReceive

// Error types of a send refused (SendFromRun), journaled as the send entry's error.
const (
	ErrorTypeFinished = "finished"       // the target run is completed, failed or cancelled
	ErrorTypeLimit    = "limit_exceeded" // the target's mailbox is full
)

// MaxUnconsumedMessages bounds the messages waiting in a run's mailbox (sent, not yet
// received): past it a send is refused with ErrMailboxFull.
const MaxUnconsumedMessages = 1000

// ErrMailboxFull: the target run holds MaxUnconsumedMessages unconsumed messages.
var ErrMailboxFull = errors.New("journal: mailbox full")

// ErrResumeForbidden: the sender of a message may not resume the target run (its
// revision's invoke_roles and resume_roles exclude the sender).
var ErrResumeForbidden = errors.New("journal: the function's invoke_roles and resume_roles exclude the sender")

// ResumeForbiddenError is ErrResumeForbidden with the roles the target's revision allows.
type ResumeForbiddenError struct {
	RunID       string
	Function    string
	InvokeRoles []string
	ResumeRoles []string
	SenderRoles []string
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
	return fmt.Sprintf("run %s is a run of function %s, which takes messages only from %s; the sender's roles (%s) include none of them",
		e.RunID, e.Function, allowed, roles)
}

// Unwrap makes errors.Is(err, ErrResumeForbidden) hold.
func (e *ResumeForbiddenError) Unwrap() error { return ErrResumeForbidden }

// resumeForbidden is the error of a sender with roles whom target's revision config
// does not let resume it.
func resumeForbidden(target, function string, config json.RawMessage, roles []string) *ResumeForbiddenError {
	f := Function{Config: config}
	return &ResumeForbiddenError{RunID: target, Function: function, InvokeRoles: f.InvokeRoles(),
		ResumeRoles: f.ResumeRoles(), SenderRoles: roles}
}

// Message is a message sent to a run. Messages are immutable but for ConsumedSeq;
// (RunID, ID) is unique.
type Message struct {
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
func messageOf(r dbsqlc.MessageGetRow) *Message {
	m := &Message{
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
	// (Quotas.MaxMailboxBytes): a message that would wait past it is refused with a
	// *QuotaError. 0 does not limit.
	MaxTenantMailboxBytes int64
}

// Sent is what SendMessage did.
type Sent struct {
	// Message is the message stored, or for a duplicate the first message with its id.
	Message   *Message
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
// once: journaled at the receive's seq (KindReceive), the wait deleted and the run due
// now (Sent.Resumed). Otherwise it waits in the mailbox for a receive (Receive).
//
// A message id the run already has returns that first message with Duplicate, whatever
// the run's status, and stores nothing. It returns ErrNotFound when the tenant has no
// such run, ErrFinished (with Sent.Status) when the run is completed, failed or
// cancelled, an error wrapping ErrMailboxFull when MaxUnconsumedMessages wait in its
// mailbox, and a *QuotaError when a message that would wait in the mailbox would pass
// n.MaxTenantMailboxBytes. A sender whom the run's revision does not let resume it (its
// invoke_roles and resume_roles: stepgate.may_resume) gets a *ResumeForbiddenError,
// whatever the run's status and the message's id, and nothing is stored.
//
// Triggers that follow it (docs/internals.md): message_usage_on_insert (a message left waiting in the mailbox).
func SendMessage(ctx context.Context, db DB, n NewMessage) (*Sent, error) {
	identity, err := json.Marshal(n.Identity)
	if err != nil {
		return nil, fmt.Errorf("lock run %s: %w", n.RunID, err)
	}
	r, err := dbsqlc.New(db).MessageLockTarget(ctx, dbsqlc.MessageLockTargetParams{RunID: n.RunID, Tenant: n.Tenant, Identity: identity})
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
	return deliver(ctx, db, n, status)
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
	b.Queue(dbsqlc.MessageByID, n.RunID, n.ID).Query(func(rows pgx.Rows) error {
		var err error
		dup, err = pgx.CollectRows(rows, pgx.RowToStructByPos[dbsqlc.MessageByIDRow])
		return err
	})
	b.Queue(dbsqlc.MessageDeliveryState, n.RunID, n.Topic, int64(MaxUnconsumedMessages), data, n.Tenant).QueryRow(func(row pgx.Row) error {
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
// whichever is first; then the entry at Seq, of kind KindReceive named Name, journals
// which (see KindReceive) and the run is due. A message sent before the receive waits
// for it: the oldest unconsumed message of the topic is taken at once, in Finish's
// transaction, and the run is due now. Each message is taken by one receive, once.
type Receive struct {
	Seq     int
	Name    string
	Topic   string
	Timeout time.Duration
}

func (r Receive) awaiting() Awaiting {
	return Awaiting{Kind: AwaitReceive, Seq: r.Seq, Name: r.Name, Topic: r.Topic}
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

// SendFromRun journals e, the send entry (KindSend) of the invocation that owns runID,
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
// ErrConflict, ErrGap, a *LimitError.
//
// Triggers that follow it (docs/internals.md): message_usage_on_insert (a message left waiting in the mailbox).
func SendFromRun(ctx context.Context, db DB, runID string, invocation int, e Entry, m NewMessage, b Bounds) (sent *Sent, refused *ErrorInfo, err error) {
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
		refused = &ErrorInfo{Type: ErrorTypeNotFound, Message: fmt.Sprintf("run %s is not a run of tenant %s", m.RunID, tenant)}
	case !target.MayResume:
		refused = &ErrorInfo{Type: ErrorTypeForbidden,
			Message: resumeForbidden(m.RunID, target.Function, target.Config, identity.Roles).Error()}
	default:
		sent, err = deliver(ctx, db, m, Status(target.Status))
		var qe *QuotaError
		switch {
		case errors.Is(err, ErrFinished):
			refused = &ErrorInfo{Type: ErrorTypeFinished, Message: fmt.Sprintf(
				"run %s is already %s; a finished run takes no messages", m.RunID, target.Status)}
		case errors.Is(err, ErrMailboxFull):
			refused = &ErrorInfo{Type: ErrorTypeLimit, Message: fmt.Sprintf(
				"run %s already holds %d unconsumed messages, the limit of its mailbox", m.RunID, MaxUnconsumedMessages)}
		case errors.As(err, &qe):
			refused = &ErrorInfo{Type: ErrorTypeLimit, Message: qe.Message}
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

// MessageOf returns the message of a run of the tenant, or ErrNotFound.
func MessageOf(ctx context.Context, db DB, tenant, runID, id string) (*Message, error) {
	r, err := dbsqlc.New(db).MessageGet(ctx, dbsqlc.MessageGetParams{Tenant: tenant, RunID: runID, ID: id})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get message %s of run %s: %w", id, runID, err)
	}
	return messageOf(r), nil
}
