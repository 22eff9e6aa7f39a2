package conformance

import (
	"bytes"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/stepgate/stepgate/protocol"
)

//go:embed scenarios/*.json
var files embed.FS

// Dir is where the scenario files are, relative to this package's directory; a runner in
// another language reads them there (protocol/conformance/scenarios in the repository).
const Dir = "scenarios"

// Scenario is one scenario file: a run of Start with Input, whose functions answer as
// Functions script, the Deliveries applied in order once it has suspended, and what
// must hold at the end (Expect).
type Scenario struct {
	// Name is the file's name without ".json"; it is not in the file.
	Name string `json:"-"`
	// Description says what the scenario shows, and where the rule is written.
	Description string `json:"description"`
	// Start is the function of the run the scenario starts: a key of Functions.
	Start string `json:"start"`
	// Input is the run's input (null when absent).
	Input json.RawMessage `json:"input,omitempty"`
	// Functions are the scripts of the functions the scenario registers, by name: the
	// invocations of a run of each, in order (see Invocation). Past its script a
	// function answers DefaultAnswer.
	Functions map[string][]Invocation `json:"functions"`
	// Deliveries are applied in order, each once the run has come to rest (suspended or
	// ended) after the start or the delivery before.
	Deliveries []Delivery `json:"deliveries,omitempty"`
	// Expect is what must hold once the last delivery's effects have come to rest.
	Expect Expect `json:"expect"`
}

// Invocation is the scripted answer to one invocation of a run.
type Invocation struct {
	// Request, when set, is what the invocation request must hold: each key a
	// top-level field of the InvocationRequest compared with Match ("journal" as a list
	// of entry patterns: see MatchEntry), a field absent from the request being null.
	Request map[string]json.RawMessage `json:"request,omitempty"`
	// Checkpoints are posted to the request's checkpoint.url, in order, before the
	// function answers; each must be answered 200. A callback's checkpoint (kind
	// "callback") opens the callback that an await_callback and a resolve_callback
	// delivery name.
	Checkpoints []protocol.JournalEntry `json:"checkpoints,omitempty"`
	// Answer is the function's answer, sent as HTTP 200.
	Answer protocol.InvocationAnswer `json:"answer"`
}

// Delivery is one thing done to the run from outside: exactly one of Event, Message,
// Request, ResolveCallback, RejectCallback and Wait.
type Delivery struct {
	// Event is sent to the run's tenant (POST /v1/events).
	Event *Event `json:"event,omitempty"`
	// Message is sent to the started run's mailbox (POST /v1/runs/{id}/messages).
	Message *Message `json:"message,omitempty"`
	// Request is sent to the started run (POST /v1/runs/{id}/requests, without waiting
	// for a reply): a message of topic "request:" + its name.
	Request *Request `json:"request,omitempty"`
	// ResolveCallback resolves the started run's latest callback of that name by its
	// token (POST /v1/callbacks/{token}), with Data as the body.
	ResolveCallback *Resolve `json:"resolve_callback,omitempty"`
	// RejectCallback rejects it (POST /v1/callbacks/{token}/reject).
	RejectCallback *Reject `json:"reject_callback,omitempty"`
	// Wait lets that much time pass (a Go duration): real time on a gateway, the
	// virtual clock in a harness. Scenarios keep it short ("2s") and the timeouts it
	// passes at 1s, the least a wait takes.
	Wait string `json:"wait,omitempty"`
	// Resumes says whether the delivery makes the gateway invoke the started run
	// again (it ends the run's current wait). A delivery that does not resume it leaves
	// it suspended as it was (a message kept in the mailbox, a callback resolution kept
	// for its await, an event that matches nothing).
	Resumes bool `json:"resumes"`
}

// Event is an event to send.
type Event struct {
	Name string          `json:"name"`
	Data json.RawMessage `json:"data,omitempty"`
}

// Message is a message to send to the run.
type Message struct {
	Topic string          `json:"topic"`
	Data  json.RawMessage `json:"data,omitempty"`
}

// Request is a request to send to the run.
type Request struct {
	Name string          `json:"name"`
	Data json.RawMessage `json:"data,omitempty"`
}

// Resolve resolves the run's latest callback called Name with Data.
type Resolve struct {
	Name string          `json:"name"`
	Data json.RawMessage `json:"data,omitempty"`
}

// Reject rejects the run's latest callback called Name with an error of Type
// (rejected when empty) and Message.
type Reject struct {
	Name    string `json:"name"`
	Type    string `json:"type,omitempty"`
	Message string `json:"message"`
}

