package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestScale runs the three phases with tiny counts on a private `stepgate dev`, so the
// tool keeps working; it checks what was measured, not how fast.
func TestScale(t *testing.T) {
	cfg := config{
		Suspended: 50, Sleepers: 20, Fanout: 20, Clients: 8,
		Idle: 200 * time.Millisecond, Settle: 100 * time.Millisecond,
		SleepMargin: 5 * time.Second, PhaseTimeout: 2 * time.Minute,
	}
	var log bytes.Buffer
	rep, err := run(t.Context(), cfg, &log)
	t.Log(log.String())
	require.NoError(t, err)

	s := rep.Suspended
	require.Equal(t, 50, s.Runs)
	require.Positive(t, s.Before.GatewayRSS)
	require.Positive(t, s.Held.GatewayHeap)
	require.Positive(t, s.Held.PostgresPSS)
	require.Greater(t, s.Held.DatabaseBytes, int64(0))
	require.Positive(t, s.CreateCPU.gateway+s.CreateCPU.postgres)

	require.Equal(t, 20, rep.Sleepers.Runs)
	require.Positive(t, rep.Sleepers.Wave.Peak)
	require.Positive(t, rep.Sleepers.AllDone) // the last run ends after the last wake time

	require.Equal(t, 20, rep.Fanout.Resumed) // and each of them completed (measureFanout checks)

	var out bytes.Buffer
	rep.print(&out)
	t.Log(out.String())
	for _, phase := range []string{"(a) 50 suspended runs", "(b) 20 sleeping runs", "(c) one event resuming 20 waiting runs"} {
		require.Contains(t, out.String(), phase)
	}
}
