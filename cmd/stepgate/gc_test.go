package main

import (
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestTuneGC(t *testing.T) {
	old := debug.SetGCPercent(123)
	t.Cleanup(func() { debug.SetGCPercent(old) })

	setByUser := func(k string) string {
		if k == "GOGC" {
			return "123"
		}
		return ""
	}
	require.Equal(t, 123, tuneGC(setByUser), "GOGC set: Go's reading of it stays")
	require.Equal(t, 123, debug.SetGCPercent(123))

	require.Equal(t, gatewayGCPercent, tuneGC(func(string) string { return "" }))
	require.Equal(t, gatewayGCPercent, debug.SetGCPercent(gatewayGCPercent), "GOGC unset: the gateway's target is in force")
}
