package fairshare_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/invoker/internal/fairshare"
)

func TestFairShare(t *testing.T) {
	t.Parallel()

	t.Run("Reserve", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct{ workers, reserve, want int }{
			{100, 0, 10}, {10, 0, 1}, {15, 0, 2}, {2, 0, 1}, {1, 0, 0}, // default: a tenth, rounded up, at most workers-1
			{10, 3, 3}, {10, 10, 9}, {10, -1, 0},
		} {
			require.Equal(t, tc.want, fairshare.New(tc.workers, tc.reserve).Reserve(), "%d workers, reserve %d", tc.workers, tc.reserve)
		}
	})

	t.Run("ATenantAloneLeavesTheReserve", func(t *testing.T) {
		t.Parallel()
		f := fairshare.New(10, 0)
		for i := range 9 {
			require.True(t, f.Acquire("a"), "job %d of a, below workers-reserve", i+1)
		}
		require.False(t, f.Acquire("a"), "a alone does not take the reserve")
		require.True(t, f.Acquire("b"), "b, below its share, takes the reserve without any job of a ending")
	})

	t.Run("TenantsConvergeOnEqualShares", func(t *testing.T) {
		t.Parallel()
		f := fairshare.New(10, 0)
		for range 9 {
			require.True(t, f.Acquire("a"))
		}
		require.True(t, f.Acquire("b"))
		// As a's jobs end, b takes their workers up to its share (10/2), a gets none
		// back in the reserve zone until it is below its share.
		for i := range 4 {
			f.Release("a")
			require.False(t, f.Acquire("a"), "a holds %d, over its share of 5", 8-i)
			require.True(t, f.Acquire("b"), "b holds %d, under its share of 5", i+1)
		}
		f.Release("a") // a: 4, b: 5, busy 9: the reserve zone
		require.False(t, f.Acquire("b"), "b holds its share")
		require.True(t, f.Acquire("a"), "a, below its share again")
	})

	t.Run("ManyTenants", func(t *testing.T) {
		t.Parallel()
		f := fairshare.New(10, 4) // the zone starts at 6 busy
		for range 6 {
			require.True(t, f.Acquire("a"))
		}
		require.False(t, f.Acquire("a"))
		for _, tenant := range []string{"b", "c", "d"} {
			require.True(t, f.Acquire(tenant), "%s's first job", tenant)
		}
		// Four tenants in flight: each one's share is 10/4 = 2.
		require.True(t, f.Acquire("b"))
		require.False(t, f.Acquire("b"), "b holds its share of 2")
		require.True(t, f.Acquire("c"), "c holds 1 of its 2")
		require.False(t, f.Acquire("a"), "a holds 6, over its share")
	})

	t.Run("NoReserve", func(t *testing.T) {
		t.Parallel()
		f := fairshare.New(3, -1)
		for range 3 {
			require.True(t, f.Acquire("a"), "without a reserve a tenant may hold every worker")
		}
	})
}

// BenchmarkFairShareWake is what the fair share adds to an uncontended wake by a timer
// (and to each River job): one acquire and its release.
func BenchmarkFairShareWake(b *testing.B) {
	f := fairshare.New(100, 0)
	b.ReportAllocs()
	for b.Loop() {
		if !f.Acquire("tenant") {
			b.Fatal("refused")
		}
		f.Release("tenant")
	}
}
