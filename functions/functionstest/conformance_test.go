package functionstest_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions/functionstest"
	"github.com/stepgate/stepgate/protocol/conformance"
)

// knownDisagreements are the conformance scenarios this harness does not pass, by name,
// with what it does instead of what the gateway does. Each is still run, and must still
// fail: a harness that comes to agree with the gateway fails the test until its entry
// goes.
var knownDisagreements = map[string]string{}

// TestConformance runs the conformance scenarios for waits (protocol/conformance), which
// pass against a real gateway, against the harness, each scenario's functions played on
// the wire by conformance.NewFunction behind NewHandler.
func TestConformance(t *testing.T) {
	t.Parallel()
	scenarios, err := conformance.Load()
	require.NoError(t, err)
	for _, sc := range scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			err := play(t, sc)
			why, known := knownDisagreements[sc.Name]
			switch {
			case known && err == nil:
				t.Errorf("the harness passes now: remove the scenario from knownDisagreements (%s)", why)
			case known:
				t.Logf("a known disagreement with the gateway: %s\n%v", why, err)
			case err != nil:
				t.Errorf("%v\n(the scenario: %s)", err, sc.Description)
			}
		})
	}
}

// play runs scenario sc in a harness and returns how it differs from the scenario's
// expectations, the harness's own failures (which end the scenario) included.
func play(t *testing.T, sc conformance.Scenario) error {
	rec := &recorder{TB: t}
	var res error
	done := make(chan struct{})
	go func() { // The harness's Fatalf ends this goroutine only.
		defer close(done)
		res = run(rec, sc)
	}()
	<-done
	return errors.Join(append(rec.errors(), res)...)
}

func run(tb testing.TB, sc conformance.Scenario) error {
	fn := conformance.NewFunction(&sc, nil)
	h := functionstest.NewHandler(tb, fn, slices.Sorted(maps.Keys(sc.Functions)))
	input := sc.Input
	if input == nil {
		input = json.RawMessage("null")
	}
	r := h.Start(sc.Start, input)
	for i, d := range sc.Deliveries {
		before := fn.Invocations(r.ID())
		switch {
		case d.Event != nil:
			h.SendEvent(d.Event.Name, d.Event.Data)
		case d.Message != nil:
			r.SendMessage(d.Message.Topic, d.Message.Data)
		case d.Request != nil:
			r.SendRequest(d.Request.Name, d.Request.Data)
		case d.ResolveCallback != nil:
			r.ResolveCallback(d.ResolveCallback.Name, d.ResolveCallback.Data)
		case d.RejectCallback != nil:
			r.RejectCallback(d.RejectCallback.Name, d.RejectCallback.Type, d.RejectCallback.Message)
		case d.Wait != "":
			h.Advance(d.WaitDuration())
		}
		if resumed := fn.Invocations(r.ID()) > before; resumed != d.Resumes {
			return errors.Join(append(fn.Errors(), fmt.Errorf("deliveries[%d] (%s): the run resumed: %v; the scenario says %v (it is %s)",
				i, d.Kind(), resumed, d.Resumes, r.Result().Status))...)
		}
	}
	res := r.Result()
	return sc.Check(r.ID(), conformance.Outcome{Status: string(res.Status), Output: res.Output, Error: res.Error}, fn)
}

// recorder is a testing.TB whose failures are kept, not reported: a Fatal ends the
// goroutine that calls it (the scenario's), and the test goes on to decide whether the
// failure was expected.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []error
}

func (r *recorder) add(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, errors.New(strings.TrimSpace(msg)))
}

func (r *recorder) errors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errs)
}

func (r *recorder) Helper()                   {}
func (r *recorder) Error(args ...any)         { r.add(fmt.Sprintln(args...)) }
func (r *recorder) Errorf(f string, a ...any) { r.add(fmt.Sprintf(f, a...)) }
func (r *recorder) Fail()                     { r.add("failed") }
func (r *recorder) FailNow()                  { r.add("failed"); runtime.Goexit() }
func (r *recorder) Fatal(args ...any)         { r.add(fmt.Sprintln(args...)); runtime.Goexit() }
func (r *recorder) Fatalf(f string, a ...any) { r.add(fmt.Sprintf(f, a...)); runtime.Goexit() }
func (r *recorder) Failed() bool              { return len(r.errors()) > 0 }
