package invoker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"go.opentelemetry.io/otel/trace"

	"github.com/stepgate/stepgate/invoker/internal/call"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/storable"
	"github.com/stepgate/stepgate/protocol"
)

// Result is where a run stands after an invocation was applied.
type Result struct {
	RunID  string
	Status journal.Status
	Output json.RawMessage
	Error  *journal.ErrorInfo
}

// tokenGrace is how long past its function's timeout an invocation's checkpoint token
// stays valid: the function may checkpoint until the gateway's call gives up on it.
const tokenGrace = time.Minute

// resumeDue claims runID if it is due and invokes it. It returns journal.ErrNotDue when
// the run is not due (or another invocation owns it), and a *journal.HeldError when a
// concurrency limit holds it. With notify, a later terminal
// update is announced to other gateways, because the caller waits for the run.
func (inv *Invoker) resumeDue(ctx context.Context, runID string, notify bool) (*Result, error) {
	rev, err := inv.functions.revisionOfRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	return inv.resume(ctx, rev, runID, notify, 0)
}

// resume claims runID if it is due and invokes it; a claim made deletes backstop, the
// run's River job, while no worker has it (journal.ClaimWokenRun; 0: none). A run of a
// revision with concurrency limits is claimed with its slots: without room it is held,
// and resume returns a *journal.HeldError.
func (inv *Invoker) resume(ctx context.Context, rev *revision, runID string, notify bool, backstop int64) (*Result, error) {
	var c *journal.Claim
	var err error
	if len(rev.config.Concurrency) > 0 {
		c, err = journal.ClaimRunSlots(ctx, inv.pool, runID, inv.leaseTTL)
	} else {
		c, err = journal.ClaimWokenRun(ctx, inv.pool, runID, inv.leaseTTL, backstop)
	}
	if err != nil {
		return nil, err
	}
	return inv.invoke(ctx, rev, c, notify)
}

// invokeNew invokes a run that journal.CreateRun created already claimed (with a
// lease), so its first invocation needs no queue hop and no claim.
func (inv *Invoker) invokeNew(ctx context.Context, run *journal.Run, notify bool) (*Result, error) {
	rev, err := inv.functions.revision(ctx, run.Tenant, run.Function, run.Revision)
	if err != nil {
		return nil, err
	}
	return inv.invoke(ctx, rev, &journal.Claim{Run: run}, notify)
}

