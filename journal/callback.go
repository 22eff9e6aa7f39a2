package journal

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// KindCallback is the entry of a callback a run made (CreateCallback): its output is
// {"url", "token", "expires_at"}, made by the gateway, and kept with the token sealed
// (see CallbackKey).
const KindCallback = "callback"

// KindAwaitCallback is the entry of a run's wait for a callback (AwaitCallback),
// journaled when the wait ends: its output is the callback's resolution,
// {"data": ...} or {"error": {type, message}}, with "resolver" ("token" or
// "identity"), "resolved_at" and, for an identity, "resolved_by"; or {"timed_out": true}.
const KindAwaitCallback = AwaitCallback

// Callback states.
const (
	CallbackPending  = "pending"
	CallbackResolved = "resolved"
	CallbackRejected = "rejected"
)

// Resolvers of a callback.
const (
	ResolverToken    = "token"    // the holder of the callback's token (its URL)
	ResolverIdentity = "identity" // a caller with a JWT, by run id and name
)

// ErrBadAwait: an await names something the run does not have (a callback seq that is
// not one of its callbacks). The run fails: the answer can never be applied.
var ErrBadAwait = errors.New("journal: the await names what the run does not have")

// HashToken returns what is stored of a callback's token: its SHA-256.
func HashToken(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// NewCallback is a callback a run makes at Seq, named Name.
type NewCallback struct {
	Seq     int
	Name    string
	Token   string        // Random, made by the gateway; stored only sealed (Key) and hashed (stepgate.callback).
	URL     string        // Where it is resolved: ends with Token.
	Key     CallbackKey   // Seals Token in the journal. Required.
	Timeout time.Duration // Until it expires, from the database clock, unless an await sets another.
	Window  int           // The checkpoint's window (Entry.Window).
}

// CallbackOutput is the output of a callback entry.
type CallbackOutput struct {
	URL       string    `json:"url"`
	Token     string    `json:"token"`
	ExpiresAt time.Time `json:"expires_at"`
}

// CreateCallback journals the callback n for the invocation that owns the run, with its
// token sealed by n.Key (see CallbackKey), and stores it (pending, expiring after
// n.Timeout, by its token's SHA-256) for its resolution, and returns the entry's output
// for the function (CallbackOutput, the token in clear). A repeated checkpoint (the
// callback at n.Seq is journaled, with n's name) returns the journaled output, opened:
// the first token stays the callback's. Its errors are AppendEntry's: ErrSuperseded,
// ErrConflict (another entry at that seq), ErrGap, a *LimitError.
func CreateCallback(ctx context.Context, db DB, runID string, invocation int, n NewCallback, b Bounds) (json.RawMessage, error) {
	repeat := func(old *Entry) (json.RawMessage, error) {
		// Fenced and compared like any entry: the same, from the owner, is a no-op.
		err := AppendEntry(ctx, db, runID, invocation, Entry{Seq: n.Seq, Kind: KindCallback, Name: n.Name, Output: old.Output, Error: old.Error, Window: n.Window}, b)
		if err != nil {
			return nil, err
		}
		return n.Key.OpenCallback(old.Output)
	}
	old, err := findEntry(ctx, db, runID, n.Seq)
	if err != nil {
		return nil, err
	}
	if old != nil {
		return repeat(old)
	}
	var tenant string
	var now time.Time
	err = db.QueryRow(ctx, `SELECT tenant, now() FROM stepgate.run WHERE id = $1`, runID).Scan(&tenant, &now)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrSuperseded
	}
	if err != nil {
		return nil, fmt.Errorf("create callback of run %s: %w", runID, err)
	}
	expires := now.Add(n.Timeout).Truncate(time.Microsecond).UTC()
	out, err := json.Marshal(CallbackOutput{URL: n.URL, Token: n.Token, ExpiresAt: expires})
	if err != nil {
		return nil, fmt.Errorf("create callback of run %s: %w", runID, err)
	}
	at, _ := json.Marshal(expires) // a time.Time in range marshals
	sealed, err := n.Key.seal(n.URL, n.Token, at)
	if err != nil {
		return nil, fmt.Errorf("create callback of run %s: %w", runID, err)
	}
	err = AppendEntry(ctx, db, runID, invocation, Entry{Seq: n.Seq, Kind: KindCallback, Name: n.Name, Output: sealed, Attempt: 1, StartedAt: &now, Window: n.Window}, b)
	if errors.Is(err, ErrConflict) {
		// A repeat of this checkpoint committed since we looked: its token stands.
		if old, ferr := findEntry(ctx, db, runID, n.Seq); ferr == nil && old != nil && old.Kind == KindCallback && old.Name == n.Name {
			return repeat(old)
		}
	}
	if err != nil {
		return nil, err
	}
	if _, err := db.Exec(ctx, `
		INSERT INTO stepgate.callback (run_id, seq, tenant, name, token_hash, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6)`,
		runID, n.Seq, tenant, n.Name, HashToken(n.Token), expires); err != nil {
		return nil, fmt.Errorf("store callback %d of run %s: %w", n.Seq, runID, unstorable(err))
	}
	return out, nil
}

