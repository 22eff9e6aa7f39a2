package main

import (
	"fmt"
	"io"
	"time"
)

// report is what a measurement found: one part per phase measured.
type report struct {
	Bin       string
	Suspended *suspendedReport
	Sleepers  *sleepersReport
	Fanout    *fanoutReport
}

func (r *report) print(w io.Writer) {
	fmt.Fprintf(w, "CPU in CPU-seconds consumed (utime+stime); gateway = the `stepgate dev` process, example functions included; postgres = postmaster and its backends\n")
	if s := r.Suspended; s != nil {
		fmt.Fprintf(w, "\n(a) %d suspended runs (orders.await_payment, each waiting for its own event, 24h timeout)\n", s.Runs)
		fmt.Fprintf(w, "  created: all 202s in %s, all waiting after %s (%.0f runs/s); CPU gateway %s, postgres %s (%s, %s per run)\n",
			secs(s.Accepted), secs(s.Created), float64(s.Runs)/s.Created.Seconds(), secs(s.CreateCPU.gateway), secs(s.CreateCPU.postgres),
			perRun(s.CreateCPU.gateway, s.Runs), perRun(s.CreateCPU.postgres, s.Runs))
		fmt.Fprintf(w, "  %-26s %14s %14s %14s\n", "", "before", "held", "per run")
		row := func(name string, before, held int64, unit string) {
			fmt.Fprintf(w, "  %-26s %14s %14s %14s\n", name, kib(before, unit), kib(held, unit), perRunBytes(held-before, s.Runs, unit))
		}
		row("gateway RSS", s.Before.GatewayRSS, s.Held.GatewayRSS, "KiB")
		row("gateway heap after GC", s.Before.GatewayHeap, s.Held.GatewayHeap, "KiB")
		row("postgres memory (PSS)", s.Before.PostgresPSS, s.Held.PostgresPSS, "KiB")
		row("database size", s.Before.DatabaseBytes, s.Held.DatabaseBytes, "B")
		fmt.Fprintf(w, "  %-26s %11.1f ms/s %9.1f ms/s\n", "gateway idle CPU", ms(s.IdleBefore.gateway), ms(s.IdleHeld.gateway))
		fmt.Fprintf(w, "  %-26s %11.1f ms/s %9.1f ms/s\n", "postgres idle CPU", ms(s.IdleBefore.postgres), ms(s.IdleHeld.postgres))
		fmt.Fprintf(w, "  %-26s %11.1f ms/s %9.1f ms/s\n", "  of which backends", ms(s.IdleBefore.pgBackends), ms(s.IdleHeld.pgBackends))
		fmt.Fprintf(w, "  %-26s %11.1f ms/s %9.1f ms/s\n", "  of which autovacuum", ms(s.IdleBefore.pgVacuums), ms(s.IdleHeld.pgVacuums))
	}
	if s := r.Sleepers; s != nil {
		fmt.Fprintf(w, "\n(b) %d sleeping runs (nap) with wake times spread over 1 s, %s after the first start (all suspended after %s)\n",
			s.Runs, secs(s.Margin), secs(s.Suspended))
		fmt.Fprintf(w, "  woke late (next step's start − wake time): p50 %s  p99 %s  max %s\n", msStr(s.Late.P50), msStr(s.Late.P99), msStr(s.Late.Max))
		fmt.Fprintf(w, "  all ended %s after the first wake time, %s after the last\n", secs(s.AllDone), secs(s.AllDone-time.Second))
		printWave(w, s.Wave, s.Runs)
	}
	if s := r.Fanout; s != nil {
		fmt.Fprintf(w, "\n(c) one event resuming %d waiting runs (orders.await_payment, one order id; all waiting after %s)\n", s.Runs, secs(s.Created))
		fmt.Fprintf(w, "  the event's POST took %s and resumed %d runs\n", secs(s.Send), s.Resumed)
		fmt.Fprintf(w, "  run ended after the POST's answer: p50 %s  p99 %s  max %s\n", msStr(s.Late.P50), msStr(s.Late.P99), msStr(s.Late.Max))
		fmt.Fprintf(w, "  all ended %s after the POST's answer (%.0f runs/s from the POST)\n", secs(s.AllDone), float64(s.Runs)/(s.AllDone+s.Send).Seconds())
		printWave(w, s.Wave, s.Runs)
	}
}

func printWave(w io.Writer, v wave, runs int) {
	peak := "sampled every 20 ms"
	if v.PeakReset {
		peak = "VmHWM, reset at the wave's start"
	}
	fmt.Fprintf(w, "  CPU for the wave: gateway %s, postgres %s (%s, %s per run)\n",
		secs(v.CPU.gateway), secs(v.CPU.postgres), perRun(v.CPU.gateway, runs), perRun(v.CPU.postgres, runs))
	fmt.Fprintf(w, "  gateway RSS: %s before, peak %s (%s)\n", kib(v.RSSBefore, "KiB"), kib(v.Peak, "KiB"), peak)
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func msStr(d time.Duration) string { return fmt.Sprintf("%.1f ms", ms(d)) }

func perRun(d time.Duration, n int) string {
	return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)/float64(n))
}

// kib formats n, KiB or bytes as unit says, in MiB.
func kib(n int64, unit string) string {
	if unit == "KiB" {
		n *= 1024
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

func perRunBytes(n int64, runs int, unit string) string {
	if unit == "KiB" {
		n *= 1024
	}
	return fmt.Sprintf("%.0f B", float64(n)/float64(runs))
}