// invoke makes one invocation of a claimed run and applies its outcome. The run's lease
// is renewed meanwhile (lease.go); when it is lost, or this gateway hands the run over
// as it stops, the call is abandoned and its answer dropped.
func (inv *Invoker) invoke(ctx context.Context, rev *revision, claim *journal.Claim, notify bool) (res *Result, err error) {
	run := claim.Run
	log := inv.log.With(slog.String("run_id", run.ID), slog.String("function", run.Function), slog.String("tenant", run.Tenant))
	// The invocation and its outcome outlive the request or job that started them.
	ctx = context.WithoutCancel(ctx)
	callCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	call, untrack := inv.track(journal.Lease{RunID: run.ID, Invocation: run.Invocation}, cancel)
	defer untrack()
	if run.Invocation == 1 {
		inv.metrics.RunStarted(run.Function, run.Tenant)
	}
	steps := lastSeq(claim.Journal) // the run's journal entries, once it has answered
	defer func() {
		if err == nil && res.Status.Terminal() {
			inv.metrics.RunFinished(run.Function, run.Tenant, string(res.Status), max(steps, int(call.seq.Load())))
			inv.traceRunEnd(ctx, run, res.Status, res.Error)
		}
	}()
	switch {
	case run.FailedInARow >= rev.config.Retries.MaxAttempts:
		// Its retry policy changed under it; a failed invocation past it fails the run.
		return inv.apply(ctx, log, rev, run, failedBeforeCall("attempts_exhausted",
			fmt.Sprintf("gave up after %d failed invocations", run.FailedInARow)), notify)
	case run.RecoveriesInARow > inv.maxRecoveries:
		return inv.apply(ctx, log, rev, run, failedBeforeCall(ErrorTypeMaxRecoveries, fmt.Sprintf(
			"the run was recovered %d times in a row without a new journal entry (each time its gateway died, stopped or lost the database "+
				"during its invocation), more than the limit of %d (STEPGATE_MAX_RECOVERIES)", run.RecoveriesInARow, inv.maxRecoveries)), notify)
	}
	if e := inv.overBounds(claim.Journal); e != nil {
		// Entries journaled without a checkpoint (a child's outcome) passed a bound.
		return inv.apply(ctx, log, rev, run, journal.FailedBeforeCall(*e), notify)
	}
	callCtx, span := inv.startInvocation(callCtx, rev, run)
	if span != nil {
		call.span = span.SpanContext() // the parent of its checkpoints' spans
	}
	var answer *protocol.InvocationAnswer
	var failure *journal.ErrorInfo
	waitErr := inv.untilNotBefore(callCtx, claim)
	began := time.Now()
	if waitErr != nil {
		// Its lease went elsewhere, or this gateway hands it over, before its wake time.
		failure = &journal.ErrorInfo{Type: "abandoned", Message: waitErr.Error()}
	} else {
		answer, failure = inv.call(callCtx, rev, claim)
	}
	took := time.Since(began)
	if cause := context.Cause(callCtx); cause != nil && !errors.Is(cause, context.Canceled) {
		inv.metrics.Invocation(run.Function, "abandoned", took)
		inv.endInvocation(span, "abandoned", &journal.ErrorInfo{Type: "abandoned", Message: cause.Error()})
		if errors.Is(cause, errRunFailed) {
			// A checkpoint failed the run (failInvocation, which knows only its id).
			inv.metrics.RunFinished(run.Function, run.Tenant, string(journal.StatusFailed), max(steps, int(call.seq.Load())))
			inv.traceRunEnd(ctx, run, journal.StatusFailed, nil)
		}
		// The run's end committed, or its lease went to another gateway, before the call
		// was abandoned: any answer is refused.
		log.InfoContext(ctx, "invocation abandoned: "+strings.TrimPrefix(cause.Error(), "invoker: "), slog.Int("invocation", run.Invocation))
		return nil, journal.ErrSuperseded
	}
	var o journal.Outcome
	switch {
	case failure != nil && (failure.Type == ErrorTypeBadAnswer || failure.Type == ErrorTypeLimit):
		// The answer can never be applied (it breaks the protocol or a bound): retrying
		// the invocation would meet it again.
		o = journal.InvocationFailed(*failure)
		log.WarnContext(ctx, "invocation answered what cannot be applied; the run fails", slog.String("error", failure.Message))
	case failure != nil:
		o = inv.failedInvocation(rev, run, failure)
		log.WarnContext(ctx, "invocation failed", slog.Int("attempt", run.Invocations), slog.String("error", failure.Message))
	case answer.Status == protocol.AnswerStatusFailed && answer.Error != nil && answer.Error.Type == ErrorTypeSuperseded:
		// The function was refused the run's claim (checkpointCurrent) while this
		// invocation owns the run: a copy of its signed request, in another process,
		// claimed the invocation first. That copy's steps are journaled, its answer went
		// elsewhere: the run goes on in a new invocation, which replays them. (When this
		// invocation no longer owns the run, applying the outcome finds it superseded.)
		o = inv.failedInvocation(rev, run, &journal.ErrorInfo{Type: ErrorTypeSuperseded, Message: answer.Error.Message})
		log.WarnContext(ctx, "invocation refused the run's claim; retrying", slog.Int("attempt", run.Invocations), slog.String("error", answer.Error.Message))
	default:
		o = inv.outcomeOf(rev, claim, answer)
	}
	outcome := "error"
	if failure == nil {
		outcome = string(answer.Status)
	}
	inv.metrics.Invocation(run.Function, outcome, took)
	steps = max(steps, lastSeq(o.Steps))
	o.Notify = notify
	if span == nil {
		return inv.apply(ctx, log, rev, run, o, notify)
	}
	res, err = inv.apply(ctx, log, rev, run, o, notify)
	if err == nil {
		spanCtx := trace.ContextWithSpan(ctx, span)
		inv.traceEntries(spanCtx, span.SpanContext(), run.ID, o.Steps)
		if res.Status == journal.StatusSuspended && answer != nil {
			inv.traceAwait(spanCtx, run.ID, answer.Await)
		}
	}
	inv.endInvocation(span, outcome, failure)
	return res, err
}

