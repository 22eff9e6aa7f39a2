package functionstest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/awaits"
	"github.com/stepgate/stepgate/protocol/signature"
)

// ExportFormat is the format of a run export (protocol.RunExport) that Replay reads.
const ExportFormat = "stepgate.run/1"

// Step names one journal entry, or what the code asked for at a seq: its kind and name.
// An outcome is the Step of kind "completed" (its Name the output, as compact JSON cut
// to 200 bytes) or "failed" (its Name the error's type).
type Step struct {
	Kind string
	Name string
}

func (s Step) String() string {
	switch {
	case s.Name == "":
		return s.Kind
	case s.Kind == "completed" || s.Kind == "failed":
		return s.Kind + " with " + s.Name
	}
	return fmt.Sprintf("%s %q", s.Kind, s.Name)
}

// Divergence is where the code under test parts from the exported run: at Seq the
// journal holds Journal, and the code asked for Asked. For a run that ended (completed
// or failed) and replays its journal but not its end, Journal is the run's outcome (a
// Step of kind "completed" or "failed") and Asked the code's: another outcome, at the
// seq after the journal's last, or the new step, entry or wait it would make, at its
// seq. Where the code would end while the journal goes on, Asked is a Step of kind
// "completed" or "failed" with no Name.
type Divergence struct {
	Seq     int
	Journal Step
	Asked   Step
	Message string // The SDK's own words, when it failed the run with nondeterminism.
}

func (d Divergence) String() string {
	return fmt.Sprintf("seq %d: the journal holds %s but the code asks for %s", d.Seq, d.Journal, d.Asked)
}

// Next is what the code would do after the exported journal, had the replay let it.
type Next struct {
	// Kind is one of "step" (it would run a step function the journal does not hold,
	// Step names it), "checkpoint" (it would journal a new entry, Step says which:
	// an event, message, value, patch...), "wait" (it would suspend: a sleep, a wait
	// for an event, a message or a callback, a child run), "completed" or "failed" (the
	// code ends the run: as it ended on the gateway, for a run that ended).
	Kind  string
	Seq   int             // The seq of the new step, entry or wait; the seq after the journal's last for an end.
	Step  Step            // For "step", "checkpoint" and "wait" (its kind and name).
	Await *protocol.Await // For "wait", only from an SDK that does not answer replay-only invocations (else nil).
}

func (n Next) String() string {
	switch n.Kind {
	case "step":
		if n.Step.Name == "" {
			return fmt.Sprintf("would run a new step after seq %d", n.Seq-1)
		}
		return fmt.Sprintf("would run %s at seq %d", n.Step, n.Seq)
	case "checkpoint":
		return fmt.Sprintf("would journal %s at seq %d", n.Step, n.Seq)
	case "wait":
		return fmt.Sprintf("would wait for %s at seq %d", n.Step, n.Seq)
	}
	return "would end " + n.Kind
}

// Replayed is the outcome of replaying an exported run: Clean when the code replays
// the whole journal (and, for a run that ended, ends the same way), with Next what it
// would do next; otherwise Divergence says where it parts from the run.
type Replayed struct {
	Clean      bool
	Divergence *Divergence
	Next       Next
	Answer     protocol.InvocationAnswer // The function's answer to the replay's (last) invocation.
}

func (r Replayed) String() string {
	if r.Divergence != nil {
		return "diverges at " + r.Divergence.String()
	}
	return "replays cleanly; " + r.Next.String()
}

// Replay replays the run exported in file (protocol.RunExport, as
// `stepgate runs export ID > run.json` writes it) against function of app, in the
// test's process, and fails the test (t.Errorf) at its first divergence from the run,
// naming its seq, the journal's entry there and what the code asks for; an export it
// cannot read or replay stops the test (t.Fatalf). See ReplayExport.
func Replay(t testing.TB, app *functions.App, function, file string, opts ...Option) Replayed {
	t.Helper()
	r, err := ReplayFile(app, function, file, opts...)
	if err != nil {
		t.Fatalf("functionstest: replay %s: %v", file, err)
	}
	if r.Divergence != nil {
		t.Errorf("functionstest: replay of %s (%s): the code diverges from the run at %s", file, function, r.Divergence)
	}
	return r
}

