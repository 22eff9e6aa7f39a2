package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReadWorkers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, workers, reserve string
		wantWorkers, wantRes   int // wantRes: invoker.Config.FairReserve
		err                    string
	}{
		{"Defaults", "", "", 100, 0, ""},
		{"Workers", "20", "", 20, 0, ""},
		{"Reserve", "20", "5", 20, 5, ""},
		{"NoReserve", "20", "0", 20, -1, ""},
		{"ReserveAllWorkers", "20", "20", 0, 0, "STEPGATE_FAIR_RESERVE \"20\" is not a whole number from 0 (no reserve) to STEPGATE_WORKERS-1 (19)"},
		{"NegativeReserve", "", "-1", 0, 0, "STEPGATE_FAIR_RESERVE \"-1\" is not a whole number"},
		{"ReserveNotANumber", "", "10%", 0, 0, "STEPGATE_FAIR_RESERVE \"10%\" is not a whole number"},
		{"NoWorkers", "0", "", 0, 0, "STEPGATE_WORKERS \"0\" is not a positive whole number"},
		{"TooManyWorkers", "10001", "", 0, 0, "STEPGATE_WORKERS 10001 is more than the maximum of 10000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"STEPGATE_WORKERS": tc.workers, "STEPGATE_FAIR_RESERVE": tc.reserve}
			w, r, err := readWorkers(func(k string) string { return env[k] })
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.wantWorkers, w)
			require.Equal(t, tc.wantRes, r)
		})
	}
}
