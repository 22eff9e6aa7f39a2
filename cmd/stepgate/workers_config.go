package main

import (
	"fmt"
	"strconv"
)

// maxWorkers bounds STEPGATE_WORKERS.
const maxWorkers = 10000

// readWorkers reads how many River workers the gateway runs (STEPGATE_WORKERS, default
// 100) and how many of them only tenants below their fair share may take
// (STEPGATE_FAIR_RESERVE: unset, a tenth of the workers rounded up; 0 for none; less
// than the workers), as invoker.Config's Workers and FairReserve.
func readWorkers(getenv func(string) string) (workers, reserve int, err error) {
	w, err := envInt(getenv, "STEPGATE_WORKERS", 100)
	if err != nil {
		return 0, 0, err
	}
	if w > maxWorkers {
		return 0, 0, fmt.Errorf("STEPGATE_WORKERS %d is more than the maximum of %d", w, maxWorkers)
	}
	workers = int(w)
	v := getenv("STEPGATE_FAIR_RESERVE")
	if v == "" {
		return workers, 0, nil
	}
	r, err := strconv.Atoi(v)
	if err != nil || r < 0 || r >= workers {
		return 0, 0, fmt.Errorf("STEPGATE_FAIR_RESERVE %q is not a whole number from 0 (no reserve) to STEPGATE_WORKERS-1 (%d)", v, workers-1)
	}
	if r == 0 {
		return workers, -1, nil // invoker.Config: negative is none
	}
	return workers, r, nil
}