// ReplayFile reads the export in file and replays it as ReplayExport does.
func ReplayFile(app *functions.App, function, file string, opts ...Option) (Replayed, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return Replayed{}, err
	}
	var x protocol.RunExport
	if err := json.Unmarshal(raw, &x); err != nil {
		return Replayed{}, fmt.Errorf("decode the export: %w", err)
	}
	return ReplayExport(app, function, x, opts...)
}

// ReplayExport replays run export x against function of app with no side effects: it
// invokes the function, in process, with the run's journal, input, identity and step
// attempts (the next invocation's attempt) and replay_only (see docs/protocol.md, "Replay-only
// invocations"), so the SDK replays the journaled entries without running them and
// answers status replayed: replay.next (the first step, entry or wait past the journal,
// kind and name) is Next, replay.divergence (the code asks at a journaled seq for
// another kind or name than the entry there, or ends where the journal goes on) is the
// Divergence. Where the code would end, the function is invoked once more, without
// replay_only, for its output or error type (it runs nothing: every step it takes is
// journaled): an end that differs from the run's is the Divergence, as is a run that
// ended where the code would go on. As a backstop, the harness refuses (409
// superseded) every claim, checkpoint and stream write. An SDK that ignores
// replay_only is judged by what the harness refused (a new step's name is then not
// known: the SDK claims before it starts one) and by its nondeterminism failure. A
// suspended run's journal may hold the sleep it waits for (the gateway journals a sleep
// with its wake time when the run suspends on it, and a replay takes a journaled sleep
// as over): that entry is left out of the replay, and the code must ask for that sleep
// at its seq, else it diverges there. WithKey signs the invocations for the identity's
// tenant; WithNow is ignored. The error is for an export that cannot be read or an
// invocation that cannot be made, never for a divergence.
func ReplayExport(app *functions.App, function string, x protocol.RunExport, opts ...Option) (Replayed, error) {
	if x.Format != ExportFormat {
		return Replayed{}, fmt.Errorf("the export's format is %q, not %q", x.Format, ExportFormat)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	journal, pending := pendingWait(x)
	ans, refused, err := invokeReplay(app, function, x, journal, true, o)
	if err != nil {
		return Replayed{}, err
	}
	if ans.Status == protocol.AnswerStatusReplayed && ans.Replay != nil {
		if n := ans.Replay.Next; n == nil || n.Kind != "end" {
			return checkPending(judgeReplayed(x, ans), pending, ans), nil
		}
		// The code would end: its output or error type is known only from an ordinary
		// invocation, which runs nothing (the code took only journaled steps).
		if ans, refused, err = invokeReplay(app, function, x, journal, false, o); err != nil {
			return Replayed{}, err
		}
	}
	return checkPending(judge(x, journal, ans, refused), pending, ans), nil
}

// invokeReplay invokes function of app, in process, with x's run and journal (replay
// only if replayOnly), against a stand-in gateway that refuses every call, and returns
// the answer and the first call the gateway refused, if any.
func invokeReplay(app *functions.App, function string, x protocol.RunExport, journal []protocol.JournalEntry,
	replayOnly bool, o options) (protocol.InvocationAnswer, *Next, error) {
	gw := &replayGateway{runID: x.Run.ID, token: "replay-" + x.Run.ID}
	gwSrv := httptest.NewServer(gw)
	defer gwSrv.Close()
	appSrv := httptest.NewServer(app)
	defer appSrv.Close()

	input := protocol.AnyJSON("null")
	if x.Run.Input != nil {
		input = *x.Run.Input
	}
	req := protocol.InvocationRequest{
		Protocol: protocol.InvocationRequestProtocolN1,
		Run: protocol.InvocationRun{ID: x.Run.ID, Function: function, Revision: x.Run.Revision,
			Attempt: x.Run.Invocations + 1, Input: input, ParentID: x.Run.ParentID, CreatedAt: x.Run.CreatedAt},
		Identity:     x.Run.Identity,
		Journal:      journal,
		StepAttempts: x.StepAttempts,
		Checkpoint:   protocol.Checkpoint{URL: gwSrv.URL + "/v1/runs/" + x.Run.ID + "/checkpoint", Token: gw.token},
	}
	if replayOnly {
		req.ReplayOnly = new(true)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return protocol.InvocationAnswer{}, nil, err
	}
	url := appSrv.URL + "/" + function
	hreq, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return protocol.InvocationAnswer{}, nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if o.key != nil {
		hreq.Header.Set(signature.Header, signature.Sign(time.Now(), x.Run.Identity.Tenant,
			signature.Request{Method: http.MethodPost, Path: signature.PathOf(hreq.URL), Body: body}, *o.key))
	}
	resp, err := appSrv.Client().Do(hreq)
	if err != nil {
		return protocol.InvocationAnswer{}, nil, fmt.Errorf("invoke %s: %w", function, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return protocol.InvocationAnswer{}, nil, err
	}
	var ans protocol.InvocationAnswer
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, &ans); err != nil {
			return protocol.InvocationAnswer{}, nil, fmt.Errorf("decode the answer of %s: %w", function, err)
		}
	} else {
		var info protocol.ErrorInfo
		_ = json.Unmarshal(raw, &info)
		ans = protocol.InvocationAnswer{Status: protocol.AnswerStatusFailed, Error: &info}
		if info.Type == "" {
			return protocol.InvocationAnswer{}, nil, fmt.Errorf("invoke %s: %d %s", function, resp.StatusCode, bytes.TrimSpace(raw))
		}
	}
	return ans, gw.refused(), nil
}