// findEntry returns the entry at seq of a run, or nil.
func findEntry(ctx context.Context, db DB, runID string, seq int) (*Entry, error) {
	rows, _ := db.Query(ctx, `
		SELECT `+entryColumns+` FROM stepgate.journal_entry WHERE run_id = $1 AND seq = $2`, runID, seq)
	entries, err := pgx.CollectRows(rows, pgx.RowToStructByName[Entry])
	if err != nil {
		return nil, fmt.Errorf("load entry %d of run %s: %w", seq, runID, err)
	}
	if len(entries) == 0 {
		return nil, nil
	}
	return &entries[0], nil
}

// CallbackWait suspends a run until its callback at CallbackSeq is resolved or
// rejected, or Timeout passes (0: until the callback expires); then the entry at Seq,
// of kind KindAwaitCallback named Name, journals which (see KindAwaitCallback) and the
// run is due. The wait's end becomes the callback's expiry. A callback resolved before
// the await is stored is journaled at once; one already expired journals the timeout at
// once. Finish returns ErrBadAwait when CallbackSeq is not a callback of the run.
type CallbackWait struct {
	Seq         int
	Name        string
	CallbackSeq int
	Timeout     time.Duration
}

func (a CallbackWait) awaiting() Awaiting {
	return Awaiting{Kind: AwaitCallback, Seq: a.Seq, Name: a.Name, CallbackSeq: a.CallbackSeq}
}

func (a CallbackWait) wake() (*time.Time, time.Duration, bool) { return nil, a.Timeout, a.Timeout > 0 }

