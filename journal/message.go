package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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

const messageColumns = `run_id::text, id, topic, data, identity, source_run_id::text, created_at, consumed_seq`

// messageOutput is the SQL of a receive entry's output for the message row m.
const messageOutput = `jsonb_build_object('message', jsonb_build_object('id', m.id, 'topic', m.topic, 'data', m.data,
	'identity', m.identity, 'sent_at', m.created_at) || CASE WHEN m.source_run_id IS NULL THEN '{}'::jsonb
	ELSE jsonb_build_object('source_run_id', m.source_run_id) END)`

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
// a transaction: it locks the run's row for the rest of it (see migration 0023). When
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
func SendMessage(ctx context.Context, db DB, n NewMessage) (*Sent, error) {
	var status Status
	var function string
	var config json.RawMessage
	var may bool
	err := db.QueryRow(ctx, `
		SELECT r.status, r.function, fr.config, stepgate.may_resume(fr.config, $3)
		FROM stepgate.run r
		JOIN stepgate.function_revision fr ON fr.tenant = r.tenant AND fr.name = r.function AND fr.revision = r.revision
		WHERE r.id = $1 AND r.tenant = $2
		FOR UPDATE OF r`,
		n.RunID, n.Tenant, n.Identity).Scan(&status, &function, &config, &may)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("lock run %s: %w", n.RunID, err)
	}
	if !may {
		return &Sent{Status: status}, resumeForbidden(n.RunID, function, config, n.Identity.Roles)
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
	var dup []Message
	b := &pgx.Batch{}
	b.Queue(`SELECT `+messageColumns+` FROM stepgate.message WHERE run_id = $1 AND id = $2`, n.RunID, n.ID).
		Query(func(rows pgx.Rows) error {
			var err error
			dup, err = pgx.CollectRows(rows, pgx.RowToStructByName[Message])
			return err
		})
	b.Queue(`
		SELECT (SELECT seq FROM stepgate.run_wait WHERE run_id = $1 AND kind = '`+AwaitReceive+`' AND topic = $2),
			(SELECT name FROM stepgate.run_wait WHERE run_id = $1 AND kind = '`+AwaitReceive+`' AND topic = $2),
			(SELECT alt FROM stepgate.run_wait WHERE run_id = $1 AND kind = '`+AwaitReceive+`' AND topic = $2),
			(SELECT count(*) FROM (SELECT 1 FROM stepgate.message
				WHERE run_id = $1 AND consumed_seq IS NULL LIMIT $3) c),
			octet_length($5::jsonb::text), `+fmt.Sprintf(usageSum, "mailbox_bytes", "$4")+``,
		n.RunID, n.Topic, MaxUnconsumedMessages, n.Tenant, data).QueryRow(func(row pgx.Row) error {
		return row.Scan(&waitSeq, &waitName, &waitAlt, &unconsumed, &size, &mailbox)
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("send message to run %s: %w", n.RunID, unstorable(err))
	}
	switch {
	case len(dup) == 1:
		sent.Message, sent.Duplicate = &dup[0], true
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
	rows, _ := db.Query(ctx, `
		WITH m AS (
			INSERT INTO stepgate.message (tenant, run_id, id, topic, data, identity, source_run_id, consumed_seq)
			VALUES (@tenant, @run_id, @id, @topic, @data, @identity, @source_run_id, CASE WHEN @consume THEN @seq::int END)
			RETURNING *
		), gone AS (
			DELETE FROM stepgate.run_wait WHERE run_id = @run_id AND seq = @seq AND @consume
		), out AS (
			SELECT `+messageOutput+` AS output FROM m WHERE @consume
		), entry AS (
			INSERT INTO stepgate.journal_entry (run_id, seq, kind, name, output, invocation, started_at, journal_bytes)
			SELECT r.id, @seq, stepgate.wait_kind(@alt, '`+KindReceive+`'), @name,
				stepgate.wait_output(@alt, '`+KindReceive+`', out.output), r.invocation, now(),
				stepgate.journal_bytes_before(r.id, @seq) + octet_length(out.output::text)
			FROM out, stepgate.run r WHERE r.id = @run_id
			ON CONFLICT (run_id, seq) DO NOTHING
		), woken AS (
			UPDATE stepgate.run SET wake_at = now() WHERE id = @run_id AND @consume
		)
		SELECT `+messageColumns+` FROM m`,
		namedArgs{
			"tenant": n.Tenant, "run_id": n.RunID, "id": n.ID, "topic": n.Topic, "data": data,
			"identity": n.Identity, "source_run_id": n.SourceRunID, "consume": consume, "seq": seq, "name": name, "alt": alt,
		})
	m, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Message])
	if err != nil {
		return nil, fmt.Errorf("send message to run %s: %w", n.RunID, unstorable(err))
	}
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
// every send takes first (see migration 0023).
func (r Receive) write(ctx context.Context, db DB, aw awaitWrite, f *Finished) error {
	var taken bool
	err := db.QueryRow(ctx, `
		WITH oldest AS (
			SELECT id FROM stepgate.message
			WHERE run_id = @run_id AND topic = @topic AND consumed_seq IS NULL
			ORDER BY n LIMIT 1
		), m AS (
			UPDATE stepgate.message m SET consumed_seq = @seq FROM oldest
			WHERE m.run_id = @run_id AND m.id = oldest.id
			RETURNING m.*
		), out AS (
			SELECT `+messageOutput+` AS output FROM m
		), entry AS (
			INSERT INTO stepgate.journal_entry (run_id, seq, kind, name, output, invocation, started_at, journal_bytes)
			SELECT @run_id, @seq, stepgate.wait_kind(@alt, '`+KindReceive+`'), @name,
				stepgate.wait_output(@alt, '`+KindReceive+`', output), @invocation, now(),
				stepgate.journal_bytes_before(@run_id, @seq) + octet_length(output::text)
			FROM out
		), waiting AS (
			INSERT INTO stepgate.run_wait (run_id, seq, alt, tenant, name, kind, topic, expires_at)
			SELECT @run_id, @seq, @alt, @tenant, @name, '`+AwaitReceive+`', @topic, @expires_at
			WHERE NOT EXISTS (SELECT 1 FROM oldest)
		)
		SELECT EXISTS (SELECT 1 FROM oldest)`,
		namedArgs{
			"run_id": aw.runID, "topic": r.Topic, "seq": r.Seq, "name": r.Name, "invocation": aw.invocation,
			"tenant": aw.tenant, "expires_at": f.WakeAt, "alt": int16(aw.alt),
		}).Scan(&taken)
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
func SendFromRun(ctx context.Context, db DB, runID string, invocation int, e Entry, m NewMessage, b Bounds) (sent *Sent, refused *ErrorInfo, err error) {
	var tenant string
	var identity Identity
	err = db.QueryRow(ctx, `SELECT tenant, identity FROM stepgate.run WHERE id = $1`, runID).Scan(&tenant, &identity)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil, ErrSuperseded
	}
	if err != nil {
		return nil, nil, fmt.Errorf("load run %s: %w", runID, err)
	}
	type locked struct {
		ID         string          `db:"id"`
		Status     Status          `db:"status"`
		Invocation int             `db:"invocation"`
		Function   string          `db:"function"`
		Config     json.RawMessage `db:"config"`
		MayResume  bool            `db:"may_resume"` // whether the sender's identity may resume it
	}
	rows, _ := db.Query(ctx, `
		SELECT r.id::text, r.status, r.invocation, r.function, fr.config, stepgate.may_resume(fr.config, $3) AS may_resume
		FROM stepgate.run r
		JOIN stepgate.function_revision fr ON fr.tenant = r.tenant AND fr.name = r.function AND fr.revision = r.revision
		WHERE r.id = ANY($1::uuid[]) AND r.tenant = $2 ORDER BY r.id FOR UPDATE OF r`,
		[]string{runID, m.RunID}, tenant, identity)
	runs, err := pgx.CollectRows(rows, pgx.RowToStructByName[locked])
	if err != nil {
		return nil, nil, fmt.Errorf("lock runs %s and %s: %w", runID, m.RunID, err)
	}
	var target *locked
	owned := false
	for i := range runs {
		if runs[i].ID == runID {
			owned = runs[i].Status == StatusRunning && runs[i].Invocation == invocation
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
		sent, err = deliver(ctx, db, m, target.Status)
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
	rows, _ := db.Query(ctx, `SELECT `+messageColumns+` FROM stepgate.message WHERE tenant = $1 AND run_id = $2 AND id = $3`,
		tenant, runID, id)
	m, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Message])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get message %s of run %s: %w", id, runID, err)
	}
	return m, nil
}