// nondeterminism matches the SDK's message for a journaled entry the code does not ask.
var nondeterminism = regexp.MustCompile(`step (\d+): code asks for (\S+) "((?:[^"\\]|\\.)*)" but the journal holds (\S+) "((?:[^"\\]|\\.)*)"`)

// pendingWait returns the journal to replay x with, without the entry of the sleep a
// suspended run waits for, if the journal holds it (the gateway journals a sleep with
// its wake time when the run suspends on it, and the SDK takes a journaled sleep as
// over), and that entry's Step and seq.
func pendingWait(x protocol.RunExport) ([]protocol.JournalEntry, *Next) {
	journal := make([]protocol.JournalEntry, 0, len(x.Journal))
	var pending *Next
	aw := x.Run.Awaiting
	for _, e := range x.Journal {
		if x.Run.Status == protocol.RunStatusSuspended && aw != nil && aw.Kind == protocol.AwaitingKindSleep &&
			e.Seq == aw.Seq && e.Kind == protocol.EntryKindSleep && e.Name == aw.Name {
			pending = &Next{Kind: "wait", Seq: e.Seq, Step: Step{Kind: string(e.Kind), Name: e.Name}}
			continue
		}
		journal = append(journal, e)
	}
	return journal, pending
}

// checkPending returns r, made from answer ans, as a divergence at the sleep the run
// waits for, if pending, unless the code would wait for that sleep where the run does.
func checkPending(r Replayed, pending *Next, ans protocol.InvocationAnswer) Replayed {
	if pending != nil && r.Divergence == nil && (r.Next.Seq != pending.Seq || r.Next.Step != pending.Step) {
		asked := r.Next.Step
		if r.Next.Kind == "completed" || r.Next.Kind == "failed" {
			asked = outcome(ans)
		}
		r.Clean, r.Next = false, Next{}
		r.Divergence = &Divergence{Seq: pending.Seq, Journal: pending.Step, Asked: asked}
	}
	return r
}

// waitKinds are the entry kinds the code suspends on.
var waitKinds = map[string]bool{"sleep": true, "wait_event": true, "receive": true, "invoke": true,
	"wait_any": true, "await_callback": true}

