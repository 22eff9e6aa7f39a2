//go:build race

package ledger_test

// raceDetector is true in a build with the race detector, whose sync.Pool drops a part
// of what it is given: such a build allocates more, by chance, so TestLedger does not
// compare its allocations (./test.sh runs the ledger without it).
const raceDetector = true
