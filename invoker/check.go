package invoker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/stepgate/stepgate/invoker/internal/call"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/appcheck"
	"github.com/stepgate/stepgate/protocol"
)

// A check replays the journals of a function's live runs against an app's new code
// before a sync registers it (POST /v1/apps?check=true): each run is sent to the new
// code as a replay-only invocation (InvocationRequest replay_only), which the SDK
// answers with what the code would do next, or where it parts from the journal, having
// run no step body. A check writes nothing to the runs it replays: the invocation is
// not a claim (the run's invocation number, lease and status stay as they are), its
// checkpoint token is one no checkpoint accepts (ReplayOnlyToken), and its callbacks'
// tokens are masked.

// ReplayOnlyToken is the checkpoint token of a replay-only invocation: it is no
// invocation token, so any checkpoint, claim, event or message sent with it is refused
// (401), should an SDK try.
const ReplayOnlyToken = "replay-only"

// MaxReplayTime bounds one replay-only invocation of a check, whatever the function's
// timeout.
const MaxReplayTime = 10 * time.Second

// replaysAtOnce is how many replay-only invocations of one function a check makes at
// once.
const replaysAtOnce = 4

// checkPageBytes bounds each page of a journal a check reads, in bytes (Entry.Size).
const checkPageBytes = 8 << 20

// CheckBudget is what a whole check may send of its runs' inputs and journal entries,
// in bytes (len of the input, Entry.Size of each entry: outputs and errors, as
// STEPGATE_MAX_JOURNAL_BYTES counts them), shared by its replays. A run is charged as
// its journal is read, a page at a time; a run whose input and whole journal cannot be
// charged is not read further nor sent (its replay is a failed one, naming the bound),
// and gives back what it was charged. So the check sends at most the bound of inputs
// and journals, and reads at most that much besides one page per replay being read (at
// most checkPageBytes, or one entry larger than that).
type CheckBudget struct {
	bound int64
	mu    sync.Mutex
	left  int64
}

// NewCheckBudget returns the budget of a check that may send bound bytes.
func NewCheckBudget(bound int64) *CheckBudget {
	return &CheckBudget{bound: bound, left: bound}
}

// take charges n bytes and reports true, or charges nothing and reports false when
// fewer than n are left.
func (b *CheckBudget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.left {
		return false
	}
	b.left -= n
	return true
}

// give gives back n bytes charged to a replay that is not sent.
func (b *CheckBudget) give(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.left += n
}

func (b *CheckBudget) remaining() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.left
}

// exceeded is the failure of a replay not sent because its run would pass the bound.
func (b *CheckBudget) exceeded() *journal.ErrorInfo {
	return &journal.ErrorInfo{Type: ErrorTypeLimit, Message: fmt.Sprintf(
		"not replayed: the run's input and journal would take the check past its bound of %d bytes of runs' inputs and journals sent in all", b.bound)}
}

// CheckTarget is a function of an app whose new code a check replays live runs against.
type CheckTarget struct {
	Function string
	URL      string        // where the new code serves it
	Timeout  time.Duration // the new config's timeout: a replay takes at most this and MaxReplayTime
}

// ReplayCheck is what the replay of one live run found: the code's answer (Replay), or
// how the replay-only invocation failed (Error).
type ReplayCheck struct {
	RunID    string
	Revision int // the revision the run is on
	Replay   *protocol.ReplayOutcome
	Error    *journal.ErrorInfo
}

// Clean reports whether the run replayed without a divergence.
func (r ReplayCheck) Clean() bool {
	return r.Error == nil && r.Replay != nil && r.Replay.Divergence == nil
}

// LiveCheck is what a check of one function found.
type LiveCheck struct {
	Live    int  // runs not ended with a journal (appcheck.LiveRunsToCheck)
	More    bool // more runs not ended than the check looks at
	Replays []ReplayCheck
}

// CheckLiveRuns replays up to sample live runs of t.Function in db's tenant
// (appcheck.LiveRunsToCheck) against the code at t.URL, as replay-only invocations signed
// with the tenant's keys over its egress client, a few at once, and returns what each
// found. Each run's input and journal are charged to budget, shared by the whole check,
// as they are read; a run past it is not sent, and is a failed replay of type
// limit_exceeded naming the bound. A run that ends or goes before its replay is read is
// left out. It returns an error only when the database could not be read; ctx bounds
// the whole check (a replay it cuts short is a failed one).
func (inv *Invoker) CheckLiveRuns(ctx context.Context, db *journal.TenantDB, t CheckTarget, sample int, budget *CheckBudget) (*LiveCheck, error) {
	live, err := appcheck.LiveRunsToCheck(ctx, db, db.Tenant(), t.Function, sample)
	if err != nil {
		return nil, fmt.Errorf("live runs of %s: %w", t.Function, err)
	}
	out := &LiveCheck{Live: live.Live, More: live.More}
	replays := make([]*ReplayCheck, len(live.Sample))
	errs := make([]error, len(live.Sample))
	var wg sync.WaitGroup
	slots := make(chan struct{}, replaysAtOnce)
	for i, ref := range live.Sample {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			replays[i], errs[i] = inv.replayLive(ctx, db, t, ref, budget)
		})
	}
	wg.Wait()
	for i, r := range replays {
		if errs[i] != nil {
			return nil, errs[i]
		}
		if r != nil {
			out.Replays = append(out.Replays, *r)
		}
	}
	return out, nil
}

