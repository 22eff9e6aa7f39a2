package invoker

import (
	"encoding/json"
	"testing"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// FuzzDecodeAnswer feeds the gateway's decoder of function answers (the one untrusted
// input a function sends back) arbitrary bytes. Whatever they are, it must not panic;
// it returns an answer or an error, never both or neither, the error one of the kinds
// that fail or retry an invocation; and an answer it accepts must turn into the run's
// transition (outcomeOf) without a panic, with the status the answer names.
func FuzzDecodeAnswer(f *testing.F) {
	for _, seed := range []string{
		`{"status":"completed","output":{"ok":true}}`,
		`{"status":"completed"}`,
		`{"status":"failed","error":{"type":"card","message":"declined"}}`,
		`{"status":"suspended","await":{"type":"sleep","seq":1,"name":"nap","duration":"10m"}}`,
		`{"status":"suspended","await":{"type":"sleep","seq":2,"name":"nap","until":"2030-01-01T00:00:00Z"},"steps":[{"seq":1,"kind":"step","name":"a","output":1}]}`,
		`{"status":"suspended","await":{"type":"retry","seq":1,"name":"charge","attempt":1,"error":{"type":"x","message":"y"},"retry":{"max_attempts":3,"initial_interval":"1s"}}}`,
		`{"status":"suspended","await":{"type":"invoke","seq":1,"name":"call","function":"orders.checkout","input":{"n":1}}}`,
		`{"status":"suspended","await":{"type":"signal","seq":1,"name":"s"}}`,
		`{"status":"suspended"}`,
		`{"status":"completed","output":"\u0000"}`,
		`{"status":"completed","steps":[{"seq":0,"kind":"sleep","name":""}]}`,
		`<html>502</html>`,
		``,
		`null`,
		`{"status":1}`,
	} {
		f.Add([]byte(seed))
	}
	limits := Limits{}.WithDefaults()
	inv := &Invoker{limits: limits}
	fc, err := ParseConfig(nil)
	if err != nil {
		f.Fatal(err)
	}
	rev := &revision{config: fc}
	claim := &journal.Claim{Run: &journal.Run{ID: "01a22695-0000-7000-8000-000000000001", Identity: journal.Identity{Subject: "s", Tenant: "t"}},
		StepAttempts: map[int]int{1: 2}}
	f.Fuzz(func(t *testing.T, raw []byte) {
		a, e := limits.decodeAnswer(raw)
		if (a == nil) == (e == nil) {
			t.Fatalf("answer %v and error %v: want exactly one", a, e)
		}
		if e != nil {
			switch e.Type {
			case "malformed_answer", ErrorTypeBadAnswer, ErrorTypeLimit:
			default:
				t.Fatalf("error type %q for %q", e.Type, raw)
			}
			if e.Message == "" {
				t.Fatalf("an error with no message for %q", raw)
			}
			return
		}
		o := inv.outcomeOf(rev, claim, a)
		want := map[protocol.AnswerStatus]journal.Status{
			protocol.AnswerStatusCompleted: journal.StatusCompleted,
			protocol.AnswerStatusFailed:    journal.StatusFailed,
			protocol.AnswerStatusSuspended: journal.StatusSuspended,
		}[a.Status]
		if o.Status() != want {
			t.Fatalf("answer %s became a %s outcome", a.Status, o.Status())
		}
		if o.Status() == journal.StatusCompleted && !json.Valid(o.Output()) {
			t.Fatalf("a completed outcome with output %q", o.Output())
		}
	})
}
