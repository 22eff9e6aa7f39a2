package invoker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions/signature"
	"github.com/stepgate/stepgate/gateway/api"
	"github.com/stepgate/stepgate/journal"
)

// Result is where a run stands after an invocation was applied.
type Result struct {
	RunID  string
	Status journal.Status
	Output json.RawMessage
	Error  *journal.ErrorInfo
}

// LeaseGrace returns how long past its function's timeout an invocation's lease lasts.
func (inv *Invoker) LeaseGrace() time.Duration { return inv.leaseGrace }

// lease returns how long a new invocation of a function with config fc owns its run.
func (inv *Invoker) lease(fc FunctionConfig) time.Duration { return fc.Timeout + inv.leaseGrace }

// Resume claims runID if it is due and invokes it. It returns journal.ErrNotDue when
// the run is not due (or another invocation owns it). With notify, a later terminal
// update is announced to other gateways, because the caller waits for the run.
func (inv *Invoker) Resume(ctx context.Context, runID string, notify bool) (*Result, error) {
	rev, err := inv.revisionOfRun(ctx, runID)
	if err != nil {
		return nil, err
	}
	return inv.resume(ctx, rev, runID, notify)
}

func (inv *Invoker) resume(ctx context.Context, rev *revision, runID string, notify bool) (*Result, error) {
	claim, err := journal.ClaimRun(ctx, inv.pool, runID, inv.lease(rev.config))
	if err != nil {
		return nil, err
	}
	return inv.invoke(ctx, rev, claim, notify)
}

// InvokeNew invokes a run that journal.CreateRun created already claimed (with a
// lease), so its first invocation needs no queue hop and no claim.
func (inv *Invoker) InvokeNew(ctx context.Context, run *journal.Run, notify bool) (*Result, error) {
	rev, err := inv.revision(ctx, run.Tenant, run.Function, run.Revision)
	if err != nil {
		return nil, err
	}
	return inv.invoke(ctx, rev, &journal.Claim{Run: run}, notify)
}

// Config returns the config of a function revision (cached: revisions are immutable).
func (inv *Invoker) Config(ctx context.Context, tenant, function string, revision int) (FunctionConfig, error) {
	rev, err := inv.revision(ctx, tenant, function, revision)
	if err != nil {
		return FunctionConfig{}, err
	}
	return rev.config, nil
}

type revisionKey struct {
	tenant, name string
	revision     int
}

type revision struct {
	url    string
	config FunctionConfig
}

func (inv *Invoker) revision(ctx context.Context, tenant, name string, rev int) (*revision, error) {
	key := revisionKey{tenant, name, rev}
	if r, ok := inv.revisions.Load(key); ok {
		return r.(*revision), nil
	}
	fn, err := journal.GetRevision(ctx, inv.pool, tenant, name, rev)
	if err != nil {
		return nil, err
	}
	fc, err := ParseConfig(fn.Config)
	if err != nil {
		return nil, fmt.Errorf("function %s revision %d: %w", name, rev, err)
	}
	r := &revision{url: fn.URL, config: fc}
	inv.revisions.Store(key, r)
	return r, nil
}

func (inv *Invoker) revisionOfRun(ctx context.Context, runID string) (*revision, error) {
	var tenant, function string
	var rev int
	err := inv.pool.QueryRow(ctx, `SELECT tenant, function, revision FROM stepgate.run WHERE id = $1`, runID).
		Scan(&tenant, &function, &rev)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, journal.ErrNotDue
	}
	if err != nil {
		return nil, fmt.Errorf("load run %s: %w", runID, err)
	}
	return inv.revision(ctx, tenant, function, rev)
}

// invoke makes one invocation of a claimed run and applies its outcome.
func (inv *Invoker) invoke(ctx context.Context, rev *revision, claim *journal.Claim, notify bool) (*Result, error) {
	run := claim.Run
	log := inv.log.With(slog.String("run_id", run.ID), slog.String("function", run.Function))
	// The invocation and its outcome outlive the request or job that started them.
	ctx = context.WithoutCancel(ctx)
	if run.FailedInvocations >= rev.config.Retries.MaxAttempts {
		// Its last invocation failed and was not retried in time (its lease expired).
		return inv.apply(ctx, log, rev, run, journal.Outcome{Status: journal.StatusFailed, Error: &journal.ErrorInfo{
			Type:    "attempts_exhausted",
			Message: fmt.Sprintf("gave up after %d failed invocations", run.FailedInvocations),
		}}, notify)
	}
	callCtx, cancel := context.WithCancelCause(ctx)
	untrack := inv.track(run.ID, cancel)
	answer, failure := inv.call(callCtx, rev, claim)
	untrack()
	cancel(nil)
	if errors.Is(context.Cause(callCtx), errRunCancelled) {
		// The cancellation committed before the call was abandoned: any answer is refused.
		log.InfoContext(ctx, "invocation abandoned: the run was cancelled", slog.Int("invocation", run.Invocation))
		return nil, journal.ErrSuperseded
	}
	var o journal.Outcome
	if failure != nil {
		o = inv.failedInvocation(rev, run, failure)
		log.WarnContext(ctx, "invocation failed", slog.Int("attempt", run.Attempts), slog.String("error", failure.Message))
	} else {
		o = outcomeOf(rev, run, answer)
	}
	o.Notify = notify
	return inv.apply(ctx, log, rev, run, o, notify)
}

