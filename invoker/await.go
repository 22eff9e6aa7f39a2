package invoker

import (
	"cmp"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/awaits"
)

// Bounds of an await and of a callback's life; the rules are protocol/awaits'.
const (
	// MaxSleep bounds a sleep, from now, and a wait's timeout.
	MaxSleep = awaits.MaxSleep
	// DefaultCallbackTimeout is how long a callback stays open when its checkpoint
	// names no timeout, until an await sets its own.
	DefaultCallbackTimeout = awaits.DefaultCallbackTimeout
	// MaxCallbackTimeout bounds a callback's timeout and an await_callback's.
	MaxCallbackTimeout = awaits.MaxCallbackTimeout
)

// await checks a suspended answer's await by the rules of protocol/awaits, with
// the JSON, errors and retry policies it holds checked as the journal stores them.
func (c answerCheck) await(w *protocol.Await) *journal.ErrorInfo {
	p := awaits.Check(w, awaits.Checks{
		MaxEntries: c.l.MaxEntries,
		JSON: func(what string, raw []byte) *awaits.Problem {
			return problemOf(c.json(what, (*protocol.AnyJSON)(&raw)))
		},
		Error: func(what string, e *protocol.ErrorInfo) *awaits.Problem { return problemOf(c.error(what, e)) },
		Retry: func(p *protocol.RetryPolicy) error {
			_, err := ParseRetryPolicy(p, RetryPolicy{})
			return err
		},
	})
	switch {
	case p == nil:
		return nil
	case p.Limit:
		return c.limit("%s", p.Message)
	}
	return c.bad("%s", p.Message)
}

// problemOf carries an answer check's error through awaits.Check, without the
// prefix of a bad answer, which answerCheck.bad adds again.
func problemOf(e *journal.ErrorInfo) *awaits.Problem {
	if e == nil {
		return nil
	}
	if e.Type == ErrorTypeLimit {
		return &awaits.Problem{Limit: true, Message: e.Message}
	}
	return &awaits.Problem{Message: strings.TrimPrefix(e.Message, badAnswer)}
}

// transition is the awaits.Store of one answer: the run's outcome its await makes, in
// the journal's terms, after the answer's steps.
type transition struct {
	inv   *Invoker
	rev   *revision
	claim *journal.Claim
	steps []journal.Entry
	o     journal.Outcome
}

// Continue: the function stopped early, at a step boundary, to stay under its
// platform's time limit (max_invocation_duration). Nothing is journaled but the
// answer's steps; the run is due at once and called again with its journal. A continue
// must follow at least one entry journaled by the invocation (its seq is past the
// journal's next seq at the claim): one that made no progress would be called again at
// once, forever, so it fails the run (bad_answer).
func (t *transition) Continue(seq int) {
	next := 1
	if n := len(t.claim.Journal); n > 0 {
		next = t.claim.Journal[n-1].Seq + 1
	}
	if seq <= next {
		t.o = journal.Failed(journal.ErrorInfo{Type: ErrorTypeBadAnswer, Message: fmt.Sprintf(
			"function's answer is not a valid protocol answer: continue at seq %d journals nothing since the invocation began (the journal's next seq was %d); an invocation must finish a step before it continues", seq, next)})
		return
	}
	t.o = journal.Resuming(t.steps...)
}

// Retry: the run waits the backoff and runs the step again. The retry policy the
// answer names is brought within the invoker's limits, and the step's attempts are
// counted from its recorded failures, never taken from the answer: a step past its
// attempts fails, whatever the function claims.
func (t *transition) Retry(r awaits.Retry) {
	policy, _ := ParseRetryPolicy(r.Policy, t.rev.config.Retries) // checked
	policy = t.inv.limits.clampRetry(policy)
	attempt := 1
	if n, ok := t.claim.StepAttempts[r.Seq]; ok {
		attempt = n
	}
	stepErr := *errorFromAPI(&r.Error)
	if attempt >= policy.MaxAttempts {
		// The step is out of attempts: journal its failure and call again at once, as
		// the SDK would have had it counted right.
		stepErr.Message = fmt.Sprintf("%s (attempt %d of %d; the gateway gives up)", stepErr.Message, attempt, policy.MaxAttempts)
		stepErr.Retryable = false
		if stepErr.Type == "" {
			stepErr.Type = "step_failed"
		}
		t.o = journal.Resuming(append(t.steps, journal.Entry{Seq: r.Seq, Kind: journal.KindStep, Name: r.Name, Attempt: attempt, Error: &stepErr})...)
		return
	}
	t.o = journal.RetryingStep(journal.StepRetry{
		Failure: journal.Failure{Seq: r.Seq, Attempt: attempt, Name: r.Name, Error: stepErr},
		After:   policy.Backoff(attempt),
	}, t.steps...)
}

