package journal

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// KindCallback is the entry of a callback a run made (CreateCallback): its output is
// {"url", "token", "expires_at"}, made by the gateway, and kept with the token sealed
// (see CallbackKey).
const KindCallback = "callback"

// KindAwaitCallback is the entry of a run's wait for a callback (awaitCallback),
// journaled when the wait ends: its output is the callback's resolution,
// {"data": ...} or {"error": {type, message}}, with "resolver" ("token" or
// "identity"), "resolved_at" and, for an identity, "resolved_by"; or {"timed_out": true}.
const KindAwaitCallback = awaitCallback

// Callback states.
const (
	callbackPending  = "pending"
	callbackResolved = "resolved"
	callbackRejected = "rejected"
)

// Resolvers of a callback.
const (
	ResolverToken    = "token"    // the holder of the callback's token (its URL)
	resolverIdentity = "identity" // a caller with a JWT, by run id and name
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
	q := dbsqlc.New(db)
	run, err := q.CallbackRunTenant(ctx, runID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrSuperseded
	}
	if err != nil {
		return nil, fmt.Errorf("create callback of run %s: %w", runID, err)
	}
	tenant, now := run.Tenant, run.Now
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
	err = q.CallbackCreate(ctx, dbsqlc.CallbackCreateParams{
		RunID: runID, Seq: int32(n.Seq), Tenant: tenant, Name: n.Name, TokenHash: HashToken(n.Token), ExpiresAt: expires,
	})
	if err != nil {
		return nil, fmt.Errorf("store callback %d of run %s: %w", n.Seq, runID, unstorable(err))
	}
	return out, nil
}

// findEntry returns the entry at seq of a run, or nil.
func findEntry(ctx context.Context, db DB, runID string, seq int) (*Entry, error) {
	r, err := dbsqlc.New(db).CallbackEntry(ctx, dbsqlc.CallbackEntryParams{RunID: runID, Seq: int32(seq)})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load entry %d of run %s: %w", seq, runID, err)
	}
	e := Entry{
		Seq: int(r.Seq), Kind: r.Kind, Name: r.Name, Output: r.Output, Attempt: int(r.Attempt),
		WakeAt: r.WakeAt, StartedAt: r.StartedAt, FinishedAt: r.FinishedAt, Copied: r.Copied,
	}
	// Decoded as pgx decodes it into Entry.Error: SQL NULL leaves it nil.
	if r.Error != nil {
		if err := json.Unmarshal(r.Error, &e.Error); err != nil {
			return nil, fmt.Errorf("load entry %d of run %s: %w", seq, runID, err)
		}
	}
	return &e, nil
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
	return Awaiting{Kind: awaitCallback, Seq: a.Seq, Name: a.Name, CallbackSeq: a.CallbackSeq}
}

func (a CallbackWait) wake() (*time.Time, time.Duration, bool) { return nil, a.Timeout, a.Timeout > 0 }

// write journals the callback's resolution or its expiry at once, or stores the wait,
// under the callback's row lock (taken after the run's, which Finish holds), so that a
// resolution commits either before (and is journaled here) or after (and finds the
// wait).
func (a CallbackWait) write(ctx context.Context, db DB, aw awaitWrite, f *Finished) error {
	q := dbsqlc.New(db)
	cb, err := q.CallbackLockForAwait(ctx, dbsqlc.CallbackLockForAwaitParams{Tenant: aw.tenant, RunID: aw.runID, Seq: int32(a.CallbackSeq)})
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: await_callback %q names seq %d, which is not a callback of this run", ErrBadAwait, a.Name, a.CallbackSeq)
	}
	if err != nil {
		return fmt.Errorf("read callback %d of run %s: %w", a.CallbackSeq, aw.runID, err)
	}
	result := cb.Result
	switch {
	case cb.State != callbackPending:
	case cb.Expired:
		result = timedOut
	default:
		return a.wait(ctx, q, aw, f, cb.ExpiresAt)
	}
	err = q.CallbackJournalAwait(ctx, dbsqlc.CallbackJournalAwaitParams{
		Tenant: aw.tenant, RunID: aw.runID, Seq: int32(a.Seq), Alt: int16(aw.alt), Name: a.Name, Output: result, Invocation: int32(aw.invocation),
	})
	if isUniqueViolation(err) {
		return fmt.Errorf("%w: seq %d is already journaled", ErrConflict, a.Seq)
	}
	if err != nil {
		return fmt.Errorf("journal callback of run %s: %w", aw.runID, err)
	}
	err = q.CallbackMarkAwaited(ctx, dbsqlc.CallbackMarkAwaitedParams{Tenant: aw.tenant, RunID: aw.runID, Seq: int32(a.CallbackSeq), AwaitedSeq: int32(a.Seq)})
	if err != nil {
		return fmt.Errorf("mark callback %d of run %s awaited: %w", a.CallbackSeq, aw.runID, err)
	}
	return dueNow(ctx, db, aw.runID, f)
}

