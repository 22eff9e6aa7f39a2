package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/stepgate/stepgate/protocol"
)

// Widths past which JSON values are cut in text output; --json shows them
// whole.
const (
	headerJSONWidth = 400
	cellJSONWidth   = 60
)

// newTable returns a tabwriter for aligned columns separated by two spaces.
func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// truncate cuts s to at most n runes, marking the cut with "…".
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// compactJSON returns raw as one line, cut to width runes. Values that are
// not valid JSON are shown as they are; absent ones as "-".
func compactJSON(raw []byte, width int) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "-"
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return truncate(strings.Join(strings.Fields(string(raw)), " "), width)
	}
	return truncate(b.String(), width)
}

// jsonPtr returns the bytes of an optional JSON value.
func jsonPtr(p *protocol.AnyJSON) []byte {
	if p == nil {
		return nil
	}
	return *p
}

// formatDuration prints d with a precision that suits its size: 850µs,
// 2ms, 1.25s, 3m12s.
func formatDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + formatDuration(-d)
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(10 * time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// formatTime prints t in loc to the second, or "-" for nil.
func formatTime(t *time.Time, loc *time.Location) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.In(loc).Format("2006-01-02 15:04:05")
}

// formatTimeMillis prints t in loc to the millisecond, or "-" for nil.
func formatTimeMillis(t *time.Time, loc *time.Location) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	return t.In(loc).Format("2006-01-02 15:04:05.000 MST")
}

// between returns the duration from start to end, or "-" if either is nil.
func between(start, end *time.Time) string {
	if start == nil || end == nil {
		return "-"
	}
	return formatDuration(end.Sub(*start))
}

// formatError prints an ErrorInfo as "type: message", marking retryable ones.
func formatError(e *protocol.ErrorInfo) string {
	if e == nil {
		return "-"
	}
	s := e.Type + ": " + e.Message
	if e.Type == "" {
		s = e.Message
	}
	if e.Retryable != nil && *e.Retryable {
		s += " (retryable)"
	}
	return s
}

// functionTimeout prints a function's configured timeout, or "-" when it
// uses the gateway's default.
func functionTimeout(cfg protocol.FunctionConfig) string {
	if cfg.Timeout == nil || *cfg.Timeout == "" {
		return "-"
	}
	return *cfg.Timeout
}

// writeFunctionsTable writes functions as a table: NAME REVISION URL TIMEOUT.
func writeFunctionsTable(w io.Writer, fns []protocol.Function) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tREVISION\tURL\tTIMEOUT")
	for _, f := range fns {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", f.Name, f.Revision, f.URL, functionTimeout(f.Config))
	}
	return tw.Flush()
}

// writeSyncedTable writes a sync's functions as a table; CHANGED says whether the sync
// made a new revision of each.
func writeSyncedTable(w io.Writer, fns []protocol.SyncedFunction) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "NAME\tREVISION\tCHANGED\tURL\tTIMEOUT")
	for _, f := range fns {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", f.Name, f.Revision, yesNo(f.Changed), f.URL, functionTimeout(f.Config))
	}
	return tw.Flush()
}

// writeFunction writes one function revision as "key  value" lines.
func writeFunction(w io.Writer, f *protocol.Function, loc *time.Location) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "name\t%s\n", f.Name)
	fmt.Fprintf(tw, "revision\t%d\n", f.Revision)
	fmt.Fprintf(tw, "url\t%s\n", f.URL)
	fmt.Fprintf(tw, "timeout\t%s\n", functionTimeout(f.Config))
	if r := f.Config.Retries; r != nil {
		if r.MaxAttempts != nil {
			fmt.Fprintf(tw, "max attempts\t%d\n", *r.MaxAttempts)
		}
		if r.InitialInterval != nil {
			fmt.Fprintf(tw, "retry initial interval\t%s\n", *r.InitialInterval)
		}
		if r.MaxInterval != nil {
			fmt.Fprintf(tw, "retry max interval\t%s\n", *r.MaxInterval)
		}
	}
	fmt.Fprintf(tw, "registered\t%s\n", formatTime(&f.CreatedAt, loc))
	if lc := f.LastCheck; lc != nil {
		verdict := "not registered"
		switch {
		case lc.Forced != nil && *lc.Forced:
			verdict = "registered with --force"
		case lc.Registered:
			verdict = "registered"
		}
		fmt.Fprintf(tw, "last check\t%s, %s, %s\n", formatTime(&lc.CheckedAt, loc), checkCounts(&lc.Check), verdict)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if lc := f.LastCheck; lc != nil {
		return writeBrokenRuns(w, &lc.Check)
	}
	return nil
}

