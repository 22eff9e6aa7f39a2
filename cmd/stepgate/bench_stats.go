package main

import (
	"slices"
	"time"
)

// latencyStats summarizes latency samples. Percentiles use the nearest-rank
// method: P99 is the smallest sample at or above 99% of all samples.
type latencyStats struct {
	N    int
	Min  time.Duration
	Mean time.Duration
	P50  time.Duration
	P90  time.Duration
	P99  time.Duration
	Max  time.Duration
}

// summarize returns the statistics of samples, the zero latencyStats when
// there are none. It does not modify samples.
func summarize(samples []time.Duration) latencyStats {
	if len(samples) == 0 {
		return latencyStats{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return latencyStats{
		N:    len(s),
		Min:  s[0],
		Mean: sum / time.Duration(len(s)),
		P50:  percentile(s, 50),
		P90:  percentile(s, 90),
		P99:  percentile(s, 99),
		Max:  s[len(s)-1],
	}
}

// percentile returns the p-th percentile (0 < p <= 100) of sorted, non-empty
// samples by nearest rank: the sample at rank ceil(p/100 * n), in integer
// arithmetic so that rank boundaries are exact.
func percentile(sorted []time.Duration, p int) time.Duration {
	n := len(sorted)
	rank := (p*n + 99) / 100
	rank = min(max(rank, 1), n)
	return sorted[rank-1]
}
