package invoker_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/invoker"
)

// TestFairShareSnoozesBackOff: a job the fair share holds back is snoozed for longer
// each time, never past River's scheduler interval. (The fair share itself is tested in
// package fairshare.)
func TestFairShareSnoozesBackOff(t *testing.T) {
	t.Parallel()
	prev := time.Duration(0)
	for n := range 6 {
		d := invoker.SnoozeFor(fmt.Appendf(nil, `{"snoozes":%d}`, n))
		require.Greater(t, d, prev/2, "snooze %d", n)
		require.LessOrEqual(t, d, 4*time.Second, "under River's scheduler interval")
		prev = d
	}
	require.Greater(t, invoker.SnoozeFor(nil), time.Duration(0))
}
