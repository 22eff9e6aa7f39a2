// Command scale measures what grows with what when one gateway holds many runs (issue
// 29, item 6): the gateway's and Postgres's memory, CPU and database size with many
// suspended runs held at once, how late a wave of sleeping runs wakes when their wake
// times fall within one second, and how fast one event resumes many runs waiting for it.
//
//	go run ./bench/scale [-suspended 100000] [-sleepers 10000] [-fanout 10000]
//
// It builds cmd/stepgate from the working tree (or runs -bin), starts `stepgate dev` on a
// fresh private Postgres in a temporary directory (so a shared Postgres is not loaded),
// drives it through the gateway's API with concurrent clients, prints a table, and
// removes the directory. With -url it drives a running gateway instead (its token in
// -token, its database in -database-url; -gateway-pid and -postmaster-pid to measure
// CPU and memory).
//
// CPU is counted in CPU-seconds consumed (utime + stime from /proc/PID/stat) by the
// gateway process (which, under `stepgate dev`, also serves the example functions) and
// by the Postgres processes (the postmaster, its live children, and the children it has
// reaped), not in wall time, because other work may share the machine. The three phases
// run in order on one stack, so the sleepers and the fan-out run while the suspended
// runs of the first phase are still held.
//
// Phases:
//
//   - suspended: runs of orders.await_payment, each waiting for an event no one sends
//     (24h timeout). Measured before and while they are held: the gateway's RSS and heap
//     (after a forced GC), Postgres's memory (proportional set size), the database's
//     size, and idle CPU per second over -idle.
//   - sleepers: runs of nap sleeping until wake times spread evenly over one second,
//     -sleep-margin from their start. Lateness is, from each run's journal, the start of
//     the step after the sleep minus the sleep's wake time.
//   - fanout: runs of orders.await_payment waiting for one orders.paid event (the same
//     order id); the event is sent once. Lateness is each run's end minus the moment the
//     event's POST was answered.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"time"
)

func main() {
	var cfg config
	flag.IntVar(&cfg.Suspended, "suspended", 100000, "suspended runs held at once (0 skips the phase)")
	flag.IntVar(&cfg.Sleepers, "sleepers", 10000, "sleeping runs whose wake times fall within one second (0 skips)")
	flag.IntVar(&cfg.Fanout, "fanout", 10000, "runs waiting for one event (0 skips)")
	flag.IntVar(&cfg.Clients, "clients", 32, "concurrent API clients starting runs")
	flag.DurationVar(&cfg.Idle, "idle", 30*time.Second, "how long idle CPU is measured for")
	flag.DurationVar(&cfg.Settle, "settle", 10*time.Second, "quiet time before an idle measurement")
	flag.DurationVar(&cfg.SleepMargin, "sleep-margin", 0, "from the sleepers' start to their first wake time (0: from the suspended phase's rate)")
	flag.DurationVar(&cfg.PhaseTimeout, "phase-timeout", 10*time.Minute, "the longest a phase may wait for its runs")
	flag.StringVar(&cfg.Bin, "bin", "", "a stepgate binary (default: build ./cmd/stepgate)")
	flag.StringVar(&cfg.URL, "url", "", "drive this running gateway instead of starting one")
	flag.StringVar(&cfg.Token, "token", os.Getenv("STEPGATE_TOKEN"), "with -url: the token")
	flag.StringVar(&cfg.DatabaseURL, "database-url", os.Getenv("DATABASE_URL"), "with -url: its database, to count runs")
	flag.IntVar(&cfg.GatewayPID, "gateway-pid", 0, "with -url: the gateway's process id")
	flag.IntVar(&cfg.PostmasterPID, "postmaster-pid", 0, "with -url: the postmaster's process id")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	rep, err := run(ctx, cfg, os.Stderr)
	if rep != nil {
		rep.print(os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

// config is what a measurement does.
type config struct {
	Suspended, Sleepers, Fanout int
	Clients                     int
	Idle, Settle                time.Duration
	SleepMargin                 time.Duration
	PhaseTimeout                time.Duration
	Bin                         string
	URL, Token, DatabaseURL     string
	GatewayPID, PostmasterPID   int
}

// run measures the phases cfg asks for, logging progress to logw, and returns what it
// measured, also when a phase failed (with the phases before it).
func run(ctx context.Context, cfg config, logw io.Writer) (*report, error) {
	logf := func(format string, args ...any) {
		fmt.Fprintf(logw, "%s scale: "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
	}
	st, err := startStack(ctx, cfg, logf)
	if err != nil {
		return nil, err
	}
	defer st.stop()
	rep := &report{Bin: st.bin}
	if cfg.Suspended > 0 {
		if rep.Suspended, err = measureSuspended(ctx, st, cfg, logf); err != nil {
			return rep, fmt.Errorf("suspended: %w", err)
		}
	}
	if cfg.Sleepers > 0 {
		margin := cfg.SleepMargin
		if margin == 0 {
			// 1.5 times the time the suspended phase took per run, or 200 runs/s without it.
			perRun := 5 * time.Millisecond
			if s := rep.Suspended; s != nil {
				perRun = s.Created / time.Duration(s.Runs)
			}
			margin = 10*time.Second + 3*perRun*time.Duration(cfg.Sleepers)/2
		}
		if rep.Sleepers, err = measureSleepers(ctx, st, cfg, margin, logf); err != nil {
			return rep, fmt.Errorf("sleepers: %w", err)
		}
	}
	if cfg.Fanout > 0 {
		if rep.Fanout, err = measureFanout(ctx, st, cfg, logf); err != nil {
			return rep, fmt.Errorf("fanout: %w", err)
		}
	}
	return rep, nil
}
