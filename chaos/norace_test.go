//go:build !race

package chaos_test

// raceEnabled: see race_test.go.
const raceEnabled = false
