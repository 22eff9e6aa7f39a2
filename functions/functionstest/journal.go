package functionstest

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/stepgate/stepgate/protocol"
)

// store is the harness's journal: each run's entries by seq, with the holes that steps
// run in parallel may leave. It is guarded by Harness.mu.
type store map[string]map[int]protocol.JournalEntry

// appendEntry journals e for run runID as the gateway's checkpoint does: the entry at
// seq-1 must be journaled, or, with e's window W, one among the W seqs below seq (or seq
// is at most W); an identical repeat (same kind and name) is harmless, another entry at a
// journaled seq is a conflict. It returns the HTTP status the checkpoint answers and a
// message for a refusal. h.mu is held.
func (h *Harness) appendEntry(runID string, e protocol.JournalEntry) (int, string) {
	j := h.journals[runID]
	if j == nil {
		j = map[int]protocol.JournalEntry{}
		h.journals[runID] = j
	}
	if old, ok := j[e.Seq]; ok {
		if old.Kind != e.Kind || old.Name != e.Name {
			return http.StatusConflict, fmt.Sprintf("seq %d holds %s %q, not %s %q", e.Seq, old.Kind, old.Name, e.Kind, e.Name)
		}
		return http.StatusOK, ""
	}
	w := 1
	if e.Window != nil {
		w = *e.Window
	}
	follows := e.Seq >= 1 && e.Seq <= w
	for s := e.Seq - 1; s >= max(e.Seq-w, 1) && !follows; s-- {
		_, follows = j[s]
	}
	if !follows {
		return http.StatusBadRequest, fmt.Sprintf("seq %d out of order: no entry among the %d seqs below it", e.Seq, w)
	}
	if e.Kind == protocol.EntryKindSleep && e.Until == nil && e.Output != nil {
		// A sleep waited out in the process (SleepInProcess): its wake time is fixed on
		// the machine's clock, which the SDK waits on.
		var out struct{ Duration string }
		_ = json.Unmarshal(*e.Output, &out)
		d, _ := time.ParseDuration(out.Duration)
		until := time.Now().Add(d).UTC()
		e.Until = &until
	}
	e.Window = nil
	j[e.Seq] = e
	return http.StatusOK, ""
}

// entries returns run runID's journal in seq order.
func (h *Harness) entries(runID string) []protocol.JournalEntry {
	h.mu.Lock()
	defer h.mu.Unlock()
	j := h.journals[runID]
	out := make([]protocol.JournalEntry, 0, len(j))
	for _, s := range slices.Sorted(maps.Keys(j)) {
		out = append(out, j[s])
	}
	return out
}

// entry returns run runID's entry at seq. h.mu is held.
func (h *Harness) entryAt(runID string, seq int) (protocol.JournalEntry, bool) {
	e, ok := h.journals[runID][seq]
	return e, ok
}
