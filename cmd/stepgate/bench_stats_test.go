package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSummarize(t *testing.T) {
	t.Parallel()

	ms := func(ns ...int) []time.Duration {
		out := make([]time.Duration, len(ns))
		for i, n := range ns {
			out[i] = time.Duration(n) * time.Millisecond
		}
		return out
	}
	oneToHundred := make([]int, 100)
	for i := range oneToHundred {
		oneToHundred[i] = 100 - i // reversed: summarize sorts
	}
	oneToThousand := make([]int, 1000)
	for i := range oneToThousand {
		oneToThousand[i] = i + 1
	}

	tests := []struct {
		name    string
		samples []time.Duration
		want    latencyStats
	}{
		{"None", nil, latencyStats{}},
		{"One", ms(7), latencyStats{N: 1, Min: ms(7)[0], Mean: ms(7)[0], P50: ms(7)[0], P90: ms(7)[0], P99: ms(7)[0], Max: ms(7)[0]}},
		{"Two", ms(10, 20), latencyStats{N: 2, Min: ms(10)[0], Mean: ms(15)[0], P50: ms(10)[0], P90: ms(20)[0], P99: ms(20)[0], Max: ms(20)[0]}},
		{"Ten", ms(5, 1, 9, 3, 7, 2, 8, 4, 10, 6), latencyStats{N: 10, Min: ms(1)[0], Mean: 5500 * time.Microsecond, P50: ms(5)[0], P90: ms(9)[0], P99: ms(10)[0], Max: ms(10)[0]}},
		{"Hundred", ms(oneToHundred...), latencyStats{N: 100, Min: ms(1)[0], Mean: 50500 * time.Microsecond, P50: ms(50)[0], P90: ms(90)[0], P99: ms(99)[0], Max: ms(100)[0]}},
		{"Thousand", ms(oneToThousand...), latencyStats{N: 1000, Min: ms(1)[0], Mean: 500500 * time.Microsecond, P50: ms(500)[0], P90: ms(900)[0], P99: ms(990)[0], Max: ms(1000)[0]}},
		{"OneOutlier", ms(1, 1, 1, 1, 1, 1, 1, 1, 1, 1000), latencyStats{N: 10, Min: ms(1)[0], Mean: 100900 * time.Microsecond, P50: ms(1)[0], P90: ms(1)[0], P99: ms(1000)[0], Max: ms(1000)[0]}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var before []time.Duration
			before = append(before, tt.samples...)
			require.Equal(t, tt.want, summarize(tt.samples))
			require.Equal(t, before, tt.samples, "summarize must not reorder its input")
		})
	}
}
