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