// failedInvocation retries a failed invocation per the function's policy, or fails the
// run when it has no attempts left.
func (inv *Invoker) failedInvocation(rev *revision, run *journal.Run, failure *journal.ErrorInfo) journal.Outcome {
	failed := run.FailedInvocations + 1
	max := rev.config.Retries.MaxAttempts
	if failed >= max {
		e := *failure
		e.Message = fmt.Sprintf("%s (attempt %d of %d; giving up)", e.Message, failed, max)
		e.Retryable = false
		return journal.Outcome{Status: journal.StatusFailed, Error: &e}
	}
	e := *failure
	e.Retryable = true
	return journal.Outcome{Status: journal.StatusQueued, Error: &e, WakeAfter: rev.config.Retries.Backoff(failed)}
}

// outcomeOf reads a well-formed answer of an invocation of run; a malformed one was
// already refused by call.
func outcomeOf(rev *revision, run *journal.Run, a *api.InvocationAnswer) journal.Outcome {
	var o journal.Outcome
	if a.Steps != nil {
		for _, s := range *a.Steps {
			o.Steps = append(o.Steps, EntryFromAPI(s))
		}
	}
	switch a.Status {
	case api.AnswerStatusCompleted:
		o.Status, o.Output = journal.StatusCompleted, json.RawMessage("null")
		if a.Output != nil && len(*a.Output) > 0 {
			o.Output = json.RawMessage(*a.Output)
		}
	case api.AnswerStatusFailed:
		o.Status, o.Error = journal.StatusFailed, ErrorFromAPI(a.Error)
		o.Error.Retryable = false
	case api.AnswerStatusSuspended:
		w := a.Await
		o.Status = journal.StatusSuspended
		switch w.Type {
		case api.AwaitTypeSleep:
			o.Sleep = &journal.Entry{Seq: w.Seq, Kind: journal.KindSleep, Name: w.Name, WakeAt: w.Until}
			if w.Until == nil {
				d, _ := time.ParseDuration(*w.Duration) // checked by call
				o.SleepFor = d
			}
		case api.AwaitTypeRetry:
			policy, _ := ParseRetryPolicy(w.Retry, rev.config.Retries) // checked by call
			attempt := 1
			if w.Attempt != nil {
				attempt = *w.Attempt
			}
			o.StepFailure = &journal.Failure{Seq: w.Seq, Attempt: attempt, Name: w.Name, Error: *ErrorFromAPI(w.Error)}
			o.WakeAfter = policy.Backoff(attempt)
		case api.AwaitTypeInvoke:
			o.Invoke = &journal.Invoke{
				Seq: w.Seq, Name: w.Name, ChildID: uuid.Must(uuid.NewV7()).String(), Function: *w.Function,
				// The child runs as the run's identity: its invoke_roles are checked
				// against that identity, as the gateway checks a caller's.
				CheckInvokeRoles: !auth.Identity(run.Identity).IsAdmin(),
			}
			if w.Input != nil {
				o.Invoke.Input = json.RawMessage(*w.Input)
			}
		}
	}
	return o
}