// Sleep: the sleep is journaled with its wake time (a duration from the database
// clock), and a journaled sleep is done.
func (t *transition) Sleep(s awaits.Sleep) {
	t.o = journal.Sleeping(journal.Sleep{Seq: s.Seq, Name: s.Name, Until: s.Until, For: s.For}, t.steps...)
}

// Start: each child runs a function of the run's tenant (current revision) as the
// run's identity, whose invoke_roles are checked against it as the gateway checks a
// caller's; a detached child is not cancelled with the run (canceltree.CancelDescendants).
// A child's end journals its outcome at its seq, and the last one makes the run due
// (the trigger child_end_wakes_parent; docs/internals.md).
func (t *transition) Start(c awaits.Children) {
	var children []journal.Invoke
	for _, call := range c.Calls {
		in := journal.Invoke{ChildID: uuid.Must(uuid.NewV7()).String(), Function: call.Function,
			MaxTenantRuns: t.inv.limits.MaxTenantRuns, MaxTenantJournalBytes: t.inv.limits.MaxTenantJournalBytes}
		if call.Input != nil {
			in.Input = json.RawMessage(*call.Input)
		}
		in.Detached = call.Detached != nil && *call.Detached
		children = append(children, in)
	}
	if !c.All {
		in := children[0]
		in.Seq, in.Name = c.Seq, c.Name
		t.o = journal.InvokingChild(in, t.steps...)
		return
	}
	t.o = journal.InvokingChildren(journal.InvokeAll{Seq: c.Seq, Name: c.Name, Calls: children}, t.steps...)
}

// Wait: the run waits for the first of its alternatives or the timeout. What ends an
// alternative resumes the run in its own transaction (journal.ResumeWaiters for an
// event, a message's send, ResolveCallback), or the await journals one there already
// (a message in the mailbox, a resolved callback, an event a look-back finds, a run that
// has ended), and the claim after the timeout journals that it timed out. A run that
// awaits its own end fails (bad_answer): it would wait until its timeout.
func (t *transition) Wait(w awaits.Wait) {
	for _, a := range w.Of {
		if a.RunID != "" && a.RunID == strings.ToLower(t.claim.Run.ID) {
			t.o = journal.Failed(journal.ErrorInfo{Type: ErrorTypeBadAnswer, Message: fmt.Sprintf(
				"function's answer is not a valid protocol answer: await_run %q at seq %d awaits the run itself, which would wait until its timeout", w.Name, w.Seq)})
			return
		}
	}
	if !w.Any {
		t.o = t.waitFor(w.Seq, w.Name, w.Timeout, w.Of[0])
		return
	}
	any := journal.WaitAny{Seq: w.Seq, Name: w.Name, Timeout: w.Timeout}
	for _, a := range w.Of {
		any.Of = append(any.Of, t.waitFor(w.Seq, w.Name, w.Timeout, a).Await())
	}
	t.o = journal.WaitingForAny(any, t.steps...)
}

// waitFor returns the outcome of a wait for the alternative a alone. An event stored
// since the invocation started matches too, or with a look-back, since the run was
// created (since_start) or since a time (since, bounded by the event retention:
// journal.WaitEvent's LookBack). That a callback's seq is one of the run's callbacks is
// checked when the wait is stored (journal.ErrBadAwait: bad_answer).
func (t *transition) waitFor(seq int, name string, timeout time.Duration, a awaits.Alternative) journal.Outcome {
	switch {
	case a.Event != "":
		we := journal.WaitEvent{Seq: seq, Name: name, Event: a.Event, Match: a.Match, Timeout: timeout, Since: invocationStart(t.claim)}
		switch {
		case a.SinceStart:
			we.Since = t.claim.Run.CreatedAt
		case a.Since != nil:
			we.Since, we.LookBack = *a.Since, cmp.Or(t.inv.retention, DefaultRetention)
		}
		return journal.WaitingForEvent(we, t.steps...)
	case a.Topic != "":
		return journal.Receiving(journal.Receive{Seq: seq, Name: name, Topic: a.Topic, Timeout: timeout}, t.steps...)
	case a.RunID != "":
		return journal.WaitingForRun(journal.RunWait{Seq: seq, Name: name, RunID: a.RunID, Timeout: timeout}, t.steps...)
	}
	return journal.WaitingForCallback(journal.CallbackWait{Seq: seq, Name: name, CallbackSeq: a.CallbackSeq, Timeout: timeout}, t.steps...)
}

// invocationStart is when the claimed invocation started, on the database clock: events
// stored since then match its wait.
func invocationStart(claim *journal.Claim) time.Time {
	switch {
	case !claim.Now.IsZero():
		return claim.Now
	case claim.Run.StartedAt != nil:
		return *claim.Run.StartedAt
	}
	return claim.Run.CreatedAt
}
