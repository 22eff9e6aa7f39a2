//go:build !race

package ledger_test

// raceDetector: see race_test.go.
const raceDetector = false
