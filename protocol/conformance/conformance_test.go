package conformance_test

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/conformance"
)

func TestLoad(t *testing.T) {
	scenarios, err := conformance.Load()
	if err != nil {
		t.Fatal(err)
	}
	if len(scenarios) < 15 {
		t.Fatalf("%d scenarios", len(scenarios))
	}
	for i, s := range scenarios {
		if i > 0 && scenarios[i-1].Name >= s.Name {
			t.Errorf("scenarios not sorted: %s before %s", scenarios[i-1].Name, s.Name)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	const ok = `{"description": "d", "start": "main", "functions": {"main": []}, "expect": {"status": "completed"}}`
	if _, err := conformance.Parse("ok", []byte(ok)); err != nil {
		t.Fatalf("a minimal scenario: %v", err)
	}
	for _, tc := range []struct{ name, file, err string }{
		{"UnknownField", strings.Replace(ok, `"start"`, `"strat": 1, "start"`, 1), `unknown field "strat"`},
		{"NoStart", strings.Replace(ok, `"start": "main"`, `"start": "other"`, 1), `start "other" is not one of its functions`},
		{"BadStatus", strings.Replace(ok, `"status": "completed"`, `"status": "done"`, 1), `expect.status "done"`},
		{"TwoThings", strings.Replace(ok, `"expect"`, `"deliveries": [{"wait": "1s", "event": {"name": "e"}}], "expect"`, 1), "deliveries[0] is 2 things (event, wait)"},
		{"NoThing", strings.Replace(ok, `"expect"`, `"deliveries": [{"resumes": true}], "expect"`, 1), "deliveries[0] is 0 things"},
		{"BadWait", strings.Replace(ok, `"expect"`, `"deliveries": [{"wait": "soon"}], "expect"`, 1), `wait "soon" is not a positive duration`},
		{"SuspendedWithoutAwait", strings.Replace(ok, `"main": []`, `"main": [{"answer": {"status": "suspended"}}]`, 1), "a suspended answer with no await"},
		{"EntryWithoutSeq", strings.Replace(ok, `"status": "completed"`, `"status": "completed", "entries": [{"kind": "step"}]`, 1), "expect.entries[0] names no seq"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := conformance.Parse("x", []byte(tc.file))
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("got %v, want an error with %q", err, tc.err)
			}
		})
	}
	_, err := conformance.LoadFS(fstest.MapFS{"s/a.json": {Data: []byte(ok)}, "s/b.json": {Data: []byte(`{}`)}}, "s")
	if err == nil || !strings.Contains(err.Error(), "scenario b:") {
		t.Fatalf("LoadFS of a bad file: %v", err)
	}
}

func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		want, got string
		ok        bool
	}{
		{`{"a": 1, "b": [true, null]}`, `{"b":[true,null],"a":1}`, true},
		{`{"a": 1}`, `{"a": 1.0}`, true},
		{`{"a": 1}`, `{"a": "1"}`, false},
		{`{"a": 1}`, `{"a": 1, "b": 2}`, false},
		{`{"a": 1, "b": 2}`, `{"a": 1}`, false},
		{`{"a": "$any"}`, `{"a": {"x": [1]}}`, true},
		{`{"a": "$any"}`, `{"a": null}`, true},
		{`{"a": "$any"}`, `{}`, false},
		{`"$any"`, ``, false},
		{`null`, ``, true},
		{`[1, 2]`, `[2, 1]`, false},
		{`[1]`, `[1, 1]`, false},
		{`{"a": {"b": "x"}}`, `{"a": {"b": "y"}}`, false},
		{`"2001-01-01T00:00:00Z"`, `"2001-01-01T00:00:00.000Z"`, true},
		{`"2001-01-01T00:00:00Z"`, `"2001-01-01T01:00:00+01:00"`, true},
		{`"2001-01-01T00:00:00Z"`, `"2001-01-01T00:00:01Z"`, false},
	} {
		err := conformance.Match(json.RawMessage(tc.want), json.RawMessage(tc.got))
		if (err == nil) != tc.ok {
			t.Errorf("Match(%s, %s) = %v, want ok %v", tc.want, tc.got, err, tc.ok)
		}
	}
}

func TestMatchEntry(t *testing.T) {
	out := json.RawMessage(`{"timed_out": true}`)
	e := protocol.JournalEntry{Seq: 2, Kind: protocol.EntryKindWaitEvent, Name: "w", Output: &out, Attempt: new(1)}
	pattern := func(s string) map[string]json.RawMessage {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, tc := range []struct {
		want string
		ok   bool
	}{
		{`{"seq": 2, "kind": "wait_event", "name": "w", "output": {"timed_out": true}}`, true},
		{`{"seq": 2, "error": null}`, true},
		{`{"seq": 2, "error": "$any"}`, false},
		{`{"seq": 2, "kind": "receive"}`, false},
		{`{"seq": 2, "output": {}}`, false},
	} {
		err := conformance.MatchEntry(pattern(tc.want), e)
		if (err == nil) != tc.ok {
			t.Errorf("MatchEntry(%s) = %v, want ok %v", tc.want, err, tc.ok)
		}
	}
	if err := conformance.MatchEntries([]map[string]json.RawMessage{pattern(`{"seq": 3}`)}, []protocol.JournalEntry{e}); err == nil ||
		!strings.Contains(err.Error(), `no entry at seq 3 (the journal holds 2 wait_event "w")`) {
		t.Errorf("MatchEntries of a missing seq: %v", err)
	}
	req := &protocol.InvocationRequest{Journal: []protocol.JournalEntry{e}, StepAttempts: &map[string]int{"2": 3}}
	if err := conformance.MatchRequest(pattern(`{"step_attempts": {"2": 3}, "journal": [{"seq": 2, "name": "w"}], "replay_only": null}`), req); err != nil {
		t.Errorf("MatchRequest: %v", err)
	}
	if err := conformance.MatchRequest(pattern(`{"journal": []}`), req); err == nil {
		t.Error("MatchRequest of a journal of another length matched")
	}
}
