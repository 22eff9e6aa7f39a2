package main

import "runtime/debug"

// gatewayGCPercent is the Go garbage collector's target for a gateway process (serve and
// dev) when GOGC is not set: the heap may grow to five times what is live before a
// collection, instead of Go's default of twice. A gateway's live heap is small (tens of
// MiB: pools, caches and the runs in flight) and its garbage is per request, so fewer
// collections cost little memory and give the CPU back to requests: measured in
// docs/benchmarks-history.md ("The garbage collector's target"). GOGC and GOMEMLIMIT, when set,
// are obeyed as Go obeys them.
const gatewayGCPercent = 400

// tuneGC sets gatewayGCPercent unless getenv says GOGC, and returns the percent in force.
func tuneGC(getenv func(string) string) int {
	if getenv("GOGC") != "" {
		percent := debug.SetGCPercent(100)
		debug.SetGCPercent(percent)
		return percent
	}
	debug.SetGCPercent(gatewayGCPercent)
	return gatewayGCPercent
}
