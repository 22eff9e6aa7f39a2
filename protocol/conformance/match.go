package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stepgate/stepgate/protocol"
)

// Any is the pattern value that matches any value that is there (not an absent field).
const Any = "$any"

// Match reports how got differs from the pattern want, or nil when it matches: JSON
// values compared exactly (objects key for key, whatever their order; numbers by value,
// 1 and 1.0 alike; RFC 3339 times by instant, "2001-01-01T00:00:00Z" and
// "2001-01-01T00:00:00.000Z" alike), except that the string "$any" in want matches any
// value present in got, null included. An empty got (an absent field) is null, which only null matches.
func Match(want, got json.RawMessage) error {
	w, err := decode(want)
	if err != nil {
		return fmt.Errorf("pattern %s: %w", want, err)
	}
	g, err := decode(got)
	if err != nil {
		return fmt.Errorf("value %s: %w", got, err)
	}
	if p := diff(w, g, len(bytes.TrimSpace(got)) > 0, ""); p != "" {
		return fmt.Errorf("%s: want %s, got %s", p, want, orNull(got))
	}
	return nil
}

func orNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

func decode(raw json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// diff returns the path ("." for the root) of the first place got differs from want, or
// "". present says whether got is there at all (a null is there, for "$any").
func diff(want, got any, present bool, at string) string {
	where := at
	if where == "" {
		where = "."
	}
	if s, ok := want.(string); ok && s == Any {
		if !present {
			return where
		}
		return ""
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return where
		}
		keys := slices.Sorted(maps.Keys(w))
		for _, k := range keys {
			gv, there := g[k]
			if p := diff(w[k], gv, there, at+"."+k); p != "" {
				return p
			}
		}
		for _, k := range slices.Sorted(maps.Keys(g)) {
			if _, ok := w[k]; !ok {
				return at + "." + k + " (not in the pattern)"
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return where
		}
		for i := range w {
			if p := diff(w[i], g[i], true, at+"["+strconv.Itoa(i)+"]"); p != "" {
				return p
			}
		}
		return ""
	case json.Number:
		g, ok := got.(json.Number)
		if !ok {
			return where
		}
		wf, err1 := strconv.ParseFloat(string(w), 64)
		gf, err2 := strconv.ParseFloat(string(g), 64)
		if err1 != nil || err2 != nil || wf != gf {
			return where
		}
		return ""
	case string:
		if g, ok := got.(string); !ok || (g != w && !sameInstant(w, g)) {
			return where
		}
		return ""
	default: // bool, nil
		if want != got {
			return where
		}
		return ""
	}
}

// sameInstant reports whether a and b are both RFC 3339 times of the same instant.
func sameInstant(a, b string) bool {
	ta, err1 := time.Parse(time.RFC3339Nano, a)
	tb, err2 := time.Parse(time.RFC3339Nano, b)
	return err1 == nil && err2 == nil && ta.Equal(tb)
}

// MatchEntry reports how entry differs from the entry pattern want, or nil: each field
// the pattern names ("seq", "kind", "name", "output", "error", "attempt", "until", ...)
// is compared with Match against the entry's field of that name (absent: null); the
// fields it does not name are not compared.
func MatchEntry(want map[string]json.RawMessage, entry protocol.JournalEntry) error {
	raw, err := json.Marshal(entry)
	if err != nil {
		return err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return err
	}
	return matchFields(want, fields, "entry at seq "+strconv.Itoa(entry.Seq))
}

func matchFields(want, got map[string]json.RawMessage, what string) error {
	var errs []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if err := Match(want[k], got[k]); err != nil {
			errs = append(errs, k+": "+err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s: %s", what, strings.Join(errs, "; "))
	}
	return nil
}

// EntryAt returns the entry of journal at seq.
func EntryAt(journal []protocol.JournalEntry, seq int) (protocol.JournalEntry, bool) {
	for _, e := range journal {
		if e.Seq == seq {
			return e, true
		}
	}
	return protocol.JournalEntry{}, false
}

// MatchEntries reports how journal differs from the entry patterns want: each names a
// seq, at which journal must hold an entry that MatchEntry matches.
func MatchEntries(want []map[string]json.RawMessage, journal []protocol.JournalEntry) error {
	var errs []string
	for _, w := range want {
		var seq int
		if err := json.Unmarshal(w["seq"], &seq); err != nil {
			return fmt.Errorf("entry pattern's seq %s: %w", w["seq"], err)
		}
		e, ok := EntryAt(journal, seq)
		if !ok {
			errs = append(errs, fmt.Sprintf("no entry at seq %d (the journal holds %s)", seq, seqs(journal)))
			continue
		}
		if err := MatchEntry(w, e); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return nil
}

func seqs(journal []protocol.JournalEntry) string {
	if len(journal) == 0 {
		return "no entry"
	}
	var s []string
	for _, e := range journal {
		s = append(s, fmt.Sprintf("%d %s %q", e.Seq, e.Kind, e.Name))
	}
	return strings.Join(s, ", ")
}

// MatchRequest reports how the invocation request req differs from the pattern want (an
// Invocation's Request): each key a top-level field of the request, compared with Match,
// but "journal", a list of entry patterns that the request's journal must match one for
// one, in order.
func MatchRequest(want map[string]json.RawMessage, req *protocol.InvocationRequest) error {
	raw, err := json.Marshal(req)
	if err != nil {
		return err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return err
	}
	rest := maps.Clone(want)
	var errs []string
	if j, ok := rest["journal"]; ok {
		delete(rest, "journal")
		var pats []map[string]json.RawMessage
		if err := json.Unmarshal(j, &pats); err != nil {
			return fmt.Errorf("request pattern's journal: %w", err)
		}
		if len(pats) != len(req.Journal) {
			errs = append(errs, fmt.Sprintf("journal: want %d entries, got %s", len(pats), seqs(req.Journal)))
		} else {
			for i, p := range pats {
				if err := MatchEntry(p, req.Journal[i]); err != nil {
					errs = append(errs, "journal: "+err.Error())
				}
			}
		}
	}
	if err := matchFields(rest, fields, "request"); err != nil {
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}