// lastSeq returns the seq of the last of entries, 0 for none.
func lastSeq(entries []journal.Entry) int {
	if len(entries) == 0 {
		return 0
	}
	return entries[len(entries)-1].Seq
}

// failedInvocation retries a failed invocation per the function's policy, or fails the
// run when it has no attempts left.
func (inv *Invoker) failedInvocation(rev *revision, run *journal.Run, failure *journal.ErrorInfo) journal.Outcome {
	failed := run.FailedInARow + 1
	max := rev.config.Retries.MaxAttempts
	if failed >= max {
		e := *failure
		e.Message = fmt.Sprintf("%s (attempt %d of %d; giving up)", e.Message, failed, max)
		e.Retryable = false
		return journal.InvocationFailed(e)
	}
	e := *failure
	e.Retryable = true
	return journal.RetryingInvocation(e, rev.config.Retries.Backoff(failed))
}

// failedBeforeCall is the outcome of a run that fails now, before its claim calls the
// function, with an error of type typ.
func failedBeforeCall(typ, msg string) journal.Outcome {
	return journal.FailedBeforeCall(journal.ErrorInfo{Type: typ, Message: msg})
}

// overBounds returns the limit_exceeded error of a journal past the invoker's bounds, or
// nil.
func (inv *Invoker) overBounds(entries []journal.Entry) *journal.ErrorInfo {
	var bytes int64
	for _, e := range entries {
		bytes += e.Size()
	}
	b := inv.limits.Bounds()
	switch {
	case len(entries) > b.MaxEntries:
		return &journal.ErrorInfo{Type: ErrorTypeLimit, Message: fmt.Sprintf(
			"the journal holds %d entries, more than its limit of %d (STEPGATE_MAX_JOURNAL_ENTRIES)", len(entries), b.MaxEntries)}
	case bytes > b.MaxJournalBytes:
		return &journal.ErrorInfo{Type: ErrorTypeLimit, Message: fmt.Sprintf(
			"the journal holds %d bytes, more than its limit of %d (STEPGATE_MAX_JOURNAL_BYTES)", bytes, b.MaxJournalBytes)}
	}
	return nil
}

// Error types the invoker fails runs with.
const (
	// ErrorTypeBadAnswer: the function answered something that can never be applied
	// (an unknown status, an invalid await, entries that break the journal's rules,
	// values Postgres cannot store). The run fails without a retry.
	ErrorTypeBadAnswer = "bad_answer"
	// ErrorTypeLimit: the run passed one of the gateway's limits, which the message
	// names (an answer larger than Config.MaxAnswerBytes among them). The run fails
	// without a retry.
	ErrorTypeLimit = call.ErrorTypeLimit
	// ErrorTypeNondeterminism: the function's entries contradict its journal.
	ErrorTypeNondeterminism = "nondeterminism"
	// ErrorTypeMaxRecoveries: the run was recovered (its gateway died or stopped during
	// its invocation) more times in a row than the gateway's limit.
	ErrorTypeMaxRecoveries = "max_recoveries"
	// ErrorTypeSuperseded: the function stopped because its invocation did not own the
	// run. Answered by an invocation that still owns it, the claim of the invocation
	// went to a copy of its signed request in another process (ClaimInvocation): a
	// failed invocation, retried per the function's policy, never the run's end.
	ErrorTypeSuperseded = "superseded"
	// ErrorTypeProtocolVersion: the function answered with a Stepgate-Protocol header
	// naming a protocol version this gateway does not serve (another major, or a greater
	// minor: protocol.CheckSDKVersion), or that is not a version; the message names both
	// versions. A failed invocation, retried per the function's policy, not the run's
	// end: during a rolling deploy, of the app (some instances on an SDK of another
	// protocol version) or of the gateways (a newer gateway serves the newer minor), the
	// next invocation may reach a peer that speaks a version served, and the function's
	// retry policy bounds the tries. What the function checkpointed stays journaled;
	// the retry replays it.
	ErrorTypeProtocolVersion = call.ErrorTypeProtocolVersion
)

