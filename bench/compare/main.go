// Command compare measures two builds of stepgate side by side, as BENCHMARKS.md asks:
// figures on a shared machine move from day to day, so only a ratio measured in one
// sitting means anything. It builds each git revision, then for each round starts
// `stepgate dev` of one build on a fresh private Postgres, runs `stepgate bench` against
// it, stops it, and does the same with the other build, alternating; it prints each
// cell's median over the rounds for both builds and their ratio (new / old).
//
//	go run ./bench/compare [-rounds 3] [-duration 5s] [-functions hello,orders.checkout,chain] [-async] [-sleep-e2e 1s] OLD NEW
//
// OLD and NEW are git revisions ("main", "HEAD~3", a commit); "." is the working tree.
// They may be the same revision, to compare settings: -old-env and -new-env add
// environment variables (KEY=VALUE,...) to each side's gateway, and -otlp-sink serves an
// OTLP/HTTP endpoint that accepts and discards traces, its URL in each side's
// $OTLP_SINK (so -new-env OTEL_EXPORTER_OTLP_ENDPOINT=$OTLP_SINK turns NEW's traces on).
//
// -async and -sleep-e2e D pass `stepgate bench`'s --async and --sleep-e2e D to both
// builds: the async cells (`chain (async)`) join the table, and the sleep's end-to-end
// lateness (p50, p99) gets a table of its own. A build whose bench lacks one of the flags
// (older than them) is measured without it, and its side of those figures shows "-";
// compare says so. With -async each side's gateway gets STEPGATE_MAX_STREAMS_PER_SUBJECT
// (and …_PER_TENANT) of at least the highest concurrency, unless its -old-env or
// -new-env sets it: every client of an async cell holds a result long-poll open.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

func main() {
	rounds := flag.Int("rounds", 3, "rounds per build, alternating")
	duration := flag.String("duration", "5s", "each cell's measuring time")
	functions := flag.String("functions", "hello,orders.checkout,chain", "functions to measure")
	concurrency := flag.String("concurrency", "1,16", "client counts")
	oldEnv := flag.String("old-env", "", "environment of OLD's gateway: KEY=VALUE,...")
	newEnv := flag.String("new-env", "", "environment of NEW's gateway: KEY=VALUE,...")
	sink := flag.Bool("otlp-sink", false, "serve an OTLP/HTTP sink that discards traces; its URL is $OTLP_SINK in -old-env and -new-env")
	async := flag.Bool("async", false, "pass --async to both builds' bench: cells that start runs without ?wait")
	sleepE2E := flag.Duration("sleep-e2e", 0, "pass --sleep-e2e D to both builds' bench: a sleep's end-to-end lateness (0: skip)")
	flag.Parse()
	if flag.NArg() != 2 {
		fmt.Fprintln(os.Stderr, "usage: go run ./bench/compare [flags] OLD NEW")
		os.Exit(2)
	}
	sides := [2]side{{rev: flag.Arg(0), env: splitEnv(*oldEnv)}, {rev: flag.Arg(1), env: splitEnv(*newEnv)}}
	if *sink {
		url, stop := otlpSink()
		defer stop()
		for i := range sides {
			for j, kv := range sides[i].env {
				sides[i].env[j] = strings.ReplaceAll(kv, "$OTLP_SINK", url)
			}
		}
	}
	var extra []optionalArg
	if *async {
		extra = append(extra, optionalArg{flag: "async", args: []string{"--async"}})
		streams := 0
		for c := range strings.SplitSeq(*concurrency, ",") {
			n, _ := strconv.Atoi(strings.TrimSpace(c))
			streams = max(streams, n)
		}
		for i := range sides {
			sides[i].env = raiseLimit(sides[i].env, "STEPGATE_MAX_STREAMS_PER_SUBJECT", streams, 10)
			sides[i].env = raiseLimit(sides[i].env, "STEPGATE_MAX_STREAMS_PER_TENANT", streams, 100)
		}
	}
	if *sleepE2E > 0 {
		extra = append(extra, optionalArg{flag: "sleep-e2e", args: []string{"--sleep-e2e", sleepE2E.String()}})
	}
	if err := run(sides, *rounds, []string{"--duration", *duration, "--functions", *functions, "--concurrency", *concurrency, "--json"}, extra); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

// optionalArg is a bench flag that an older build may not have: args are passed to
// the builds whose `stepgate bench -h` lists -flag.
type optionalArg struct {
	flag string
	args []string
}

// raiseLimit returns env with name=n added when n is above the gateway's default def
// and env does not set name.
func raiseLimit(env []string, name string, n, def int) []string {
	if n <= def || slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, name+"=") }) {
		return env
	}
	return append(env, fmt.Sprintf("%s=%d", name, n))
}

