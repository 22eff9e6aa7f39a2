package awaits_test

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/awaits"
)

func decode(t *testing.T, raw string) *protocol.Await {
	t.Helper()
	var w protocol.Await
	require.NoError(t, json.Unmarshal([]byte(raw), &w))
	return &w
}

// TestEveryAwaitTypeHasItsRules: each await type of the protocol (openapi.yaml's
// AwaitType) is checked and applied, and a type it does not name is refused with the
// list of those it does.
func TestEveryAwaitTypeHasItsRules(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../openapi.yaml")
	require.NoError(t, err)
	var spec struct {
		Components struct {
			Schemas map[string]struct {
				Enum []string `yaml:"enum"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &spec))
	types := spec.Components.Schemas["AwaitType"].Enum
	require.NotEmpty(t, types)
	for _, typ := range types {
		p := awaits.Check(&protocol.Await{Type: protocol.AwaitType(typ), Seq: 2, Name: "w"}, awaits.Checks{})
		if p != nil {
			require.NotContains(t, p.Message, "is not supported", typ)
		}
	}
	p := awaits.Check(&protocol.Await{Type: "nap", Seq: 1, Name: "w"}, awaits.Checks{})
	require.NotNil(t, p)
	require.Contains(t, p.Message, `await type "nap" is not supported`)
	for _, typ := range types {
		require.Contains(t, p.Message, typ)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	stored := awaits.Checks{
		MaxEntries: 10,
		JSON: func(what string, raw []byte) *awaits.Problem {
			if strings.Contains(string(raw), `\u0000`) {
				return &awaits.Problem{Message: what + " holds a NUL"}
			}
			return nil
		},
		Error: func(what string, e *protocol.ErrorInfo) *awaits.Problem {
			if e.Message == "" {
				return &awaits.Problem{Message: what + " has no message"}
			}
			return nil
		},
		Retry: func(p *protocol.RetryPolicy) error {
			if p != nil && p.MaxAttempts != nil && *p.MaxAttempts < 1 {
				return errors.New("max_attempts must be at least 1")
			}
			return nil
		},
	}
	for _, c := range []struct {
		name, await string
		limit       bool
		want        string // "" for a valid await
	}{
		{"Continue", `{"type":"continue","seq":2,"name":"c"}`, false, ""},
		{"SleepFor", `{"type":"sleep","seq":1,"name":"s","duration":"1h"}`, false, ""},
		{"SleepUntil", `{"type":"sleep","seq":1,"name":"s","until":"2030-01-01T00:00:00Z"}`, false, ""},
		{"SleepNeither", `{"type":"sleep","seq":1,"name":"s"}`, false, "a sleep needs until or duration"},
		{"SleepTooLong", `{"type":"sleep","seq":1,"name":"s","duration":"100000h"}`, false, "is not a duration from 0s to"},
		{"SleepBefore1970", `{"type":"sleep","seq":1,"name":"s","until":"1960-01-01T00:00:00Z"}`, false, "is not between 1970"},
		{"Retry", `{"type":"retry","seq":1,"name":"s","error":{"type":"t","message":"m"}}`, false, ""},
		{"RetryNoError", `{"type":"retry","seq":1,"name":"s"}`, false, "a retry needs the step's error"},
		{"RetryErrorRefused", `{"type":"retry","seq":1,"name":"s","error":{"type":"t","message":""}}`, false, "await.error has no message"},
		{"RetryBadPolicy", `{"type":"retry","seq":1,"name":"s","error":{"type":"t","message":"m"},"retry":{"max_attempts":0}}`, false, "retry: max_attempts"},
		{"Invoke", `{"type":"invoke","seq":1,"name":"i","function":"f","input":{"a":1}}`, false, ""},
		{"InvokeNoFunction", `{"type":"invoke","seq":1,"name":"i"}`, false, "an invoke needs a function"},
		{"InvokeBadFunction", `{"type":"invoke","seq":1,"name":"i","function":"no spaces"}`, false, "invoke: function"},
		{"InvokeInputRefused", `{"type":"invoke","seq":1,"name":"i","function":"f","input":"\u0000"}`, false, "await.input holds a NUL"},
		{"InvokeAll", `{"type":"invoke_all","seq":1,"name":"i","calls":[{"function":"f"},{"function":"g"}]}`, false, ""},
		{"InvokeAllEmpty", `{"type":"invoke_all","seq":1,"name":"i","calls":[]}`, false, "an invoke_all needs calls"},
		{"InvokeAllPastJournal", `{"type":"invoke_all","seq":9,"name":"i","calls":[{"function":"f"},{"function":"g"},{"function":"h"}]}`, true, "last child takes seq 11, past the journal's limit of 10"},
		{"WaitEvent", `{"type":"wait_event","seq":1,"name":"w","event":"paid","match":{"data.order":"o-1"},"timeout":"1h"}`, false, ""},
		{"WaitEventNoEvent", `{"type":"wait_event","seq":1,"name":"w"}`, false, "a wait_event needs an event"},
		{"WaitEventShortTimeout", `{"type":"wait_event","seq":1,"name":"w","event":"e","timeout":"10ms"}`, false, `wait_event timeout "10ms" is not a duration from 1s`},
		{"WaitEventTwoLookBacks", `{"type":"wait_event","seq":1,"name":"w","event":"e","since_start":true,"since":"2026-01-01T00:00:00Z"}`, false, "a look-back takes one"},
		{"WaitEventMatchObject", `{"type":"wait_event","seq":1,"name":"w","event":"e","match":{"data.a":{"b":1}}}`, false, `match "data.a" is not a string, a number, a boolean or null`},
		{"WaitEventMatchPath", `{"type":"wait_event","seq":1,"name":"w","event":"e","match":{"body.a":1}}`, false, `match path "body.a" is not`},
		{"WaitEventMatchTooMany", `{"type":"wait_event","seq":1,"name":"w","event":"e","match":{"data.a":1,"data.b":1,"data.c":1,"data.d":1,"data.e":1,"data.f":1,"data.g":1,"data.h":1,"data.i":1}}`, true, "match has 9 paths, more than the limit of 8"},
		{"Receive", `{"type":"receive","seq":1,"name":"r","topic":"t"}`, false, ""},
		{"ReceiveNoTopic", `{"type":"receive","seq":1,"name":"r"}`, false, "a receive needs a topic"},
		{"Callback", `{"type":"await_callback","seq":3,"name":"c","callback_seq":2}`, false, ""},
		{"CallbackNoSeq", `{"type":"await_callback","seq":3,"name":"c"}`, false, "needs a callback_seq"},
		{"CallbackLaterSeq", `{"type":"await_callback","seq":3,"name":"c","callback_seq":3}`, false, "is not a seq before the await's"},
		{"CallbackTimeoutTooLong", `{"type":"await_callback","seq":3,"name":"c","callback_seq":2,"timeout":"10000h"}`, false, "await_callback timeout"},
		{"AwaitRun", `{"type":"await_run","seq":1,"name":"r","run_id":"0190A0C1-0000-7000-8000-000000000000","timeout":"1h"}`, false, ""},
		{"AwaitRunNoID", `{"type":"await_run","seq":1,"name":"r"}`, false, "an await_run needs a run_id"},
		{"AwaitRunNotAUUID", `{"type":"await_run","seq":1,"name":"r","run_id":"x'; DROP TABLE run; --"}`, false, "is not a run id (a UUID)"},
		{"AwaitRunShortTimeout", `{"type":"await_run","seq":1,"name":"r","run_id":"0190a0c1-0000-7000-8000-000000000000","timeout":"1ms"}`, false, "timeout"},
		{"WaitAnyOfRuns", `{"type":"wait_any","seq":3,"name":"a","of":[{"type":"await_run","seq":3,"name":"a","run_id":"0190a0c1-0000-7000-8000-000000000000"},{"type":"receive","seq":3,"name":"a","topic":"t"}]}`, false, ""},
		{"WaitAny", `{"type":"wait_any","seq":3,"name":"a","of":[{"type":"wait_event","seq":3,"name":"a","event":"e"},{"type":"receive","seq":3,"name":"a","topic":"t"},{"type":"await_callback","seq":3,"name":"a","callback_seq":1}]}`, false, ""},
		{"WaitAnyEmpty", `{"type":"wait_any","seq":3,"name":"a","of":[]}`, false, "needs its alternatives"},
		{"WaitAnySleep", `{"type":"wait_any","seq":3,"name":"a","of":[{"type":"sleep","seq":3,"name":"a","duration":"1s"}]}`, false, `of[0] is a "sleep"; a wait_any takes the first of`},
		{"WaitAnyOtherSeq", `{"type":"wait_any","seq":3,"name":"a","of":[{"type":"receive","seq":4,"name":"a","topic":"t"}]}`, false, "an alternative has its wait_any's"},
		{"WaitAnyAltTimeout", `{"type":"wait_any","seq":3,"name":"a","of":[{"type":"receive","seq":3,"name":"a","topic":"t","timeout":"1h"}]}`, false, "the wait_any's timeout is the alternatives'"},
		{"WaitAnyTopicTwice", `{"type":"wait_any","seq":3,"name":"a","of":[{"type":"receive","seq":3,"name":"a","topic":"t"},{"type":"receive","seq":3,"name":"a","topic":"t"}]}`, false, `receives topic "t", as an earlier alternative does`},
		{"WaitAnyAltChecked", `{"type":"wait_any","seq":3,"name":"a","of":[{"type":"wait_event","seq":3,"name":"a"}]}`, false, "a wait_event needs an event"},
		{"WaitAnyTooMany", `{"type":"wait_any","seq":3,"name":"a","of":[` + strings.Repeat(`{"type":"receive","seq":3,"name":"a","topic":"t"},`, 8) + `{"type":"receive","seq":3,"name":"a","topic":"t"}]}`, true, "9 alternatives, more than the limit of 8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := awaits.Check(decode(t, c.await), stored)
			if c.want == "" {
				require.Nil(t, p)
				return
			}
			require.NotNil(t, p)
			require.Contains(t, p.Message, c.want)
			require.Equal(t, c.limit, p.Limit)
		})
	}
}

// store records the transition Apply makes.
type store struct{ got []any }

func (s *store) Continue(seq int)        { s.got = append(s.got, seq) }
func (s *store) Retry(r awaits.Retry)    { s.got = append(s.got, r) }
func (s *store) Sleep(sl awaits.Sleep)   { s.got = append(s.got, sl) }
func (s *store) Start(c awaits.Children) { s.got = append(s.got, c) }
func (s *store) Wait(w awaits.Wait)      { s.got = append(s.got, w) }
func apply(t *testing.T, raw string) any {
	t.Helper()
	w := decode(t, raw)
	require.Nil(t, awaits.Check(w, awaits.Checks{}))
	var s store
	awaits.Apply(w, &s)
	require.Len(t, s.got, 1, "Apply makes one transition")
	return s.got[0]
}

func TestApply(t *testing.T) {
	t.Parallel()
	require.Equal(t, 4, apply(t, `{"type":"continue","seq":4,"name":"c"}`))
	require.Equal(t, awaits.Sleep{Seq: 1, Name: "s", For: 90 * time.Minute}, apply(t, `{"type":"sleep","seq":1,"name":"s","duration":"1h30m"}`))
	r := apply(t, `{"type":"retry","seq":2,"name":"s","error":{"type":"t","message":"m"}}`).(awaits.Retry)
	require.Equal(t, "m", r.Error.Message)
	require.Nil(t, r.Policy)

	one := apply(t, `{"type":"invoke","seq":1,"name":"i","function":"f","detached":true}`).(awaits.Children)
	require.False(t, one.All)
	require.Len(t, one.Calls, 1)
	require.Equal(t, "f", one.Calls[0].Function)
	require.True(t, *one.Calls[0].Detached)
	all := apply(t, `{"type":"invoke_all","seq":1,"name":"i","calls":[{"function":"f"},{"function":"g"}]}`).(awaits.Children)
	require.True(t, all.All)
	require.Len(t, all.Calls, 2)

	ev := apply(t, `{"type":"wait_event","seq":1,"name":"w","event":"paid","match":{"data.order":"o-1"}}`).(awaits.Wait)
	require.False(t, ev.Any)
	require.Equal(t, awaits.DefaultWaitTimeout, ev.Timeout)
	require.Equal(t, protocol.EntryKindWaitEvent, ev.Kind())
	require.JSONEq(t, `"o-1"`, string(ev.Of[0].Match["data.order"]))

	cb := apply(t, `{"type":"await_callback","seq":3,"name":"c","callback_seq":2}`).(awaits.Wait)
	require.Zero(t, cb.Timeout, "an await_callback without a timeout lasts until its callback expires")
	require.Equal(t, 2, cb.Of[0].CallbackSeq)

	run := apply(t, `{"type":"await_run","seq":1,"name":"r","run_id":"0190A0C1-0000-7000-8000-00000000000F"}`).(awaits.Wait)
	require.Equal(t, "0190a0c1-0000-7000-8000-00000000000f", run.Of[0].RunID, "a run id in lower case, as Postgres writes it")
	require.Equal(t, protocol.EntryKindAwaitRun, run.Kind())
	require.Equal(t, awaits.DefaultWaitTimeout, run.Timeout)

	any := apply(t, `{"type":"wait_any","seq":3,"name":"a","timeout":"1h","of":[{"type":"wait_event","seq":3,"name":"a","event":"e"},{"type":"receive","seq":3,"name":"a","topic":"t"},{"type":"await_callback","seq":3,"name":"a","callback_seq":1}]}`).(awaits.Wait)
	require.True(t, any.Any)
	require.Equal(t, time.Hour, any.Timeout)
	require.Equal(t, protocol.EntryKindWaitAny, any.Kind())
	var kinds []protocol.EntryKind
	for _, a := range any.Of {
		kinds = append(kinds, a.Kind())
	}
	require.Equal(t, []protocol.EntryKind{protocol.EntryKindWaitEvent, protocol.EntryKindReceive, protocol.EntryKindAwaitCallback}, kinds)
	require.True(t, any.Takes("t"))
	require.False(t, any.Takes("u"))
}

func TestWaitEnds(t *testing.T) {
	t.Parallel()
	any := apply(t, `{"type":"wait_any","seq":3,"name":"a","of":[{"type":"wait_event","seq":3,"name":"a","event":"e"},{"type":"receive","seq":3,"name":"a","topic":"t"}]}`).(awaits.Wait)
	ready := map[protocol.EntryKind]bool{protocol.EntryKindReceive: true, protocol.EntryKindWaitEvent: true}
	e, ok := any.First(func(a awaits.Alternative) (json.RawMessage, bool) {
		return json.RawMessage(`"` + string(a.Kind()) + `"`), ready[a.Kind()]
	})
	require.True(t, ok)
	require.Equal(t, protocol.EntryKindWaitAny, e.Kind)
	require.Equal(t, 3, e.Seq)
	require.JSONEq(t, `{"index":0,"kind":"wait_event","output":"wait_event"}`, string(*e.Output), "the lowest index among those satisfied at once")
	_, ok = any.First(func(awaits.Alternative) (json.RawMessage, bool) { return nil, false })
	require.False(t, ok)
	require.JSONEq(t, `{"timed_out":true}`, string(*any.TimedOut().Output))

	one := apply(t, `{"type":"receive","seq":2,"name":"r","topic":"t"}`).(awaits.Wait)
	e = one.End(0, json.RawMessage(`{"message":1}`))
	require.Equal(t, protocol.EntryKindReceive, e.Kind)
	require.JSONEq(t, `{"message":1}`, string(*e.Output), "a single wait journals its output as is")

	until := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	sl := apply(t, `{"type":"sleep","seq":1,"name":"s","until":"2030-01-01T00:00:00Z"}`).(awaits.Sleep)
	require.Equal(t, until, *sl.Entry(until).Until)
	require.Equal(t, protocol.EntryKindSleep, sl.Entry(until).Kind)
}

func TestTakesEvent(t *testing.T) {
	t.Parallel()
	w := apply(t, `{"type":"wait_event","seq":1,"name":"w","event":"paid","match":{"data.order.id":"o-1","data.total":10}}`).(awaits.Wait)
	a := w.Of[0]
	ev := func(name, data string) awaits.Event {
		return awaits.Event{ID: "e1", Name: name, Data: json.RawMessage(data)}
	}
	require.True(t, a.TakesEvent(ev("paid", `{"order":{"id":"o-1"},"total":10.0}`)), "numbers compare by value")
	require.False(t, a.TakesEvent(ev("paid", `{"order":{"id":"o-2"},"total":10}`)))
	require.False(t, a.TakesEvent(ev("shipped", `{"order":{"id":"o-1"},"total":10}`)))
	require.False(t, a.TakesEvent(ev("paid", `{"order":"o-1","total":10}`)), "a path the event lacks matches nothing")
	require.False(t, a.TakesEvent(ev("paid", `{"order":{"id":{"x":1}},"total":10}`)), "an object matches no scalar")
	byID := apply(t, `{"type":"wait_event","seq":1,"name":"w","event":"paid","match":{"id":"e1"}}`).(awaits.Wait)
	require.True(t, byID.Of[0].TakesEvent(ev("paid", `{}`)))

	created := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	require.False(t, a.LooksBackTo(created.Add(time.Hour), created), "no look-back: an earlier event is not taken")
	start := apply(t, `{"type":"wait_event","seq":1,"name":"w","event":"paid","since_start":true}`).(awaits.Wait).Of[0]
	require.True(t, start.LooksBackTo(created, created))
	require.False(t, start.LooksBackTo(created.Add(-time.Second), created))
	since := apply(t, `{"type":"wait_event","seq":1,"name":"w","event":"paid","since":"2026-06-01T00:00:00Z"}`).(awaits.Wait).Of[0]
	require.True(t, since.LooksBackTo(time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC), created))
	require.False(t, since.LooksBackTo(time.Date(2026, 5, 31, 0, 0, 0, 0, time.UTC), created))
	require.True(t, start.LooksBack())
	require.True(t, since.LooksBack())
	require.False(t, a.LooksBack())
}

func TestJournalsNothing(t *testing.T) {
	t.Parallel()
	require.True(t, awaits.JournalsNothing(decode(t, `{"type":"continue","seq":2,"name":"c"}`)))
	require.False(t, awaits.JournalsNothing(decode(t, `{"type":"sleep","seq":2,"name":"s","duration":"1s"}`)))
}

// TestMemory: what a run holds in memory ends a wait as the gateway's tables do: the
// oldest message of the topic, taken once; a callback's resolution, settled once; a
// look-back's earliest event that no wait of the run received; a run's end.
func TestMemory(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 7, 0, 0, 0, 0, time.UTC)
	var m awaits.Memory
	receive := apply(t, `{"type":"receive","seq":1,"name":"r","topic":"t"}`).(awaits.Wait).Of[0]
	_, ok := m.Pending(receive, awaits.Elsewhere{})
	require.False(t, ok)
	m.Send(awaits.Message{ID: "m1", Topic: "t", Data: json.RawMessage(`1`), At: at})
	m.Send(awaits.Message{ID: "m2", Topic: "t", Data: json.RawMessage(`2`), Source: "run-9", At: at})
	out, ok := m.Pending(receive, awaits.Elsewhere{})
	require.True(t, ok)
	require.JSONEq(t, `{"message":{"id":"m1","topic":"t","data":1,"identity":null,"sent_at":"2026-12-07T00:00:00Z"}}`, string(out), "the oldest, and no source run for one sent through the API")
	out, _ = m.Pending(receive, awaits.Elsewhere{})
	require.Contains(t, string(out), `"source_run_id":"run-9"`)
	_, ok = m.Pending(receive, awaits.Elsewhere{})
	require.False(t, ok, "each message is taken once")

	cb := apply(t, `{"type":"await_callback","seq":3,"name":"c","callback_seq":2}`).(awaits.Wait).Of[0]
	require.True(t, m.Settle(2, awaits.Resolution(json.RawMessage(`"ok"`), nil, at)))
	require.False(t, m.Settle(2, awaits.Resolution(json.RawMessage(`"again"`), nil, at)), "settled once")
	out, ok = m.Pending(cb, awaits.Elsewhere{})
	require.True(t, ok)
	require.JSONEq(t, `{"data":"ok","resolver":"token","resolved_at":"2026-12-07T00:00:00Z"}`, string(out))

	look := apply(t, `{"type":"wait_event","seq":4,"name":"w","event":"paid","since_start":true}`).(awaits.Wait).Of[0]
	evs := []awaits.Event{{ID: "e0", Name: "paid", At: at}, {ID: "e1", Name: "paid", At: at}, {ID: "e2", Name: "paid", At: at}}
	m.Take(evs[1]) // another wait of the run received it
	out, ok = m.Pending(look, awaits.Elsewhere{Events: evs, Created: 1})
	require.True(t, ok)
	require.Contains(t, string(out), `"id":"e2"`, "stored since the run was created, and not received by another wait")

	run := apply(t, `{"type":"await_run","seq":5,"name":"r","run_id":"0190a0c1-0000-7000-8000-000000000000"}`).(awaits.Wait).Of[0]
	ended := func(id string) (json.RawMessage, bool) {
		return awaits.RunEnded(id, "failed", nil, &protocol.ErrorInfo{Type: "boom", Message: "b"}), true
	}
	out, ok = m.Pending(run, awaits.Elsewhere{RunEnd: ended})
	require.True(t, ok)
	require.JSONEq(t, `{"run":{"id":"0190a0c1-0000-7000-8000-000000000000","status":"failed","error":{"type":"boom","message":"b"}}}`, string(out))
	require.JSONEq(t, `{"run":{"id":"x","error":{"type":"not_found","message":"no run x in the tenant"}}}`, string(awaits.RunNotFound("x")))
}
