// Package ledger counts what one run of each shape costs the gateway, so that a change
// that adds a statement, a commit or a request to a run's path shows, whatever the
// machine: timing cannot see a 3% cost on a noisy machine, a count can.
//
// The ledger file (ledger.txt, beside this package) keeps the counts; TestLedger
// measures them again against a real gateway (internal/wiring/stack) and a real Postgres,
// and fails when one differs. A change that raises a count updates the file in the same
// commit (go test ./bench/ledger -run '^TestLedger$' -update) and says why in its
// message; one that lowers a count updates it too, so that the gain is kept.
//
// How it counts, per run of a shape:
//   - HTTP requests: the test's driver, a process of its own, plays the client, serves
//     the functions and makes their calls back, and counts each kind.
//   - Statements, round trips and transactions: a [Tracer] on every connection of the
//     gateway (its pools and its listener).
//   - Commits, rows and WAL: the WAL the run's transactions wrote, read back with
//     pg_walinspect ([ReadWAL]).
//   - Allocations: the gateway's process's heap allocations (the driver holds the
//     functions and the client, so the test's process holds only the gateway).
//
// A run's window starts when the driver starts it and ends when the gateway has
// nothing left to do for it: no run open, no River job due (a sleep's backstop job
// included, which River's scheduler moves every 5 seconds). What the gateway does on
// its own meanwhile (River's leader election and maintenance, a fetch that finds no job,
// the maintenance passes) is left out by name. Some paths race (River's worker and the
// gateway's wake claim one run; a waiter is told, or reads the run that has just
// finished), so a run may cost a little less than usual, never more than its slowest
// path: each shape is run seven times, the file records the usual run (the most frequent
// counts, the median allocations and WAL), and the test fails only when the least of
// the seven rose above it, which a real cost does in every run. River fetches and completes
// jobs in batches whose size depends on timing: a job's share is counted as if it had
// been fetched or completed alone.
package ledger