// call sends one invocation (package call) and returns the function's answer, or the
// failure of the invocation as a whole (it did not answer, or answered something that
// is not a valid answer), described for the people reading the run.
func (inv *Invoker) call(ctx context.Context, rev *revision, claim *journal.Claim) (*protocol.InvocationAnswer, *journal.ErrorInfo) {
	run := claim.Run
	req := invocationRequest(run, len(claim.Journal), claim.StepAttempts)
	req.Deadline = new(time.Now().Add(rev.config.Timeout))
	for _, e := range claim.Journal {
		if e.Kind == journal.KindCallback && e.Output != nil {
			// The run's own function gets its callbacks' tokens, sealed in the journal.
			key, err := inv.callbackKeyOf(ctx)
			if err == nil {
				e.Output, err = key.OpenCallback(e.Output)
			}
			if err != nil {
				return nil, &journal.ErrorInfo{Type: call.ErrorTypeRequest, Message: fmt.Sprintf("callback %d %q: %v", e.Seq, e.Name, err)}
			}
		}
		req.Journal = append(req.Journal, entryToAPI(e))
	}
	target := call.Target{URL: rev.url, Tenant: run.Tenant, Timeout: rev.config.Timeout, LogAttrs: []slog.Attr{
		slog.String("run_id", run.ID), slog.String("function", run.Function), slog.String("tenant", run.Tenant), slog.Int("invocation", run.Invocation),
	}}
	var answer *protocol.InvocationAnswer
	decode := func(raw []byte) (failure *journal.ErrorInfo) {
		answer, failure = inv.limits.decodeAnswer(raw)
		return failure
	}
	if rev.config.Duplex && !inv.duplexOff && !rev.requestOnly.Load() {
		// Its checkpoints come on its own exchange: no token, and no way back but it.
		req.Mode = new(protocol.InvocationRequestModeDuplex)
		req.Checkpoint = protocol.Checkpoint{URL: inv.checkpointURL(run.ID), Token: DuplexToken}
		body, err := json.Marshal(req)
		if err != nil {
			return nil, &journal.ErrorInfo{Type: call.ErrorTypeRequest, Message: "encode invocation: " + err.Error()}
		}
		in := Invocation{RunID: run.ID, Number: run.Invocation}
		failure := inv.caller.Duplex(ctx, target, body, func(ctx context.Context, f *protocol.Frame) protocol.FrameAck {
			return inv.serveFrame(ctx, run, in, f)
		}, decode)
		if failure == nil || failure.Type != call.ErrorTypeNotDuplex {
			return answer, failure
		}
		// No frame was served, so nothing was journaled and no step body ran (none runs
		// before its claim's proof): the same invocation goes again, in request/response
		// mode, as every later one of this revision from this gateway.
		if !rev.requestOnly.Swap(true) {
			inv.log.WarnContext(ctx, "the function did not answer a duplex invocation as frames; this gateway calls it in request/response mode from now on",
				slog.String("function", run.Function), slog.String("tenant", run.Tenant), slog.Int("revision", run.Revision), slog.String("error", failure.Message))
		}
		req.Mode = nil
	}
	req.Checkpoint = protocol.Checkpoint{
		URL:   inv.checkpointURL(run.ID),
		Token: inv.tokens.Issue(ctx, run.ID, run.Invocation, time.Now().Add(rev.config.Timeout+tokenGrace)),
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, &journal.ErrorInfo{Type: call.ErrorTypeRequest, Message: "encode invocation: " + err.Error()}
	}
	if failure := inv.caller.Call(ctx, target, body, decode); failure != nil {
		return nil, failure
	}
	return answer, nil
}

// invocationRequest is the invocation of run with room for entries journal entries and
// its steps' next attempts, without its journal, checkpoint and deadline.
func invocationRequest(run *journal.Run, entries int, stepAttempts map[int]int) protocol.InvocationRequest {
	req := protocol.InvocationRequest{
		Protocol: 1,
		Run: protocol.InvocationRun{
			ID: run.ID, Function: run.Function, Revision: run.Revision, Attempt: run.Invocations,
			Input: protocol.AnyJSON(run.Input), ParentID: run.ParentID, CreatedAt: run.CreatedAt,
		},
		Identity: run.Identity,
		Journal:  make([]protocol.JournalEntry, 0, entries),
	}
	if len(stepAttempts) > 0 {
		m := make(map[string]int, len(stepAttempts))
		for seq, n := range stepAttempts {
			m[strconv.Itoa(seq)] = n
		}
		req.StepAttempts = &m
	}
	return req
}

