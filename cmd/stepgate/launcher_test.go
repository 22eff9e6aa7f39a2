package main

import "testing"

// TestLauncher checks the command dev's banner prints: the launcher the npm shim names,
// else go run's when go built the binary (as it built this test's).
func TestLauncher(t *testing.T) {
	if got := launcher(func(k string) string {
		if k == "STEPGATE_LAUNCHER" {
			return "npx stepgate"
		}
		return ""
	}); got != "npx stepgate" {
		t.Errorf("with STEPGATE_LAUNCHER: %q", got)
	}
	if got := launcher(func(string) string { return "" }); got != "go run ./cmd/stepgate" {
		t.Errorf("a binary go built: %q", got)
	}
}