// write journals the callback's resolution or its expiry at once, or stores the wait,
// under the callback's row lock (taken after the run's, which Finish holds), so that a
// resolution commits either before (and is journaled here) or after (and finds the
// wait).
func (a CallbackWait) write(ctx context.Context, db DB, aw awaitWrite, f *Finished) error {
	var state string
	var result json.RawMessage
	var expired bool
	var expiresAt time.Time
	err := db.QueryRow(ctx, `
		SELECT state, CASE WHEN state <> 'pending' THEN stepgate.callback_result(state, payload, error, resolver, resolved_by, resolved_at) END,
			expires_at, expires_at <= now()
		FROM stepgate.callback WHERE run_id = $1 AND seq = $2 FOR UPDATE`,
		aw.runID, a.CallbackSeq).Scan(&state, &result, &expiresAt, &expired)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: await_callback %q names seq %d, which is not a callback of this run", ErrBadAwait, a.Name, a.CallbackSeq)
	}
	if err != nil {
		return fmt.Errorf("read callback %d of run %s: %w", a.CallbackSeq, aw.runID, err)
	}
	switch {
	case state != CallbackPending:
	case expired:
		result = TimedOut
	default:
		return a.wait(ctx, db, aw, f, expiresAt)
	}
	_, err = db.Exec(ctx, `
		INSERT INTO stepgate.journal_entry (run_id, seq, kind, name, output, invocation, started_at, journal_bytes)
		VALUES ($1, $2, stepgate.wait_kind($6, '`+KindAwaitCallback+`'), $3, stepgate.wait_output($6, '`+KindAwaitCallback+`', $4),
			$5, now(), stepgate.journal_bytes_before($1, $2) + octet_length($4::jsonb::text))`,
		aw.runID, a.Seq, a.Name, result, aw.invocation, int16(aw.alt))
	if isUniqueViolation(err) {
		return fmt.Errorf("%w: seq %d is already journaled", ErrConflict, a.Seq)
	}
	if err != nil {
		return fmt.Errorf("journal callback of run %s: %w", aw.runID, err)
	}
	if _, err := db.Exec(ctx, `UPDATE stepgate.callback SET awaited_seq = $3 WHERE run_id = $1 AND seq = $2`,
		aw.runID, a.CallbackSeq, a.Seq); err != nil {
		return fmt.Errorf("mark callback %d of run %s awaited: %w", a.CallbackSeq, aw.runID, err)
	}
	return dueNow(ctx, db, aw.runID, f)
}

// wait stores the run's wait for its pending callback, until the await's timeout (the
// run's wake time, set by Finish) or else the callback's expiry, which becomes the
// callback's expiry either way.
func (a CallbackWait) wait(ctx context.Context, db DB, aw awaitWrite, f *Finished, expiresAt time.Time) error {
	if a.Timeout == 0 {
		err := db.QueryRow(ctx, `UPDATE stepgate.run SET wake_at = $2 WHERE id = $1 RETURNING wake_at, clock_timestamp()`,
			aw.runID, expiresAt).Scan(&f.WakeAt, &f.Clock)
		if err != nil {
			return fmt.Errorf("time the wait of run %s: %w", aw.runID, err)
		}
	}
	_, err := db.Exec(ctx, `
		WITH waiting AS (
			INSERT INTO stepgate.run_wait (run_id, seq, alt, tenant, name, kind, callback_seq, expires_at)
			VALUES (@run_id, @seq, @alt, @tenant, @name, '`+KindAwaitCallback+`', @callback_seq, @expires_at)
		)
		UPDATE stepgate.callback SET awaited_seq = @seq, expires_at = @expires_at
		WHERE run_id = @run_id AND seq = @callback_seq`,
		namedArgs{
			"run_id": aw.runID, "seq": a.Seq, "tenant": aw.tenant, "name": a.Name,
			"callback_seq": a.CallbackSeq, "expires_at": f.WakeAt, "alt": int16(aw.alt),
		})
	if isUniqueViolation(err) {
		return fmt.Errorf("%w: seq %d is already journaled", ErrConflict, a.Seq)
	}
	if err != nil {
		return fmt.Errorf("store wait of run %s: %w", aw.runID, unstorable(err))
	}
	return nil
}

// CallbackRef names the callback to resolve: by its token's hash, or (TokenHash nil)
// by the run of Tenant and the callback's name (the latest of that name).
type CallbackRef struct {
	TokenHash []byte
	Tenant    string
	RunID     string
	Name      string
}

// Resolution is what a callback is resolved with: Data, or Error for a rejection.
type Resolution struct {
	Data  json.RawMessage // Resolves it; nil is JSON null.
	Error *ErrorInfo      // Rejects it, when set.
	By    *Identity       // The caller by run id; nil for the token's holder.
}