// checkpointURL is where the function checkpoints an invocation of run runID.
func (inv *Invoker) checkpointURL(runID string) string {
	return inv.checkpoint + "/v1/runs/" + runID + "/checkpoint"
}

// apply commits the outcome, with the River jobs that make the next moves (the run's
// wake-up, its child's start, or its parent's wake-up when it was a child), and then
// arms local timers for them and tells local waiters.
func (inv *Invoker) apply(ctx context.Context, log *slog.Logger, rev *revision, run *journal.Run, o journal.Outcome, notify bool) (*Result, error) {
	var f *journal.Finished
	var finishedAt time.Time // local time when Finish returned, to relate f.Clock to ours
	var wakeJob int64        // the River job of the run's own wake-up (finishTx)
	var err error
	began := time.Now()
	defer func() { inv.metrics.Apply(time.Since(began)) }()
	err = inv.whileUnavailable(log, func() error {
		if o.Status().Terminal() && run.ParentSeq == nil {
			// One round trip, no transaction of ours, on the hot path of a short function:
			// one statement, or with the step an SDK sent in the answer one batch. (A
			// child's end wakes its parent, whose job commits with it.)
			if len(o.Steps) == 0 {
				f, err = journal.Finish(ctx, inv.pool, run.ID, run.Invocation, o)
				return err
			}
			if f, err = journal.FinishWithLastStep(ctx, inv.pool, run.ID, run.Invocation, o); !errors.Is(err, journal.ErrNeedsTransaction) {
				return err
			}
		}
		return pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
			var err error
			f, wakeJob, err = inv.finishTx(ctx, tx, run, o)
			finishedAt = time.Now()
			return err
		})
	})
	if e := unappliable(err); e != nil {
		// The answer's entries contradict the journal, leave a gap in it, pass a bound
		// or hold what cannot be stored: the run fails, with what was wrong. An end
		// refused for the journal's holes keeps the answer's steps, which could be
		// journaled: only the end was wrong.
		var steps []journal.Entry
		if _, holes := errors.AsType[*journal.HolesError](err); holes {
			steps = o.Steps
		}
		bounds := o.Bounds
		o = journal.InvocationFailed(*e)
		o.Steps, o.Bounds, o.Notify = steps, bounds, notify
		err = inv.whileUnavailable(log, func() error {
			return pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
				var err error
				f, wakeJob, err = inv.finishTx(ctx, tx, run, o)
				return err
			})
		})
	}
	if errors.Is(err, journal.ErrSuperseded) {
		log.InfoContext(ctx, "invocation superseded; its answer is dropped", slog.Int("invocation", run.Invocation))
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("apply answer of run %s: %w", run.ID, err)
	}
	// A parent's or a new child's River job is available at the commit, and River's
	// producer, told of it then, races this process's claim for it: the claim does not
	// delete it (backstop 0), so that what a run costs does not depend on who wins.
	if f.Parent != "" {
		inv.wake(f.Parent, nil, 0)
	}
	children := f.Children
	if f.Child != nil {
		children = append(children, f.Child)
	}
	for _, c := range children {
		if crev, err := inv.functions.revision(ctx, c.Tenant, c.Function, c.Revision); err == nil {
			inv.wake(c.ID, crev, 0)
		} // else its River job starts it
		inv.armDeadline(c)
		log.DebugContext(ctx, "run waits for its child", slog.String("child_id", c.ID), slog.String("child_function", c.Function))
	}
	res := &Result{RunID: run.ID, Status: f.Status, Output: o.Output(), Error: o.Error()}
	switch {
	case len(children) > 0 && f.WakeAt == nil:
	case f.Status == journal.StatusSuspended || f.Status == journal.StatusQueued:
		// Time the wake-up on the database clock, less what the commit took since. A
		// wake beyond the lead of the maintenance passes is theirs to arm when it
		// comes near (maintenance.NewWakes): nothing of a run that waits long stays in memory.
		if d := f.WakeAt.Sub(f.Clock); d <= inv.wakeLead() && f.Status == journal.StatusSuspended {
			inv.armWake(run.ID, rev, *f.WakeAt, d-time.Since(finishedAt), wakeJob)
		} else if d <= inv.wakeLead() {
			inv.armTimer(run.ID, rev, d-time.Since(finishedAt), 0, wakeJob)
		}
		log.DebugContext(ctx, "run waits", slog.String("status", string(f.Status)), slog.Time("wake_at", *f.WakeAt))
	default:
		if run.Deadline != nil {
			inv.timers.cancel(deadlineTimer(run.ID)) // armed when it was near (deadline.go)
		}
		inv.listener.Signal(run.ID)
		log.InfoContext(ctx, "run finished", slog.String("status", string(f.Status)))
	}
	return res, nil
}