// report is the part of `stepgate bench --json` compare reads.
type report struct {
	Cells    []cell `json:"cells"`
	SleepE2E *struct {
		Late struct {
			P50 float64 `json:"p50_ms"`
			P99 float64 `json:"p99_ms"`
		} `json:"late"`
		Errors int `json:"errors"`
	} `json:"sleep_e2e"`
}

// cell is one line of `stepgate bench --json`.
type cell struct {
	Function      string  `json:"function"`
	Concurrency   int     `json:"concurrency"`
	RunsPerSecond float64 `json:"runs_per_second"`
	Errors        int     `json:"errors"`
	Latency       struct {
		P50 float64 `json:"p50_ms"`
		P99 float64 `json:"p99_ms"`
	} `json:"latency"`
}

// side is one of the two builds compared: a git revision, and what its gateway's
// environment adds.
type side struct {
	rev string
	env []string
}

// name is how the output names the side: its revision, and its environment if any.
func (s side) name() string {
	if len(s.env) == 0 {
		return s.rev
	}
	return s.rev + "[" + strings.Join(s.env, ",") + "]"
}

func splitEnv(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// otlpSink serves, on a loopback port, an OTLP/HTTP endpoint that answers every export
// with success and discards it, and returns its base URL.
func otlpSink() (string, func()) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.Copy(io.Discard, r.Body)
		n.Add(b)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK) // an empty ExportTraceServiceResponse: all accepted
	}))
	return srv.URL, func() {
		srv.Close()
		fmt.Fprintf(os.Stderr, "otlp sink: %d bytes of traces received\n", n.Load())
	}
}