// Callback is a run's callback.
type Callback struct {
	RunID      string     `db:"run_id"`
	Seq        int        `db:"seq"`
	Name       string     `db:"name"`
	State      string     `db:"state"`
	Resolver   *string    `db:"resolver"`
	ResolvedBy *Identity  `db:"resolved_by"`
	ResolvedAt *time.Time `db:"resolved_at"`
	ExpiresAt  time.Time  `db:"expires_at"`
	AwaitedSeq *int       `db:"awaited_seq"`
	// Woken says that the resolution resumed the run, which waited for it: the caller
	// enqueues its invocation in the same transaction.
	Woken bool `db:"-"`
	// Tenant and Function are the run's, set by ResolveCallback (for the logs).
	Tenant   string `db:"-"`
	Function string `db:"-"`
}

// ClosedCallbackError is a resolution of a callback that can no longer take one:
// resolved or rejected already, expired, or of a finished run. Reason says which, with
// the run's id and who resolved it, for the callers of the run's own tenant; Public says
// which with neither, for the holder of the callback's token.
type ClosedCallbackError struct {
	Callback *Callback
	Reason   string
	Public   string
}

func (e *ClosedCallbackError) Error() string { return e.Reason }

const callbackColumns = `run_id::text, seq, name, state, resolver, resolved_by, resolved_at, expires_at, awaited_seq`

