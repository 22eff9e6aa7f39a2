package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/invoker"
)

// TestTenantQuotaSettings: the tenants' storage quotas come from their variables, past
// 2 GiB too, default to invoker's defaults, and a bad value stops the start naming it.
func TestTenantQuotaSettings(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

	l, err := readLimits(env(map[string]string{
		"STEPGATE_MAX_TENANT_RUNS": "5000", "STEPGATE_MAX_TENANT_STREAM_BYTES": "21474836480",
		"STEPGATE_MAX_TENANT_MAILBOX_BYTES": "1048576",
	}))
	require.NoError(t, err)
	require.Equal(t, invoker.Limits{}.WithDefaults().MaxRunStreams, l.WithDefaults().MaxRunStreams)
	require.Equal(t, int64(5000), l.MaxTenantRuns)
	require.Equal(t, int64(20<<30), l.MaxTenantStreamBytes, "not capped at 2 GiB")
	require.Equal(t, int64(1<<20), l.MaxTenantMailboxBytes)

	l, err = readLimits(env(nil))
	require.NoError(t, err)
	l = l.WithDefaults()
	require.Equal(t, [3]int64{1_000_000, 10 << 30, 1 << 30}, [3]int64{l.MaxTenantRuns, l.MaxTenantStreamBytes, l.MaxTenantMailboxBytes})

	_, err = readLimits(env(map[string]string{"STEPGATE_MAX_TENANT_MAILBOX_BYTES": "-1"}))
	require.ErrorContains(t, err, "STEPGATE_MAX_TENANT_MAILBOX_BYTES")
}
