package chaos_test

import (
	"math"
	"testing"
)

// TestLevelsOff checks the soak's growth rule on series of known shape: what levels off
// (after a warm-up, with GC's sawtooth, with gaps) passes, and steady growth, or a late
// climb, fails.
func TestLevelsOff(t *testing.T) {
	series := func(n int, f func(i int) float64) []float64 {
		xs := make([]float64, n)
		for i := range xs {
			xs[i] = f(i)
		}
		return xs
	}
	cases := []struct {
		name     string
		xs       []float64
		rel, abs float64
		ok       bool
	}{
		{"flat", series(30, func(int) float64 { return 100 }), 0.1, 0, true},
		{"warm-up, then flat", series(30, func(i int) float64 { return 100 - 60*math.Exp(-float64(i)/3) }), 0.1, 0, true},
		{"GC sawtooth between 50 and 100", series(40, func(i int) float64 { return 50 + float64(i%7)*50/6 }), 0.1, 0, true},
		{"flat with a spike per third", series(30, func(i int) float64 { return map[bool]float64{true: 400, false: 100}[i%10 == 5] }), 0.1, 0, true},
		{"flat with gaps (a gateway down)", series(30, func(i int) float64 { return map[bool]float64{true: math.NaN(), false: 100}[i%4 == 0] }), 0.1, 0, true},
		{"steady growth", series(30, func(i int) float64 { return 100 + 3*float64(i) }), 0.1, 0, false},
		{"slow growth within abs", series(30, func(i int) float64 { return 100 + 0.1*float64(i) }), 0, 5, true},
		{"slow growth past abs", series(30, func(i int) float64 { return 100 + 0.5*float64(i) }), 0, 3, false},
		{"climbs in the last third", series(30, func(i int) float64 { return 100 + 10*max(float64(i-20), 0) }), 0.1, 0, false},
	}
	for _, c := range cases {
		g := levelsOff(c.xs, c.rel, c.abs)
		if g.ok != c.ok || g.tooFew {
			t.Errorf("%s: levelsOff = %+v; want ok=%v", c.name, g, c.ok)
		}
	}
	if g := levelsOff([]float64{1, 2, 3, 4}, 0, 0); !g.tooFew || !g.ok {
		t.Errorf("4 samples: %+v; want tooFew (thirds of fewer than 2 samples)", g)
	}
}