// call sends one invocation and returns the function's answer, or the failure of the
// invocation as a whole (it did not answer, or answered something that is not a valid
// answer), described for the people reading the run.
func (inv *Invoker) call(ctx context.Context, rev *revision, claim *journal.Claim) (*api.InvocationAnswer, *journal.ErrorInfo) {
	run := claim.Run
	req := api.InvocationRequest{
		Protocol: 1,
		Run: api.InvocationRun{
			Id: run.ID, Function: run.Function, Revision: run.Revision, Attempt: run.Attempts,
			Input: api.AnyJSON(run.Input), ParentId: run.ParentID, CreatedAt: run.CreatedAt,
		},
		Identity: IdentityToAPI(run.Identity),
		Journal:  make([]api.JournalEntry, 0, len(claim.Journal)),
		Checkpoint: api.Checkpoint{
			Url:   inv.checkpoint + "/v1/runs/" + run.ID + "/checkpoint",
			Token: inv.tokens.Issue(ctx, run.ID, run.Invocation, time.Now().Add(inv.lease(rev.config))),
		},
	}
	for _, e := range claim.Journal {
		req.Journal = append(req.Journal, EntryToAPI(e))
	}
	if len(claim.StepAttempts) > 0 {
		m := make(map[string]int, len(claim.StepAttempts))
		for seq, n := range claim.StepAttempts {
			m[strconv.Itoa(seq)] = n
		}
		req.StepAttempts = &m
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, &journal.ErrorInfo{Type: "request", Message: "encode invocation: " + err.Error()}
	}
	ctx, cancel := context.WithTimeout(ctx, rev.config.Timeout)
	defer cancel()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, rev.url, bytes.NewReader(body))
	if err != nil {
		return nil, &journal.ErrorInfo{Type: "request", Message: fmt.Sprintf("bad function URL %q: %v", rev.url, err)}
	}
	sig, err := inv.keys.Sign(ctx, run.Tenant, body, time.Now())
	if err != nil {
		return nil, &journal.ErrorInfo{Type: "request", Message: "sign invocation: " + err.Error()}
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set(signature.Header, sig)
	resp, err := inv.client.Do(hreq)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, &journal.ErrorInfo{Type: "timeout", Message: fmt.Sprintf("function did not answer within its timeout of %s", rev.config.Timeout)}
		}
		return nil, &journal.ErrorInfo{Type: "connection", Message: "could not reach the function: " + trimErr(err)}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, inv.maxAnswer+1))
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, &journal.ErrorInfo{Type: "timeout", Message: fmt.Sprintf("function did not finish its answer within its timeout of %s", rev.config.Timeout)}
		}
		return nil, &journal.ErrorInfo{Type: "connection", Message: "reading the function's answer: " + trimErr(err)}
	}
	if resp.StatusCode != http.StatusOK {
		if loc := resp.Header.Get("Location"); loc != "" && resp.StatusCode >= 300 && resp.StatusCode < 400 {
			return nil, &journal.ErrorInfo{Type: "http_status", Message: fmt.Sprintf(
				"function answered HTTP %d, a redirect to %s, which the gateway does not follow: register the URL it redirects to", resp.StatusCode, snippet([]byte(loc)))}
		}
		return nil, &journal.ErrorInfo{Type: "http_status", Message: fmt.Sprintf("function answered HTTP %d: %s", resp.StatusCode, snippet(raw))}
	}
	if int64(len(raw)) > inv.maxAnswer {
		return nil, &journal.ErrorInfo{Type: "bad_answer", Message: fmt.Sprintf("function's answer is larger than %d bytes", inv.maxAnswer)}
	}
	var a api.InvocationAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, &journal.ErrorInfo{Type: "bad_answer", Message: fmt.Sprintf("function's answer is not valid JSON (%v): %s", err, snippet(raw))}
	}
	if msg := validateAnswer(&a); msg != "" {
		return nil, &journal.ErrorInfo{Type: "bad_answer", Message: "function's answer is not a valid protocol answer: " + msg}
	}
	return &a, nil
}

func validateAnswer(a *api.InvocationAnswer) string {
	if a.Steps != nil {
		for _, s := range *a.Steps {
			if s.Seq < 1 || s.Name == "" || s.Kind != api.EntryKindStep {
				return fmt.Sprintf("steps: entry %d %q is not a finished step", s.Seq, s.Name)
			}
		}
	}
	switch a.Status {
	case api.AnswerStatusCompleted:
	case api.AnswerStatusFailed:
		if a.Error == nil || a.Error.Message == "" {
			return `status "failed" needs an error with a message`
		}
	case api.AnswerStatusSuspended:
		w := a.Await
		if w == nil {
			return `status "suspended" needs an await`
		}
		if w.Seq < 1 || w.Name == "" {
			return "await needs a seq from 1 and a name"
		}
		switch w.Type {
		case api.AwaitTypeSleep:
			if w.Until == nil && w.Duration == nil {
				return "a sleep needs until or duration"
			}
			if w.Duration != nil {
				if d, err := time.ParseDuration(*w.Duration); err != nil || d < 0 {
					return fmt.Sprintf("sleep duration %q is not a duration such as 1s", *w.Duration)
				}
			}
		case api.AwaitTypeRetry:
			if w.Error == nil {
				return "a retry needs the step's error"
			}
			if _, err := ParseRetryPolicy(w.Retry, RetryPolicy{}); err != nil {
				return "retry: " + err.Error()
			}
		case api.AwaitTypeInvoke:
			if w.Function == nil || !FunctionName.MatchString(*w.Function) {
				return "an invoke needs a function: letters, digits, '.', '_', '-', 1 to 128 characters"
			}
		default:
			return fmt.Sprintf("await type %q is not supported (sleep, retry, invoke)", w.Type)
		}
	default:
		return fmt.Sprintf("status %q is not one of completed, failed, suspended", a.Status)
	}
	return ""
}