// replayLive reads the live run ref, charging budget, and replays it against t; nil
// when the run is gone.
func (inv *Invoker) replayLive(ctx context.Context, db *journal.TenantDB, t CheckTarget, ref appcheck.LiveRunRef, budget *CheckBudget) (*ReplayCheck, error) {
	run, entries, charged, err := readForReplay(ctx, db, ref.ID, budget)
	if errors.Is(err, journal.ErrNotFound) {
		budget.give(charged)
		return nil, nil
	}
	if err != nil {
		budget.give(charged)
		return nil, fmt.Errorf("read run %s: %w", ref.ID, err)
	}
	out := &ReplayCheck{RunID: ref.ID, Revision: ref.Revision}
	if run == nil {
		budget.give(charged)
		out.Error = budget.exceeded()
		return out, nil
	}
	attempts, err := journal.StepAttempts(ctx, db, ref.ID)
	if err != nil {
		return nil, fmt.Errorf("read step attempts of run %s: %w", ref.ID, err)
	}
	out.Replay, out.Error = inv.replayOnly(ctx, t, run, entries, attempts)
	return out, nil
}

// readForReplay reads the run id and its whole journal, a page at a time, charging
// budget with its input and each page, and returns what it charged. When budget
// cannot pay for a page it stops there and returns no run.
func readForReplay(ctx context.Context, db *journal.TenantDB, id string, budget *CheckBudget) (*journal.Run, []journal.Entry, int64, error) {
	var run *journal.Run
	var entries []journal.Entry
	var charged int64
	for after := 0; ; {
		left := budget.remaining()
		if left <= 0 {
			return nil, nil, charged, nil
		}
		d, err := journal.GetRunDetail(ctx, db, db.Tenant(), id, journal.JournalPage{
			After: after, Limit: 1000, MaxBytes: min(left, checkPageBytes), NoFailures: true,
		})
		if err != nil {
			return nil, nil, charged, err
		}
		n := int64(0)
		if run == nil {
			run = d.Run
			n += int64(len(run.Input))
		}
		for _, e := range d.Journal {
			n += e.Size()
		}
		if !budget.take(n) {
			return nil, nil, charged, nil
		}
		charged += n
		entries = append(entries, d.Journal...)
		if d.Next == 0 {
			return run, entries, charged, nil
		}
		after = d.Next
	}
}

// replayOnly sends run's journal to the code at t as a replay-only invocation and
// returns its answer's replay, or how it failed.
func (inv *Invoker) replayOnly(ctx context.Context, t CheckTarget, run *journal.Run, entries []journal.Entry, attempts map[int]int) (*protocol.ReplayOutcome, *journal.ErrorInfo) {
	timeout := min(t.Timeout, MaxReplayTime)
	if timeout <= 0 {
		timeout = MaxReplayTime
	}
	req := invocationRequest(run, len(entries), attempts)
	req.Run.Attempt = run.Invocations + 1 // as the run's next invocation, which is not claimed
	req.ReplayOnly = new(true)
	req.Deadline = new(time.Now().Add(timeout))
	req.Checkpoint = protocol.Checkpoint{URL: inv.checkpointURL(run.ID), Token: ReplayOnlyToken}
	for _, e := range entries {
		req.Journal = append(req.Journal, entryToAPI(journal.MaskCallback(e)))
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, &journal.ErrorInfo{Type: call.ErrorTypeRequest, Message: "encode invocation: " + err.Error()}
	}
	target := call.Target{URL: t.URL, Tenant: run.Tenant, Timeout: timeout, LogAttrs: []slog.Attr{
		slog.String("run_id", run.ID), slog.String("function", run.Function), slog.String("tenant", run.Tenant), slog.Bool("replay_only", true),
	}}
	var replay *protocol.ReplayOutcome
	failure := inv.caller.Call(ctx, target, body, func(raw []byte) *journal.ErrorInfo {
		var e *journal.ErrorInfo
		replay, e = decodeReplay(raw)
		return e
	})
	if failure != nil {
		return nil, failure
	}
	return replay, nil
}

// ErrorTypeNotReplayed: a replay-only invocation was answered with something other
// than a replay (status replayed with a next or a divergence).
const ErrorTypeNotReplayed = "not_replayed"

// maxReplayName bounds a name the check keeps of a replay's answer, in bytes.
const maxReplayName = 200

// decodeReplay reads the answer to a replay-only invocation.
func decodeReplay(raw []byte) (*protocol.ReplayOutcome, *journal.ErrorInfo) {
	var a protocol.InvocationAnswer
	if err := json.Unmarshal(raw, &a); err != nil {
		return nil, &journal.ErrorInfo{Type: "malformed_answer", Message: fmt.Sprintf(
			"function's answer is not a JSON protocol answer (%v): %s", trimJSONErr(err), call.Snippet(raw))}
	}
	switch {
	case a.Status != protocol.AnswerStatusReplayed:
		return nil, &journal.ErrorInfo{Type: ErrorTypeNotReplayed, Message: fmt.Sprintf(
			"the function answered status %q to a replay-only invocation, not %q", a.Status, protocol.AnswerStatusReplayed)}
	case a.Replay == nil || (a.Replay.Next == nil) == (a.Replay.Divergence == nil):
		return nil, &journal.ErrorInfo{Type: ErrorTypeNotReplayed, Message: "the function answered status replayed without exactly one of replay.next and replay.divergence"}
	}
	r := a.Replay
	cutStep(r.Next)
	if d := r.Divergence; d != nil {
		cutStep(&d.Journal)
		cutStep(&d.Asked)
	}
	return r, nil
}

// cutStep cuts the kind and name of s to maxReplayName bytes (s may be nil).
func cutStep(s *protocol.ReplayStep) {
	if s == nil {
		return
	}
	s.Kind, s.Name = cut(s.Kind), cut(s.Name)
}

func cut(s string) string {
	if len(s) <= maxReplayName {
		return s
	}
	return strings.ToValidUTF8(s[:maxReplayName], "") + "…"
}
