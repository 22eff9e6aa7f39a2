package journal_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
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

// BenchmarkFinishWithLastStep measures the commonest end of a run, its last step and its
// update in one batch, for a journal of 10 and of 100 entries: as the gateway applies a
// function's answer (Outcome.Answered: the update counts the journal's entries, so that
// no hole is left below its last) and as it applies an end of its own (no count).
func BenchmarkFinishWithLastStep(b *testing.B) {
	for _, entries := range []int{10, 100} {
		for _, answered := range []bool{true, false} {
			b.Run(fmt.Sprintf("entries=%d/answered=%t", entries, answered), func(b *testing.B) {
				db := pgtest.DB(b)
				runs := make([]*journal.Run, b.N)
				for i := range runs {
					runs[i] = mustCreateRun(b, db, claimed)
					for seq := 1; seq < entries; seq++ {
						e := journal.Entry{Seq: seq, Kind: journal.KindStep, Name: "step", Output: json.RawMessage(`{"ok":true}`)}
						if err := journal.AppendEntry(b.Context(), db, runs[i].ID, runs[i].Invocation, e, journal.Bounds{}); err != nil {
							b.Fatal(err)
						}
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				for _, run := range runs {
					o := journal.Completed(json.RawMessage(`"done"`),
						journal.Entry{Seq: entries, Kind: journal.KindStep, Name: "step", Output: json.RawMessage(`{"ok":true}`)})
					o.Answered = answered
					if _, err := journal.FinishWithLastStep(b.Context(), db, run.ID, run.Invocation, o); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkClaimRun measures claiming a queued run for an invocation: the claim, its
// journal and its steps' attempts, in one batch.
func BenchmarkClaimRun(b *testing.B) {
	db := pgtest.DB(b)
	tenant := newTenant()
	mustRegister(b, db, tenant, "fn")
	id := journal.Identity{Subject: "bench", Tenant: tenant, Roles: []string{"admin"}}
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = newID()
		if _, _, err := journal.CreateRun(b.Context(), db, journal.NewRun{
			ID: ids[i], Tenant: tenant, Function: "fn", Input: json.RawMessage(`{"order_id":"o1"}`), Identity: id,
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := journal.ClaimRun(b.Context(), db, ids[i], time.Minute); err != nil {
			b.Fatal(err)
		}
	}
}