// FunctionName is what a function's name may be: letters, digits, '.', '_' and '-', 1
// to 128 characters, starting with a letter or digit.
var FunctionName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

func snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	if s == "" {
		return "(empty body)"
	}
	return s
}

func trimErr(err error) string {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) && ue.Unwrap() != nil {
		return ue.Unwrap().Error()
	}
	return err.Error()
}

// apply commits the outcome, with the River jobs that make the next moves (the run's
// wake-up, its child's start, or its parent's wake-up when it was a child), and then
// arms local timers for them and tells local waiters.
func (inv *Invoker) apply(ctx context.Context, log *slog.Logger, rev *revision, run *journal.Run, o journal.Outcome, notify bool) (*Result, error) {
	var f *journal.Finished
	var finishedAt time.Time // local time when Finish returned, to relate f.Clock to ours
	var err error
	if o.Status.Terminal() && len(o.Steps) == 0 && run.ParentSeq == nil {
		// One statement: no transaction round trips on the hot path of a short function.
		// (A child's end wakes its parent, whose job commits with it.)
		f, err = journal.Finish(ctx, inv.pool, run.ID, run.Invocation, o)
	} else {
		err = pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
			var err error
			f, err = inv.finishTx(ctx, tx, run, o)
			finishedAt = time.Now()
			return err
		})
	}
	if errors.Is(err, journal.ErrConflict) {
		// The answer's entries contradict the journal: the function is not deterministic.
		e := journal.ErrorInfo{Type: "nondeterminism", Message: err.Error()}
		o = journal.Outcome{Status: journal.StatusFailed, Error: &e, Notify: notify}
		err = pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
			var err error
			f, err = inv.finishTx(ctx, tx, run, o)
			return err
		})
	}
	if errors.Is(err, journal.ErrSuperseded) {
		log.InfoContext(ctx, "invocation superseded; its answer is dropped", slog.Int("invocation", run.Invocation))
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("apply answer of run %s: %w", run.ID, err)
	}
	if f.Parent != "" {
		inv.Wake(f.Parent)
	}
	switch {
	case f.Child != nil:
		c := f.Child
		if crev, err := inv.revision(ctx, c.Tenant, c.Function, c.Revision); err == nil {
			inv.armTimer(c.ID, crev, 0, 0)
		} // else its River job starts it
		log.DebugContext(ctx, "run waits for its child", slog.String("child_id", c.ID), slog.String("child_function", c.Function))
	case f.Status == journal.StatusSuspended || f.Status == journal.StatusQueued:
		// Time the wake-up on the database clock, less what the commit took since.
		inv.armTimer(run.ID, rev, f.WakeAt.Sub(f.Clock)-time.Since(finishedAt), 0)
		log.DebugContext(ctx, "run waits", slog.String("status", string(f.Status)), slog.Time("wake_at", *f.WakeAt))
	default:
		inv.waiters.signal(run.ID)
		log.InfoContext(ctx, "run finished", slog.String("status", string(f.Status)))
	}
	return &Result{RunID: run.ID, Status: f.Status, Output: o.Output, Error: o.Error}, nil
}

// finishTx applies o to run in tx with the River jobs of its next moves: the run's own
// wake-up when it is due at a time, its child's start when it invokes one, and its
// parent's wake-up when it was a child and its end woke the parent.
func (inv *Invoker) finishTx(ctx context.Context, tx pgx.Tx, run *journal.Run, o journal.Outcome) (*journal.Finished, error) {
	f, err := journal.Finish(ctx, tx, run.ID, run.Invocation, o)
	if err != nil {
		return nil, err
	}
	var jobs []river.InsertManyParams
	if f.WakeAt != nil {
		jobs = append(jobs, river.InsertManyParams{Args: InvokeArgs{RunID: run.ID}, InsertOpts: &river.InsertOpts{ScheduledAt: *f.WakeAt}})
	}
	if f.Child != nil {
		jobs = append(jobs, river.InsertManyParams{Args: InvokeArgs{RunID: f.Child.ID}})
	}
	if f.Parent != "" {
		jobs = append(jobs, river.InsertManyParams{Args: InvokeArgs{RunID: f.Parent}})
	}
	if len(jobs) > 0 {
		if _, err := inv.river.InsertManyTx(ctx, tx, jobs); err != nil {
			return nil, fmt.Errorf("enqueue next moves of run %s: %w", run.ID, err)
		}
	}
	return f, nil
}
