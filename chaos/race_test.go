//go:build race

package chaos_test

// raceEnabled: the test binary runs with the race detector, so the gateways are built
// with it too (and share its build cache).
const raceEnabled = true
