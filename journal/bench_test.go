package journal_test

import (
	"encoding/json"
	"testing"

	"github.com/stepgate/stepgate/internal/pgtest"
	"github.com/stepgate/stepgate/journal"
)

// BenchmarkAppendEntry measures a checkpoint: one fenced, idempotent insert.
func BenchmarkAppendEntry(b *testing.B) {
	db := pgtest.DB(b)
	run := mustCreateRun(b, db, claimed)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		e := journal.Entry{Seq: i + 1, Kind: journal.KindStep, Name: "step", Output: json.RawMessage(`{"ok":true}`)}
		if err := journal.AppendEntry(b.Context(), db, run.ID, run.Invocation, e, journal.Bounds{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendEntries measures a group commit of 8 checkpoints of 8 runs: one
// pipelined batch, one commit; ns/op is per batch (compare 8 × BenchmarkAppendEntry).
func BenchmarkAppendEntries(b *testing.B) {
	db := pgtest.DB(b)
	runs := make([]*journal.Run, 8)
	for i := range runs {
		runs[i] = mustCreateRun(b, db, claimed)
	}
	as := make([]journal.Append, len(runs))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		for j, run := range runs {
			e := journal.Entry{Seq: i + 1, Kind: journal.KindStep, Name: "step", Output: json.RawMessage(`{"ok":true}`)}
			as[j] = journal.Append{RunID: run.ID, Invocation: run.Invocation, Entry: e}
		}
		for _, err := range journal.AppendEntries(b.Context(), db, as) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkCreateRun measures starting a run with no wait: a queued insert.
func BenchmarkCreateRun(b *testing.B) {
	db := pgtest.DB(b)
	tenant := newTenant()
	mustRegister(b, db, tenant, "fn")
	id := journal.Identity{Subject: "bench", Tenant: tenant, Roles: []string{"admin"}}
	b.ReportAllocs()
	for b.Loop() {
		_, _, err := journal.CreateRun(b.Context(), db, journal.NewRun{
			ID: newID(), Tenant: tenant, Function: "fn", Input: json.RawMessage(`{"order_id":"o1","amount":500}`), Identity: id,
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}