// whileUnavailable calls write until it returns anything but a sign that the database
// is unreachable (journal.IsUnavailable), backing off between tries, or until this
// process stops. So an answer the gateway could not write is kept and written once the
// database is back; if its lease was lost meanwhile, the write finds it superseded.
func (inv *Invoker) whileUnavailable(log *slog.Logger, write func() error) error {
	delay := 50 * time.Millisecond
	for tries := 1; ; tries++ {
		err := write()
		if !journal.IsUnavailable(err) {
			if tries > 1 && err == nil {
				log.Info("the database is back; the invocation's answer is written", slog.Int("tries", tries))
			}
			return err
		}
		if tries == 1 {
			log.Warn("the database is unreachable; the invocation's answer is kept and written again until it is back", slog.Any("error", err))
		}
		t := time.NewTimer(delay)
		select {
		case <-inv.bg.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// unappliable returns the error a run fails with when applying an answer (or a
// checkpoint) failed with err because of what the function sent, or nil.
func unappliable(err error) *journal.ErrorInfo {
	var le *journal.LimitError
	var qe *journal.QuotaError
	switch {
	case errors.Is(err, journal.ErrConflict):
		return &journal.ErrorInfo{Type: ErrorTypeNondeterminism, Message: strings.TrimPrefix(err.Error(), journal.ErrConflict.Error()+": ")}
	case errors.As(err, &le):
		return &journal.ErrorInfo{Type: ErrorTypeLimit, Message: le.Message}
	case errors.As(err, &qe):
		return &journal.ErrorInfo{Type: ErrorTypeLimit, Message: qe.Message}
	case errors.Is(err, journal.ErrGap), errors.Is(err, storable.ErrUnstorable), errors.Is(err, journal.ErrBadAwait):
		return &journal.ErrorInfo{Type: ErrorTypeBadAnswer, Message: err.Error()}
	}
	return nil
}

// finishTx applies o to run in tx with the River jobs of its next moves: the run's own
// wake-up when it is due at a time, its child's start when it invokes one, and its
// parent's wake-up when it was a child and its end woke the parent. It returns the id of
// the run's own wake-up job (0: none), which the wake that claims the run deletes.
func (inv *Invoker) finishTx(ctx context.Context, tx pgx.Tx, run *journal.Run, o journal.Outcome) (f *journal.Finished, wakeJob int64, err error) {
	if f, err = journal.Finish(ctx, tx, run.ID, run.Invocation, o); err != nil {
		return nil, 0, err
	}
	var jobs []river.InsertManyParams
	if f.WakeAt != nil {
		jobs = append(jobs, river.InsertManyParams{Args: invokeJob(run), InsertOpts: &river.InsertOpts{ScheduledAt: *f.WakeAt}})
	}
	children := f.Children
	if f.Child != nil {
		children = append(children, f.Child)
	}
	for _, c := range children {
		jobs = append(jobs, river.InsertManyParams{Args: invokeJob(c)})
		if c.Deadline != nil {
			jobs = append(jobs, deadlineJob(c.ID, *c.Deadline))
		}
	}
	if f.Parent != "" {
		// Finish names the parent only: its priority is read from its row (a child's end
		// costs this one statement more; a run's other answers none).
		parent, _, err := journal.RunJobs(ctx, tx, []string{f.Parent})
		if err != nil {
			return nil, 0, err
		}
		for _, p := range parent {
			jobs = append(jobs, river.InsertManyParams{Args: runJob(p)})
		}
	}
	if len(jobs) > 0 {
		inserted, err := inv.river.InsertManyTx(ctx, tx, jobs)
		if err != nil {
			return nil, 0, fmt.Errorf("enqueue next moves of run %s: %w", run.ID, err)
		}
		if f.WakeAt != nil { // the wake-up is the first job
			wakeJob = inserted[0].Job.ID
		}
	}
	return f, wakeJob, nil
}