// Kind returns the delivery's kind: its JSON key ("event", "wait", ...).
func (d Delivery) Kind() string {
	kinds := d.kinds()
	if len(kinds) != 1 {
		return ""
	}
	return kinds[0]
}

func (d Delivery) kinds() []string {
	var kinds []string
	for _, k := range []struct {
		set  bool
		name string
	}{{d.Event != nil, "event"}, {d.Message != nil, "message"}, {d.Request != nil, "request"},
		{d.ResolveCallback != nil, "resolve_callback"}, {d.RejectCallback != nil, "reject_callback"}, {d.Wait != "", "wait"}} {
		if k.set {
			kinds = append(kinds, k.name)
		}
	}
	return kinds
}

// WaitDuration returns Wait as a duration (0 when the delivery is not a wait).
func (d Delivery) WaitDuration() time.Duration {
	w, _ := time.ParseDuration(d.Wait)
	return w
}

// Expect is what must hold at the end of a scenario.
type Expect struct {
	// Status is the started run's status: completed, failed or suspended (the
	// gateway's suspended, waiting on something).
	Status string `json:"status"`
	// Invocations, when not 0, is how many invocations of the started run its function
	// got.
	Invocations int `json:"invocations,omitempty"`
	// Entries are patterns (see MatchEntry) of entries of the journal the started run's
	// function got in its last invocation request: what an SDK replays. Each names its
	// seq, and the journal must hold an entry there.
	Entries []map[string]json.RawMessage `json:"entries,omitempty"`
	// Output, when set, is a pattern (see Match) of a completed run's output.
	Output json.RawMessage `json:"output,omitempty"`
	// Error, when set, names fields of a failed run's error ("type", "message",
	// "retryable"), each compared with Match; the others are not compared.
	Error map[string]json.RawMessage `json:"error,omitempty"`
}

// Statuses a scenario may expect.
const (
	StatusCompleted = "completed"
	StatusFailed    = "failed"
	StatusSuspended = "suspended"
)

// Load returns the scenarios embedded in this package, sorted by name, each checked:
// a file that is not a well-formed scenario (an unknown field, a delivery of no kind
// or of two, a start that is no function, ...) is an error.
func Load() ([]Scenario, error) {
	return LoadFS(files, Dir)
}

// LoadFS returns the scenarios of the *.json files of dir in fsys, as Load does: for a
// runner that keeps scenarios of its own beside these.
func LoadFS(fsys fs.FS, dir string) ([]Scenario, error) {
	names, err := fs.Glob(fsys, path.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	var out []Scenario
	var errs []error
	for _, name := range names {
		raw, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		s, err := Parse(strings.TrimSuffix(path.Base(name), ".json"), raw)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, s)
	}
	return out, errors.Join(errs...)
}

// Parse decodes and checks the scenario file raw, called name.
func Parse(name string, raw []byte) (Scenario, error) {
	var s Scenario
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return s, fmt.Errorf("scenario %s: %w", name, err)
	}
	s.Name = name
	if err := s.check(); err != nil {
		return s, fmt.Errorf("scenario %s: %w", name, err)
	}
	return s, nil
}

func (s *Scenario) check() error {
	if s.Description == "" {
		return errors.New("no description")
	}
	if _, ok := s.Functions[s.Start]; !ok {
		return fmt.Errorf("start %q is not one of its functions", s.Start)
	}
	for fn, script := range s.Functions {
		for i, inv := range script {
			if !inv.Answer.Status.Valid() {
				return fmt.Errorf("functions.%s[%d]: answer status %q", fn, i, inv.Answer.Status)
			}
			if inv.Answer.Status == protocol.AnswerStatusSuspended && inv.Answer.Await == nil {
				return fmt.Errorf("functions.%s[%d]: a suspended answer with no await", fn, i)
			}
		}
	}
	for i, d := range s.Deliveries {
		if k := d.kinds(); len(k) != 1 {
			return fmt.Errorf("deliveries[%d] is %d things (%s): one of event, message, request, resolve_callback, reject_callback, wait", i, len(k), strings.Join(k, ", "))
		}
		if d.Wait != "" {
			if w, err := time.ParseDuration(d.Wait); err != nil || w <= 0 {
				return fmt.Errorf("deliveries[%d]: wait %q is not a positive duration", i, d.Wait)
			}
		}
	}
	switch s.Expect.Status {
	case StatusCompleted, StatusFailed, StatusSuspended:
	default:
		return fmt.Errorf("expect.status %q is not completed, failed or suspended", s.Expect.Status)
	}
	for i, e := range s.Expect.Entries {
		if _, ok := e["seq"]; !ok {
			return fmt.Errorf("expect.entries[%d] names no seq", i)
		}
	}
	return nil
}