// replayStep returns the Step of what a replay-only answer names: an end (kind "end")
// as a Step of kind "completed" or "failed" with no name.
func replayStep(s protocol.ReplayStep) Step {
	if s.Kind == "end" {
		return Step{Kind: s.Name}
	}
	return Step{Kind: s.Kind, Name: s.Name}
}

// judgeReplayed makes the Replayed of replay-only answer ans (status replayed) to the
// replay of x, when it names a divergence or a next that is no end.
func judgeReplayed(x protocol.RunExport, ans protocol.InvocationAnswer) Replayed {
	r := Replayed{Answer: ans}
	if d := ans.Replay.Divergence; d != nil {
		r.Divergence = &Divergence{Seq: d.Seq, Journal: replayStep(d.Journal), Asked: replayStep(d.Asked)}
		return r
	}
	rn := ans.Replay.Next
	if rn == nil {
		r.Divergence = &Divergence{Asked: Step{Kind: string(ans.Status)}}
		return r
	}
	n := Next{Kind: "checkpoint", Seq: rn.Seq, Step: replayStep(*rn)}
	switch {
	case rn.Kind == "step":
		n.Kind = "step"
	case waitKinds[rn.Kind]:
		n.Kind = "wait"
	}
	if want, ended := exportOutcome(x); ended {
		// The run ended there; the code would go on.
		r.Divergence = &Divergence{Seq: n.Seq, Journal: want, Asked: n.Step}
		return r
	}
	r.Clean, r.Next = true, n
	return r
}

// judge makes the Replayed of answer ans to an ordinary (not replay-only) invocation
// replaying x with journal, given what the harness refused, if anything.
func judge(x protocol.RunExport, journal []protocol.JournalEntry, ans protocol.InvocationAnswer, refused *Next) (r Replayed) {
	r = Replayed{Answer: ans}
	after := 1
	for _, e := range journal {
		after = max(after, e.Seq+1)
	}
	if ans.Status == protocol.AnswerStatusFailed && ans.Error != nil && ans.Error.Type == "nondeterminism" {
		d := &Divergence{Message: ans.Error.Message}
		if m := nondeterminism.FindStringSubmatch(ans.Error.Message); m != nil {
			d.Seq, _ = strconv.Atoi(m[1])
			d.Asked = Step{Kind: m[2], Name: unquote(m[3])}
			d.Journal = Step{Kind: m[4], Name: unquote(m[5])}
		}
		r.Divergence = d
		return r
	}
	if refused != nil {
		n := *refused
		if n.Kind == "step" {
			n.Seq, n.Step = after, Step{Kind: "step"}
		}
		if want, ended := exportOutcome(x); ended {
			// The run ended there; the code would go on.
			r.Divergence = &Divergence{Seq: n.Seq, Journal: want, Asked: n.Step}
			return r
		}
		r.Clean, r.Next = true, n
		return r
	}
	switch ans.Status {
	case protocol.AnswerStatusSuspended:
		n := Next{Kind: "step", Seq: after, Step: Step{Kind: "step"}}
		if ans.Await != nil && !awaits.JournalsNothing(ans.Await) {
			aw := *ans.Await
			n = Next{Kind: "wait", Seq: aw.Seq, Step: Step{Kind: string(aw.Type), Name: aw.Name}, Await: &aw}
		}
		if want, ended := exportOutcome(x); ended {
			r.Divergence = &Divergence{Seq: n.Seq, Journal: want, Asked: n.Step}
			return r
		}
		r.Clean, r.Next = true, n
		return r
	case protocol.AnswerStatusCompleted, protocol.AnswerStatusFailed:
		got := outcome(ans)
		want, ended := exportOutcome(x)
		if ended && (got.Kind != want.Kind || !sameJSON(ans, x)) {
			r.Divergence = &Divergence{Seq: after, Journal: want, Asked: got}
			return r
		}
		r.Clean, r.Next = true, Next{Kind: got.Kind, Seq: after}
		return r
	}
	r.Divergence = &Divergence{Seq: after, Asked: Step{Kind: string(ans.Status)}}
	return r
}

