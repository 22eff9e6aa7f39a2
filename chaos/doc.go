// Package chaos is stepgate's fault suite. Its tests start real processes (two
// `stepgate serve` gateways built from this module, a real Postgres that a scenario may
// restart, and a function app in the test process that records every step it runs) and
// break them while runs make progress: kill -9 at random moments and during a burst of
// starts, whole-fleet crashes, rolling SIGTERMs, Postgres restarts, the primary's loss
// and its synchronous standby's promotion (failover_test.go: the gateways on a multi-host
// URL), automatic failover under Patroni (patroni_test.go: three Postgres nodes, etcd,
// synchronous_mode; the leader's Postgres or Patroni killed, a switchover; make chaos
// only, skipped without patroni and etcd), a primary that hangs instead of dying
// (SIGSTOP of Postgres) and a cut link (a proxy that stops forwarding; hang_test.go),
// functions that answer badly or crash, and the River leader's death under a 1s
// schedule. It also runs the core scenarios through
// PgBouncer in transaction mode (pgbouncer_test.go: the gateways with
// STEPGATE_DATABASE_POOLER=transaction), and 8 gateways on one database, directly and
// through PgBouncer, measuring the connections they hold and River's leader
// (many_test.go).
//
// After each scenario it checks what the guarantees promise: every run ends as expected
// and none is stuck, the journal holds each (run, seq) once with no gap, a journaled step
// never runs again, every checkpoint the gateway acknowledged is in the journal, and runs
// move again within seconds of a kill. It prints the counts and recovery times.
//
//	go test ./chaos                                          the short suite (./test.sh runs it)
//	STEPGATE_CHAOS=long go test ./chaos -count=1 -v -timeout 30m   the long one (make chaos)
//
// TestSoak (soak_test.go) runs steady mixed load through two gateways, with kills, for
// STEPGATE_SOAK_DURATION (make soak; 20s by default), sampling memory, goroutines, files,
// connections and run latency over time, and fails on growth that does not level off.
// TestScaleOut (scale_test.go, make scale) measures one gateway against two.
//
// The package has no code outside its tests.
package chaos