func run(sides [2]side, rounds int, benchArgs []string, extra []optionalArg) error {
	oldRev, newRev := sides[0].name(), sides[1].name()
	work, err := os.MkdirTemp("", "stepgate-compare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	// The private Postgres runs as the postgres OS user when we are root.
	if err := os.Chmod(work, 0o755); err != nil {
		return err
	}
	bins := map[string]string{}
	for _, s := range sides {
		if bins[s.rev] != "" {
			continue
		}
		if bins[s.rev], err = build(work, s.rev); err != nil {
			return fmt.Errorf("build %s: %w", s.rev, err)
		}
	}
	// Each side's bench arguments: the optional flags its build has.
	args := map[string][]string{}
	var notes []string
	for _, s := range sides {
		rev := s.name()
		help, _ := exec.Command(bins[s.rev], "bench", "-h").CombinedOutput()
		args[rev] = slices.Clone(benchArgs)
		for _, o := range extra {
			if strings.Contains(string(help), "  -"+o.flag+" ") || strings.Contains(string(help), "  -"+o.flag+"\n") {
				args[rev] = append(args[rev], o.args...)
			} else {
				notes = append(notes, fmt.Sprintf("%s's bench has no --%s: measured without it, its side of those figures is -", rev, o.flag))
			}
		}
	}
	for _, n := range notes {
		fmt.Fprintln(os.Stderr, "compare:", n)
	}
	results := map[string][]report{}
	for r := range rounds {
		for _, s := range sides {
			rev := s.name()
			fmt.Fprintf(os.Stderr, "round %d: %s\n", r+1, rev)
			rep, err := measure(work, bins[s.rev], s.env, args[rev])
			if err != nil {
				return fmt.Errorf("%s: %w", rev, err)
			}
			results[rev] = append(results[rev], rep)
		}
	}
	// The cells in the order measured, OLD's first, then those only NEW measured.
	var keys []cellKey
	for _, rev := range []string{oldRev, newRev} {
		for _, c := range results[rev][0].Cells {
			if k := c.key(); !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	fmt.Printf("each round, runs/s (p50):\n")
	for _, k := range keys {
		fmt.Printf("  %-24s %4d", k.function, k.concurrency)
		for _, rev := range []string{oldRev, newRev} {
			fmt.Printf("  %s:", rev)
			for _, r := range results[rev] {
				if c, ok := r.cell(k); ok {
					fmt.Printf(" %.0f (%.2fms)", c.RunsPerSecond, c.Latency.P50)
				} else {
					fmt.Printf(" -")
				}
			}
		}
		fmt.Println()
	}
	fmt.Printf("\nmedians of %d alternating rounds; ratio = %s / %s\n\n", rounds, newRev, oldRev)
	fmt.Printf("%-24s %4s  %10s %10s %6s  %9s %9s %6s  %9s %9s %6s\n", "FUNCTION", "CONC",
		"RUNS/S old", "new", "ratio", "P50 old", "new", "ratio", "P99 old", "new", "ratio")
	for _, k := range keys {
		o, oOK := stats(results[oldRev], k)
		n, nOK := stats(results[newRev], k)
		if !oOK || !nOK {
			fmt.Printf("%-24s %4d  %10s %10s %6s  %9s %9s %6s  %9s %9s %6s\n", k.function, k.concurrency,
				either(oOK, "%.1f", o[0]), either(nOK, "%.1f", n[0]), "-", either(oOK, "%.2fms", o[1]), either(nOK, "%.2fms", n[1]), "-",
				either(oOK, "%.2fms", o[2]), either(nOK, "%.2fms", n[2]), "-")
			continue
		}
		fmt.Printf("%-24s %4d  %10.1f %10.1f %6.2f  %8.2fms %8.2fms %6.2f  %8.2fms %8.2fms %6.2f\n", k.function, k.concurrency,
			o[0], n[0], n[0]/o[0], o[1], n[1], n[1]/o[1], o[2], n[2], n[2]/o[2])
	}
	o, oOK := sleepStats(results[oldRev])
	n, nOK := sleepStats(results[newRev])
	if oOK || nOK {
		fmt.Printf("\nsleep (e2e), response late by: medians of %d rounds; ratio = %s / %s\n\n", rounds, newRev, oldRev)
		fmt.Printf("%-24s %9s %9s %6s  %9s %9s %6s\n", "", "P50 old", "new", "ratio", "P99 old", "new", "ratio")
		ratio := func(i int) string {
			if !oOK || !nOK {
				return "-"
			}
			return fmt.Sprintf("%.2f", n[i]/o[i])
		}
		fmt.Printf("%-24s %9s %9s %6s  %9s %9s %6s\n", "sleep", either(oOK, "%.2fms", o[0]), either(nOK, "%.2fms", n[0]), ratio(0),
			either(oOK, "%.2fms", o[1]), either(nOK, "%.2fms", n[1]), ratio(1))
	}
	for _, n := range notes {
		fmt.Println("note:", n)
	}
	return nil
}

// either formats v with format when ok, else "-".
func either(ok bool, format string, v float64) string {
	if !ok {
		return "-"
	}
	return fmt.Sprintf(format, v)
}

// cellKey names a cell across builds and rounds.
type cellKey struct {
	function    string
	concurrency int
}

func (c cell) key() cellKey { return cellKey{c.Function, c.Concurrency} }

// cell returns r's cell k, if r measured it.
func (r report) cell(k cellKey) (cell, bool) {
	for _, c := range r.Cells {
		if c.key() == k {
			return c, true
		}
	}
	return cell{}, false
}

// stats returns the medians of cell k over the rounds: runs/s, p50 and p99; false
// when the rounds did not measure it.
func stats(rounds []report, k cellKey) ([3]float64, bool) {
	var rps, p50, p99 []float64
	for _, r := range rounds {
		c, ok := r.cell(k)
		if !ok {
			return [3]float64{}, false
		}
		rps, p50, p99 = append(rps, c.RunsPerSecond), append(p50, c.Latency.P50), append(p99, c.Latency.P99)
	}
	return [3]float64{median(rps), median(p50), median(p99)}, true
}

// sleepStats returns the medians of the sleep's end-to-end lateness over the rounds,
// p50 and p99; false when the rounds did not measure it.
func sleepStats(rounds []report) ([2]float64, bool) {
	var p50, p99 []float64
	for _, r := range rounds {
		if r.SleepE2E == nil {
			return [2]float64{}, false
		}
		p50, p99 = append(p50, r.SleepE2E.Late.P50), append(p99, r.SleepE2E.Late.P99)
	}
	return [2]float64{median(p50), median(p99)}, true
}

func median(xs []float64) float64 {
	slices.Sort(xs)
	if n := len(xs); n%2 == 1 {
		return xs[n/2]
	} else {
		return (xs[n/2-1] + xs[n/2]) / 2
	}
}

// build builds cmd/stepgate at rev into work and returns the binary's path.
func build(work, rev string) (string, error) {
	src := "."
	if rev != "." {
		src = filepath.Join(work, "src-"+sanitize(rev))
		if out, err := exec.Command("git", "worktree", "add", "--detach", src, rev).CombinedOutput(); err != nil {
			return "", fmt.Errorf("git worktree add: %v: %s", err, out)
		}
		defer exec.Command("git", "worktree", "remove", "--force", src).Run()
	}
	bin := filepath.Join(work, "stepgate-"+sanitize(rev))
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/stepgate")
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("%v: %s", err, out)
	}
	return bin, nil
}

func sanitize(rev string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == '~' || r == '^' || r == '.' {
			return '_'
		}
		return r
	}, rev)
}