// writeAppCheck writes a check of an app against its functions' live runs: a line per
// function, then each run that would break and why.
func writeAppCheck(w io.Writer, c *protocol.AppCheck) error {
	verdict := "ok: no live run would break"
	if !c.Ok {
		verdict = "NOT OK: live runs would break"
	}
	if c.Reason != nil {
		verdict = "NOT CHECKED: " + *c.Reason
	}
	fmt.Fprintf(w, "check: %s\n", verdict)
	tw := newTable(w)
	fmt.Fprintln(tw, "FUNCTION\tLIVE\tCHECKED\tCLEAN\tBROKEN")
	for _, f := range c.Functions {
		live := strconv.Itoa(f.Live)
		if f.More != nil && *f.More {
			live += "+"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", f.Function, live, f.Checked, f.Clean, len(f.Broken))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i := range c.Functions {
		if err := writeBrokenRuns(w, &c.Functions[i]); err != nil {
			return err
		}
	}
	return nil
}

// checkCounts says in a few words what a function's check found.
func checkCounts(f *protocol.FunctionCheck) string {
	return fmt.Sprintf("%d live, %d checked, %d clean, %d broken", f.Live, f.Checked, f.Clean, len(f.Broken))
}

// writeBrokenRuns writes a line for each live run of f's check that would break.
func writeBrokenRuns(w io.Writer, f *protocol.FunctionCheck) error {
	for _, b := range f.Broken {
		why := "?"
		switch {
		case b.Divergence != nil:
			d := b.Divergence
			why = fmt.Sprintf("at seq %d the journal holds %s %q, the new code asks for %s %q", d.Seq, d.Journal.Kind, d.Journal.Name, d.Asked.Kind, d.Asked.Name)
		case b.Error != nil:
			why = b.Error.Type + ": " + b.Error.Message
		}
		if _, err := fmt.Fprintf(w, "  %s run %s (revision %d): %s\n", f.Function, b.RunID, b.Revision, why); err != nil {
			return err
		}
	}
	return nil
}

// writeRunsTable writes runs as a table: ID FUNCTION STATUS INVOCATIONS CREATED
// DURATION, where INVOCATIONS is the run's invocations with its failed ones and its
// recoveries when it has any (see invocationCounts), and DURATION is from creation to
// the end, "-" while running.
func writeRunsTable(w io.Writer, runs []protocol.Run, loc *time.Location) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "ID\tFUNCTION\tSTATUS\tINVOCATIONS\tCREATED\tDURATION")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n",
			r.ID, r.Function, r.Status, invocationCounts(r.Invocations, r.FailedInvocations, r.Recoveries),
			formatTime(&r.CreatedAt, loc), between(&r.CreatedAt, r.FinishedAt))
	}
	return tw.Flush()
}

// invocationCounts prints a run's invocations, then its failed invocations and its
// recoveries when it has any: "3", "3 (1 failed)", "4 (1 failed, 2 recoveries)".
func invocationCounts(invocations, failed, recoveries int) string {
	var more []string
	if failed > 0 {
		more = append(more, fmt.Sprintf("%d failed", failed))
	}
	if recoveries > 0 {
		more = append(more, plural(recoveries, "recovery", "recoveries"))
	}
	if len(more) == 0 {
		return strconv.Itoa(invocations)
	}
	return fmt.Sprintf("%d (%s)", invocations, strings.Join(more, ", "))
}

