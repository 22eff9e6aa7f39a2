// Command compare measures two builds of stepgate side by side, as BENCHMARKS.md asks:
// figures on a shared machine move from day to day, so only a ratio measured in one
// sitting means anything. It builds each git revision, then for each round starts
// `stepgate dev` of one build on a fresh private Postgres, runs `stepgate bench` against
// it, stops it, and does the same with the other build, alternating; it prints each
// cell's median over the rounds for both builds and their ratio (new / old).
//
//	go run ./bench/compare [-rounds 3] [-duration 5s] [-functions hello,orders.checkout,chain] OLD NEW
//
// OLD and NEW are git revisions ("main", "HEAD~3", a commit); "." is the working tree.
// They may be the same revision, to compare settings: -old-env and -new-env add
// environment variables (KEY=VALUE,...) to each side's gateway, and -otlp-sink serves an
// OTLP/HTTP endpoint that accepts and discards traces, its URL in each side's
// $OTLP_SINK (so -new-env OTEL_EXPORTER_OTLP_ENDPOINT=$OTLP_SINK turns NEW's traces on).
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
	if err := run(sides, *rounds, []string{"--duration", *duration, "--functions", *functions, "--concurrency", *concurrency, "--json"}); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
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

func run(sides [2]side, rounds int, benchArgs []string) error {
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
	results := map[string][][]cell{}
	for r := range rounds {
		for _, s := range sides {
			rev := s.name()
			fmt.Fprintf(os.Stderr, "round %d: %s\n", r+1, rev)
			cells, err := measure(work, bins[s.rev], s.env, benchArgs)
			if err != nil {
				return fmt.Errorf("%s: %w", rev, err)
			}
			results[rev] = append(results[rev], cells)
		}
	}
	fmt.Printf("each round, runs/s (p50):\n")
	for i, c := range results[oldRev][0] {
		fmt.Printf("  %-16s %4d", c.Function, c.Concurrency)
		for _, rev := range []string{oldRev, newRev} {
			fmt.Printf("  %s:", rev)
			for _, r := range results[rev] {
				fmt.Printf(" %.0f (%.2fms)", r[i].RunsPerSecond, r[i].Latency.P50)
			}
		}
		fmt.Println()
	}
	fmt.Printf("\nmedians of %d alternating rounds; ratio = %s / %s\n\n", rounds, newRev, oldRev)
	fmt.Printf("%-16s %4s  %10s %10s %6s  %9s %9s %6s  %9s %9s %6s\n", "FUNCTION", "CONC",
		"RUNS/S old", "new", "ratio", "P50 old", "new", "ratio", "P99 old", "new", "ratio")
	for i, c := range results[oldRev][0] {
		o, n := stats(results[oldRev], i), stats(results[newRev], i)
		fmt.Printf("%-16s %4d  %10.1f %10.1f %6.2f  %8.2fms %8.2fms %6.2f  %8.2fms %8.2fms %6.2f\n", c.Function, c.Concurrency,
			o[0], n[0], n[0]/o[0], o[1], n[1], n[1]/o[1], o[2], n[2], n[2]/o[2])
	}
	return nil
}

// stats returns the medians of cell i over the rounds: runs/s, p50 and p99.
func stats(rounds [][]cell, i int) [3]float64 {
	var rps, p50, p99 []float64
	for _, r := range rounds {
		rps, p50, p99 = append(rps, r[i].RunsPerSecond), append(p50, r[i].Latency.P50), append(p99, r[i].Latency.P99)
	}
	return [3]float64{median(rps), median(p50), median(p99)}
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
// stops it.
func measure(work, bin string, env, benchArgs []string) ([]cell, error) {
	dir, err := os.MkdirTemp(work, "dev-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
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
		return nil, err
	}
	if err := dev.Start(); err != nil {
		return nil, err
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
		return nil, errors.New("stepgate dev printed no token")
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
		return nil, fmt.Errorf("bench: %w", err)
	}
	var rep struct {
		Cells []cell `json:"cells"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		return nil, fmt.Errorf("bench output: %w", err)
	}
	for _, c := range rep.Cells {
		if c.Errors > 0 {
			return nil, fmt.Errorf("%s at %d: %d errors", c.Function, c.Concurrency, c.Errors)
		}
	}
	if len(rep.Cells) == 0 {
		return nil, errors.New("bench measured nothing")
	}
	return rep.Cells, nil
}