// wait stores the run's wait for its pending callback, until the await's timeout (the
// run's wake time, set by Finish) or else the callback's expiry, which becomes the
// callback's expiry either way.
func (a CallbackWait) wait(ctx context.Context, q *dbsqlc.Queries, aw awaitWrite, f *Finished, expiresAt time.Time) error {
	if a.Timeout == 0 {
		r, err := q.CallbackTimeWait(ctx, dbsqlc.CallbackTimeWaitParams{RunID: aw.runID, WakeAt: &expiresAt})
		if err != nil {
			return fmt.Errorf("time the wait of run %s: %w", aw.runID, err)
		}
		f.WakeAt, f.Clock = r.WakeAt, r.Clock
	}
	if f.WakeAt == nil {
		// (Finish times every await_callback: its timeout, or the callback's expiry above.)
		return fmt.Errorf("store wait of run %s: it has no wake time", aw.runID)
	}
	err := q.CallbackStoreWait(ctx, dbsqlc.CallbackStoreWaitParams{
		RunID: aw.runID, Seq: int32(a.Seq), Alt: int16(aw.alt), Tenant: aw.tenant, Name: a.Name,
		CallbackSeq: int32(a.CallbackSeq), ExpiresAt: *f.WakeAt,
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

// mayResolveCallbacks checks that id may resolve the callbacks of the run runID of tenant
// by name, or list them with their tokens (OpenCallbacks), as it may resume the run by
// an event or a message: when the run's revision lets id resume it (its invoke_roles and
// resume_roles, or admin: stepgate.may_resume, as access.Identity.MayResume decides). It
// returns ErrNotFound when tenant has no such run, and a *ResumeForbiddenError (with
// Callbacks set) when id may not, whatever the run's status. A callback's token needs
// no such check: it is the credential.
func mayResolveCallbacks(ctx context.Context, db DB, tenant, runID string, id Identity) error {
	identity, err := json.Marshal(id)
	if err != nil {
		return fmt.Errorf("check the roles of run %s: %w", runID, err)
	}
	r, err := dbsqlc.New(db).CallbackMayResolve(ctx, dbsqlc.CallbackMayResolveParams{Identity: identity, RunID: runID, Tenant: tenant})
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("check the roles of run %s: %w", runID, err)
	}
	if !r.MayResume {
		e := resumeForbidden(runID, r.Function, r.Config, id.Roles)
		e.Callbacks = true
		return e
	}
	return nil
}

// ResolveCallback resolves (or rejects) the callback ref names with res, once: it
// returns ErrNotFound when there is none (an unknown token, another tenant's run), and a
// *ClosedCallbackError when it was resolved or rejected already, expired, or its run
// finished. Named by its run and name, it needs res.By, whom the run's revision must let
// resolve it (mayResolveCallbacks: a *ResumeForbiddenError, checked first). When the run waits for the callback, the resolution is journaled at the
// wait's seq, the wait is deleted and the run made due, in db's transaction
// (Callback.Woken: the caller enqueues its invocation); otherwise it is kept on the
// callback for the await to journal. The run's row is locked, then the callback's, as
// Finish does with an await_callback.
func ResolveCallback(ctx context.Context, db DB, ref CallbackRef, res Resolution) (*Callback, error) {
	q := dbsqlc.New(db)
	var found dbsqlc.CallbackByTokenRow
	var err error
	switch {
	case ref.TokenHash != nil:
		found, err = q.CallbackByToken(ctx, ref.TokenHash)
	case res.By == nil:
		return nil, errors.New("journal: resolving a callback by its run and name needs the caller's identity")
	default:
		if err := mayResolveCallbacks(ctx, db, ref.Tenant, ref.RunID, *res.By); err != nil {
			return nil, err
		}
		var r dbsqlc.CallbackByNameRow
		r, err = q.CallbackByName(ctx, dbsqlc.CallbackByNameParams{RunID: ref.RunID, Tenant: ref.Tenant, Name: ref.Name})
		found = dbsqlc.CallbackByTokenRow(r)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("find callback: %w", err)
	}
	runID, seq := found.RunID, found.Seq
	run, err := q.CallbackLockRun(ctx, runID)
	if err != nil {
		return nil, fmt.Errorf("lock run %s: %w", runID, err)
	}
	status := Status(run.Status)
	locked, err := q.CallbackLock(ctx, dbsqlc.CallbackLockParams{Tenant: run.Tenant, RunID: runID, Seq: seq})
	if err != nil {
		return nil, fmt.Errorf("lock callback %d of run %s: %w", seq, runID, err)
	}
	cb := Callback{
		RunID: locked.RunID, Seq: int(locked.Seq), Name: locked.Name, State: locked.State, Resolver: locked.Resolver,
		ResolvedBy: locked.ResolvedBy, ResolvedAt: locked.ResolvedAt, ExpiresAt: locked.ExpiresAt,
		Tenant: run.Tenant, Function: run.Function,
	}
	if locked.AwaitedSeq != nil {
		awaited := int(*locked.AwaitedSeq)
		cb.AwaitedSeq = &awaited
	}
	expired, waiting := locked.Expired, locked.Waiting
	what := fmt.Sprintf("callback %q (seq %d) of run %s", cb.Name, cb.Seq, cb.RunID)
	switch {
	case cb.State != callbackPending:
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
	state, resolver := callbackResolved, ResolverToken
	if res.Error != nil {
		state = callbackRejected
	}
	if res.By != nil {
		resolver = resolverIdentity
	}
	data := res.Data
	if res.Error == nil && len(data) == 0 {
		data = json.RawMessage("null")
	}
	var rejection json.RawMessage
	if res.Error != nil {
		if rejection, err = json.Marshal(res.Error); err != nil {
			return nil, fmt.Errorf("resolve %s: %w", what, unstorable(err))
		}
	}
	resolved, err := q.CallbackResolve(ctx, dbsqlc.CallbackResolveParams{
		Tenant: run.Tenant, RunID: runID, Seq: seq, State: state, Payload: data, Error: rejection, Resolver: &resolver, ResolvedBy: res.By,
	})
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", what, unstorable(err))
	}
	cb.State, cb.Resolver, cb.ResolvedBy, cb.ResolvedAt = resolved.State, resolved.Resolver, resolved.ResolvedBy, resolved.ResolvedAt
	if !waiting {
		return &cb, nil
	}
	cb.Woken, err = q.CallbackResume(ctx, dbsqlc.CallbackResumeParams{Tenant: run.Tenant, RunID: runID, Seq: seq, AwaitedSeq: int32(*cb.AwaitedSeq)})
	if err != nil {
		return nil, fmt.Errorf("resume run %s with %s: %w", runID, what, err)
	}
	return &cb, nil
}

// FreshCallbacks makes the callbacks a rerun copies (CopyEntries) fresh: each gets a
// token of its own, sealed in its entry, so that the old run's token never reaches the
// new run nor resolves its callback.
type FreshCallbacks struct {
	Key      CallbackKey                // Seals the fresh tokens. Required when a copy holds a callback.
	NewToken func() (token, url string) // A fresh random token and the URL that resolves it. Required as Key.
}

// copyCallbacks copies the callback entries of the tenant's run from before seq before
// into to's journal, each as a fresh callback (see CopyEntries), and returns how many.
func copyCallbacks(ctx context.Context, q *dbsqlc.Queries, tenant, from, to string, before int, fresh FreshCallbacks) (int, error) {
	rows, err := q.RunCopyCallbacks(ctx, dbsqlc.RunCopyCallbacksParams{Tenant: tenant, FromRun: from, Before: int32(before)})
	if err != nil {
		return 0, fmt.Errorf("load callbacks of run %s before %d: %w", from, before, err)
	}
	if len(rows) > 0 && (len(fresh.Key) == 0 || fresh.NewToken == nil) {
		return 0, fmt.Errorf("copy callbacks of run %s: no callback key or token maker", from)
	}
	for _, r := range rows {
		var old struct {
			ExpiresAt time.Time `json:"expires_at"`
		}
		if err := json.Unmarshal(r.Output, &old); err != nil {
			return 0, fmt.Errorf("copy callback %d of run %s: %w", r.Seq, from, err)
		}
		token, url := fresh.NewToken()
		p := dbsqlc.RunCopyCallbackParams{
			ToRun: to, FromRun: from, Tenant: tenant, Seq: r.Seq, Name: r.Name, Attempt: r.Attempt,
			TokenHash: HashToken(token), JournalBytes: r.JournalBytes,
		}
		shown := old.ExpiresAt
		if r.AwaitCopied && r.State != nil && r.ExpiresAt != nil {
			// The replay journals nothing new of it: it stays as it was.
			p.State, p.Payload, p.Error, p.Resolver, p.ResolvedBy, p.ResolvedAt = *r.State, r.Payload, r.Error, r.Resolver, r.ResolvedBy, r.ResolvedAt
			p.AwaitedSeq, p.ExpiresAt = r.AwaitedSeq, *r.ExpiresAt
			p.StartedAt, p.FinishedAt = r.StartedAt, r.FinishedAt
		} else {
			made := r.FinishedAt
			if r.StartedAt != nil {
				made = *r.StartedAt
			}
			shown = r.Now.Add(old.ExpiresAt.Sub(made)).Truncate(time.Microsecond).UTC()
			p.State, p.ExpiresAt = callbackPending, shown
			p.StartedAt, p.FinishedAt = &r.Now, r.Now
		}
		at, _ := json.Marshal(shown) // a time.Time in range marshals
		if p.Output, err = fresh.Key.seal(url, token, at); err != nil {
			return 0, fmt.Errorf("copy callback %d of run %s: %w", r.Seq, from, err)
		}
		if err := q.RunCopyCallback(ctx, p); err != nil {
			return 0, fmt.Errorf("copy callback %d of run %s: %w", r.Seq, from, unstorable(err))
		}
	}
	return len(rows), nil
}