// formatIdentity prints who started a run.
func formatIdentity(id protocol.Identity) string {
	roles := "-"
	if len(id.Roles) > 0 {
		roles = strings.Join(id.Roles, ",")
	}
	s := fmt.Sprintf("subject %s, tenant %s, roles %s", orDash(id.Subject), orDash(id.Tenant), roles)
	if len(id.Claims) > 0 {
		claims, err := json.Marshal(id.Claims)
		if err == nil {
			s += ", claims " + truncate(string(claims), cellJSONWidth)
		}
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeRunDetail writes a run's header, its journal as a numbered list and
// its failed attempts. JSON values are cut to keep lines readable.
func writeRunDetail(w io.Writer, r *protocol.RunDetail, loc *time.Location) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "run\t%s\n", r.ID)
	fmt.Fprintf(tw, "function\t%s@%d\n", r.Function, r.Revision)
	fmt.Fprintf(tw, "status\t%s\n", r.Status)
	fmt.Fprintf(tw, "invocations\t%d\n", r.Invocations)
	fmt.Fprintf(tw, "failed invocations\t%d\n", r.FailedInvocations)
	fmt.Fprintf(tw, "recoveries\t%d\n", r.Recoveries)
	fmt.Fprintf(tw, "identity\t%s\n", formatIdentity(r.Identity))
	if r.IdempotencyKey != nil && *r.IdempotencyKey != "" {
		fmt.Fprintf(tw, "idempotency key\t%s\n", *r.IdempotencyKey)
	}
	if r.ParentID != nil && *r.ParentID != "" {
		fmt.Fprintf(tw, "parent\t%s\n", *r.ParentID)
	}
	if r.Input != nil {
		fmt.Fprintf(tw, "input\t%s\n", compactJSON(*r.Input, headerJSONWidth))
	}
	if r.Output != nil {
		fmt.Fprintf(tw, "output\t%s\n", compactJSON(*r.Output, headerJSONWidth))
	}
	if r.Error != nil {
		fmt.Fprintf(tw, "error\t%s\n", formatError(r.Error))
	}
	fmt.Fprintf(tw, "created\t%s\n", formatTimeMillis(&r.CreatedAt, loc))
	if r.StartedAt != nil {
		fmt.Fprintf(tw, "started\t%s (queued %s)\n", formatTimeMillis(r.StartedAt, loc), between(&r.CreatedAt, r.StartedAt))
	}
	if r.FinishedAt != nil {
		fmt.Fprintf(tw, "finished\t%s (took %s)\n", formatTimeMillis(r.FinishedAt, loc), between(&r.CreatedAt, r.FinishedAt))
	}
	if r.WakeAt != nil {
		fmt.Fprintf(tw, "wakes at\t%s\n", formatTimeMillis(r.WakeAt, loc))
	}
	if r.Deadline != nil {
		fmt.Fprintf(tw, "deadline\t%s\n", formatTimeMillis(r.Deadline, loc))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintln(w)
	if err := writeJournal(w, r.Journal, loc); err != nil {
		return err
	}
	if len(r.Failures) > 0 {
		fmt.Fprintln(w)
		return writeFailures(w, r.Failures, loc)
	}
	return nil
}

// writeJournal writes journal entries as a numbered list:
//
//	1  step   reserve   {"ok":true}   attempt 1   2ms
//	2  sleep  cool-off  until 2026-01-02 15:04:05.000 UTC
func writeJournal(w io.Writer, entries []protocol.JournalEntry, loc *time.Location) error {
	if len(entries) == 0 {
		_, err := fmt.Fprintln(w, "journal: no entries yet")
		return err
	}
	fmt.Fprintf(w, "journal (%s):\n", plural(len(entries), "entry", "entries"))
	tw := newTable(w)
	for _, e := range entries {
		var outcome string
		switch {
		case e.Error != nil:
			outcome = "error " + truncate(formatError(e.Error), cellJSONWidth)
		case e.Kind == "sleep" && e.Until != nil:
			outcome = "until " + formatTimeMillis(e.Until, loc)
		default:
			outcome = compactJSON(jsonPtr(e.Output), cellJSONWidth)
		}
		attempt := "-"
		if e.Attempt != nil {
			attempt = "attempt " + strconv.Itoa(*e.Attempt)
		}
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\n", e.Seq, e.Kind, e.Name, outcome, attempt, between(e.StartedAt, e.FinishedAt))
	}
	return tw.Flush()
}

// writeFailures writes a run's failed attempts; seq 0 is a whole invocation.
func writeFailures(w io.Writer, fs []protocol.AttemptFailure, loc *time.Location) error {
	fmt.Fprintf(w, "failed attempts (%d):\n", len(fs))
	tw := newTable(w)
	for _, f := range fs {
		what := "invocation"
		if f.Seq != 0 {
			name := ""
			if f.Name != nil {
				name = *f.Name
			}
			what = strings.TrimSpace(fmt.Sprintf("step %d %s", f.Seq, name))
		}
		fmt.Fprintf(tw, "  %s\tattempt %d\t%s\t%s\n", what, f.Attempt, truncate(formatError(&f.Error), 2*cellJSONWidth), formatTimeMillis(&f.CreatedAt, loc))
	}
	return tw.Flush()
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// yesNo says b for people.
func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