// ResolveCallback resolves (or rejects) the callback ref names with res, once: it
// returns ErrNotFound when there is none (an unknown token, another tenant's run), and a
// *ClosedCallbackError when it was resolved or rejected already, expired, or its run
// finished. When the run waits for the callback, the resolution is journaled at the
// wait's seq, the wait is deleted and the run made due, in db's transaction
// (Callback.Woken: the caller enqueues its invocation); otherwise it is kept on the
// callback for the await to journal. The run's row is locked, then the callback's, as
// Finish does with an await_callback.
func ResolveCallback(ctx context.Context, db DB, ref CallbackRef, res Resolution) (*Callback, error) {
	var runID string
	var seq int
	var err error
	if ref.TokenHash != nil {
		err = db.QueryRow(ctx, `SELECT run_id::text, seq FROM stepgate.callback WHERE token_hash = $1`, ref.TokenHash).Scan(&runID, &seq)
	} else {
		err = db.QueryRow(ctx, `
			SELECT run_id::text, seq FROM stepgate.callback WHERE run_id = $1 AND tenant = $2 AND name = $3
			ORDER BY seq DESC LIMIT 1`, ref.RunID, ref.Tenant, ref.Name).Scan(&runID, &seq)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("find callback: %w", err)
	}
	var status Status
	var tenant, function string
	if err := db.QueryRow(ctx, `SELECT status, tenant, function FROM stepgate.run WHERE id = $1 FOR UPDATE`, runID).Scan(&status, &tenant, &function); err != nil {
		return nil, fmt.Errorf("lock run %s: %w", runID, err)
	}
	cb := Callback{Tenant: tenant, Function: function}
	var expired, waiting bool
	err = db.QueryRow(ctx, `
		SELECT `+callbackColumns+`, expires_at <= now(),
			EXISTS (SELECT 1 FROM stepgate.run_wait w WHERE w.run_id = c.run_id AND w.seq = c.awaited_seq
				AND w.kind = '`+KindAwaitCallback+`' AND w.callback_seq = c.seq)
		FROM stepgate.callback c WHERE run_id = $1 AND seq = $2 FOR UPDATE`, runID, seq).
		Scan(&cb.RunID, &cb.Seq, &cb.Name, &cb.State, &cb.Resolver, &cb.ResolvedBy, &cb.ResolvedAt, &cb.ExpiresAt, &cb.AwaitedSeq,
			&expired, &waiting)
	if err != nil {
		return nil, fmt.Errorf("lock callback %d of run %s: %w", seq, runID, err)
	}
	what := fmt.Sprintf("callback %q (seq %d) of run %s", cb.Name, cb.Seq, cb.RunID)
	switch {
	case cb.State != CallbackPending:
		by := "the holder of its token"
		if cb.ResolvedBy != nil {
			by = cb.ResolvedBy.Subject
		}
		return nil, &ClosedCallbackError{&cb, fmt.Sprintf("%s is already %s: at %s by %s; a callback is resolved once",
			what, cb.State, cb.ResolvedAt.UTC().Format(time.RFC3339), by),
			fmt.Sprintf("this callback is already %s; a callback is resolved once", cb.State)}
	case expired || (cb.AwaitedSeq != nil && !waiting && !status.Terminal()):
		// (A wait that ended without a resolution timed out: the callback expired with it.)
		return nil, &ClosedCallbackError{&cb, fmt.Sprintf("%s expired at %s, unresolved", what, cb.ExpiresAt.UTC().Format(time.RFC3339)),
			"this callback expired, unresolved"}
	case status.Terminal():
		return nil, &ClosedCallbackError{&cb, fmt.Sprintf("%s can no longer be resolved: the run is %s", what, status),
			"this callback can no longer be resolved: its run has finished"}
	}
	state, resolver := CallbackResolved, ResolverToken
	if res.Error != nil {
		state = CallbackRejected
	}
	if res.By != nil {
		resolver = ResolverIdentity
	}
	data := res.Data
	if res.Error == nil && len(data) == 0 {
		data = json.RawMessage("null")
	}
	err = db.QueryRow(ctx, `
		UPDATE stepgate.callback SET state = @state, payload = @payload, error = @error, resolver = @resolver,
			resolved_by = @by, resolved_at = now()
		WHERE run_id = @run_id AND seq = @seq
		RETURNING state, resolver, resolved_by, resolved_at`,
		namedArgs{"run_id": runID, "seq": seq, "state": state, "payload": data, "error": res.Error, "resolver": resolver, "by": res.By}).
		Scan(&cb.State, &cb.Resolver, &cb.ResolvedBy, &cb.ResolvedAt)
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", what, unstorable(err))
	}
	if !waiting {
		return &cb, nil
	}
	err = db.QueryRow(ctx, `
		WITH gone_all AS (
			-- With the callback's wait go the other alternatives of a wait_any.
			DELETE FROM stepgate.run_wait WHERE run_id = @run_id AND seq = @awaited_seq
			RETURNING seq, alt, name, kind, callback_seq
		), gone AS (
			SELECT seq, alt, name FROM gone_all WHERE kind = '`+KindAwaitCallback+`' AND callback_seq = @seq
		), woken AS (
			UPDATE stepgate.run SET wake_at = now() WHERE id = @run_id AND status = 'suspended' AND EXISTS (SELECT 1 FROM gone)
			RETURNING id, invocation
		), out AS (
			SELECT stepgate.callback_result(state, payload, error, resolver, resolved_by, resolved_at) AS output
			FROM stepgate.callback WHERE run_id = @run_id AND seq = @seq
		), entry AS (
			INSERT INTO stepgate.journal_entry (run_id, seq, kind, name, output, invocation, started_at, journal_bytes)
			SELECT woken.id, gone.seq, stepgate.wait_kind(gone.alt, '`+KindAwaitCallback+`'), gone.name,
				stepgate.wait_output(gone.alt, '`+KindAwaitCallback+`', out.output), woken.invocation, now(),
				stepgate.journal_bytes_before(woken.id, gone.seq) + octet_length(out.output::text)
			FROM woken, gone, out
			ON CONFLICT (run_id, seq) DO NOTHING
		)
		SELECT EXISTS (SELECT 1 FROM woken)`,
		namedArgs{"run_id": runID, "seq": seq, "awaited_seq": *cb.AwaitedSeq}).Scan(&cb.Woken)
	if err != nil {
		return nil, fmt.Errorf("resume run %s with %s: %w", runID, what, err)
	}
	return &cb, nil
}