func unquote(s string) string {
	if u, err := strconv.Unquote(`"` + s + `"`); err == nil {
		return u
	}
	return s
}

// outcome returns the end the answer ans makes: completed with its output, or failed
// with its error's type.
func outcome(ans protocol.InvocationAnswer) Step {
	if ans.Status == protocol.AnswerStatusCompleted {
		return Step{Kind: "completed", Name: shown(ans.Output)}
	}
	s := Step{Kind: "failed"}
	if ans.Error != nil {
		s.Name = ans.Error.Type
	}
	return s
}

// exportOutcome returns how the exported run ended, and whether it did.
func exportOutcome(x protocol.RunExport) (Step, bool) {
	switch x.Run.Status {
	case protocol.RunStatusCompleted:
		return Step{Kind: "completed", Name: shown(x.Run.Output)}, true
	case protocol.RunStatusFailed:
		s := Step{Kind: "failed"}
		if x.Run.Error != nil {
			s.Name = x.Run.Error.Type
		}
		return s, true
	}
	return Step{}, false
}

// maxShown bounds the output an outcome's Step shows, in bytes.
const maxShown = 200

// shown returns out as compact JSON, cut to maxShown bytes (ending "…" when cut).
func shown(out *protocol.AnyJSON) string {
	s := string(canonical(out))
	if len(s) > maxShown {
		s = strings.ToValidUTF8(s[:maxShown], "") + "…"
	}
	return s
}

// canonical returns out re-encoded (null when absent), so that equal values compare
// equal whatever their spacing.
func canonical(out *protocol.AnyJSON) []byte {
	var v any
	if out != nil {
		_ = json.Unmarshal(*out, &v)
	}
	raw, _ := json.Marshal(v)
	return raw
}

// sameJSON reports whether the answer's output or error type is the run's.
func sameJSON(ans protocol.InvocationAnswer, x protocol.RunExport) bool {
	if ans.Status != protocol.AnswerStatusCompleted {
		return ans.Error != nil && x.Run.Error != nil && ans.Error.Type == x.Run.Error.Type
	}
	return bytes.Equal(canonical(ans.Output), canonical(x.Run.Output))
}

// replayGateway answers the replayed invocation's calls to the gateway: it refuses
// every claim, checkpoint and stream write (409 superseded), keeping the first.
type replayGateway struct {
	runID, token string
	mu           sync.Mutex
	first        *Next
}

func (g *replayGateway) refused() *Next {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.first
}

func (g *replayGateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+g.token {
		refuse(w, http.StatusUnauthorized, "bad invocation token")
		return
	}
	base := "/v1/runs/" + g.runID + "/checkpoint"
	var n *Next
	switch path := r.URL.Path; {
	case path == base+"/current":
		n = &Next{Kind: "step"}
	case path == base:
		var e protocol.JournalEntry
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&e); err != nil {
			refuse(w, http.StatusBadRequest, err.Error())
			return
		}
		n = &Next{Kind: "checkpoint", Seq: e.Seq, Step: Step{Kind: string(e.Kind), Name: e.Name}}
	case path == base+"/stream":
		var sw protocol.StreamWrite
		_ = json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&sw)
		n = &Next{Kind: "checkpoint", Seq: sw.Seq, Step: Step{Kind: "stream", Name: sw.Key}}
	default:
		refuse(w, http.StatusNotFound, "no such endpoint in a replay")
		return
	}
	g.mu.Lock()
	if g.first == nil {
		g.first = n
	}
	g.mu.Unlock()
	refuse(w, http.StatusConflict, "functionstest: a replay runs nothing new")
}

func refuse(w http.ResponseWriter, code int, detail string) {
	p := protocol.Problem{Status: code, Title: http.StatusText(code), Detail: detail}
	if code == http.StatusConflict {
		p.Type = new("superseded")
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(p)
}
