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
// seq (a new step's name is not known: the SDK asks before it starts one).
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
	// Kind is one of "step" (it would run a step function the journal does not hold:
	// its name is not known, as the SDK asks before it starts one), "checkpoint" (it
	// would journal a new entry, Step says which), "wait" (it would suspend on Await),
	// "completed" or "failed" (the code ends the run: as it ended on the gateway, for a
	// run that ended).
	Kind  string
	Seq   int             // The seq of the new entry or wait; the seq after the journal's last for a step or an end.
	Step  Step            // For "checkpoint" and "wait" (the await's type and name).
	Await *protocol.Await // For "wait".
}

func (n Next) String() string {
	switch n.Kind {
	case "step":
		return fmt.Sprintf("would run a new step after seq %d", n.Seq-1)
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
	Answer     protocol.InvocationAnswer // The function's answer to the replay's invocation.
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
// invokes the function once, in process, with the run's journal, input, identity and
// step attempts (the next invocation's attempt), so the SDK replays the journaled
// entries without running them. Nothing new happens: the harness refuses (409
// superseded) the SDK's claim before the first step function the journal does not
// hold, and every checkpoint of a new entry or stream write, and records it as Next. A
// nondeterminism failure (the code asks at a journaled seq for another kind or name than
// the entry there) is the Divergence, as is an end that differs from the run's, or a
// run that ended where the code would go on. A suspended run's journal may hold the
// sleep it waits for (the gateway journals a sleep with its wake time when the run
// suspends on it): that entry is left out of the replay, and the code must ask for that
// sleep at its seq, else it diverges there. WithKey signs the invocation for the
// identity's tenant; WithNow is ignored. The error is for an export that cannot be read
// or an invocation that cannot be made, never for a divergence.
func ReplayExport(app *functions.App, function string, x protocol.RunExport, opts ...Option) (Replayed, error) {
	if x.Format != ExportFormat {
		return Replayed{}, fmt.Errorf("the export's format is %q, not %q", x.Format, ExportFormat)
	}
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	gw := &replayGateway{runID: x.Run.ID, token: "replay-" + x.Run.ID}
	gwSrv := httptest.NewServer(gw)
	defer gwSrv.Close()
	appSrv := httptest.NewServer(app)
	defer appSrv.Close()

	journal, pending := pendingWait(x)
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
	body, err := json.Marshal(req)
	if err != nil {
		return Replayed{}, err
	}
	url := appSrv.URL + "/" + function
	hreq, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return Replayed{}, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if o.key != nil {
		hreq.Header.Set(signature.Header, signature.Sign(time.Now(), x.Run.Identity.Tenant,
			signature.Request{Method: http.MethodPost, Path: signature.PathOf(hreq.URL), Body: body}, *o.key))
	}
	resp, err := appSrv.Client().Do(hreq)
	if err != nil {
		return Replayed{}, fmt.Errorf("invoke %s: %w", function, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return Replayed{}, err
	}
	var ans protocol.InvocationAnswer
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(raw, &ans); err != nil {
			return Replayed{}, fmt.Errorf("decode the answer of %s: %w", function, err)
		}
	} else {
		var info protocol.ErrorInfo
		_ = json.Unmarshal(raw, &info)
		ans = protocol.InvocationAnswer{Status: protocol.AnswerStatusFailed, Error: &info}
		if info.Type == "" {
			return Replayed{}, fmt.Errorf("invoke %s: %d %s", function, resp.StatusCode, bytes.TrimSpace(raw))
		}
	}
	return judge(x, journal, pending, ans, gw.refused()), nil
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

// judge makes the Replayed of answer ans to the replay of x with journal, given the
// sleep the run waits for, if pending, and what the harness refused, if anything.
func judge(x protocol.RunExport, journal []protocol.JournalEntry, pending *Next, ans protocol.InvocationAnswer, refused *Next) (r Replayed) {
	r = Replayed{Answer: ans}
	defer func() {
		// The code must wait for the sleep the run waits for, where the run does.
		if pending != nil && r.Divergence == nil && (r.Next.Seq != pending.Seq || r.Next.Step != pending.Step) {
			asked := r.Next.Step
			if r.Next.Kind == "completed" || r.Next.Kind == "failed" {
				asked = outcome(ans)
			}
			r.Clean, r.Next = false, Next{}
			r.Divergence = &Divergence{Seq: pending.Seq, Journal: pending.Step, Asked: asked}
		}
	}()
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
		if ans.Await != nil && ans.Await.Type != protocol.AwaitTypeContinue {
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