// measure starts `stepgate dev` of bin on a fresh private Postgres, benchmarks it, and
// stops it. A cell or a sleep with errors fails it.
func measure(work, bin string, env, benchArgs []string) (report, error) {
	var rep report
	dir, err := os.MkdirTemp(work, "dev-")
	if err != nil {
		return rep, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return rep, err
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return rep, err
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	dev := exec.CommandContext(ctx, bin, "dev", "--addr", addr, "--dir", filepath.Join(dir, "state"))
	dev.Env = append(append(os.Environ(), "DATABASE_URL="), env...)
	dev.Cancel = func() error { return dev.Process.Signal(os.Interrupt) }
	dev.WaitDelay = 30 * time.Second
	stdout, err := dev.StdoutPipe()
	if err != nil {
		return rep, err
	}
	if err := dev.Start(); err != nil {
		return rep, err
	}
	defer func() { cancel(); _ = dev.Wait() }()
	var token, dbURL string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && (token == "" || dbURL == "") {
		line := sc.Text()
		if t, ok := strings.CutPrefix(line, "STEPGATE_TOKEN="); ok {
			token = t
		}
		if f := strings.Fields(line); len(f) == 2 && f[0] == "database" {
			dbURL = f[1]
		}
	}
	if token == "" {
		return rep, errors.New("stepgate dev printed no token")
	}
	go func() { // drain
		for sc.Scan() {
		}
	}()
	bench := exec.CommandContext(ctx, bin, append([]string{"bench", "--database-url", dbURL}, benchArgs...)...)
	bench.Env = append(os.Environ(), "STEPGATE_URL=http://"+addr, "STEPGATE_TOKEN="+token)
	bench.Stderr = os.Stderr
	out, err := bench.Output()
	if err != nil {
		return rep, fmt.Errorf("bench: %w", err)
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return rep, fmt.Errorf("bench output: %w", err)
	}
	for _, c := range rep.Cells {
		if c.Errors > 0 {
			return rep, fmt.Errorf("%s at %d: %d errors", c.Function, c.Concurrency, c.Errors)
		}
	}
	if s := rep.SleepE2E; s != nil && s.Errors > 0 {
		return rep, fmt.Errorf("sleep (e2e): %d errors", s.Errors)
	}
	if len(rep.Cells) == 0 {
		return rep, errors.New("bench measured nothing")
	}
	return rep, nil
}
