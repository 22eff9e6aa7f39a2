package chaos_test

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// scenario is one scenario's fleet, app and line in the report.
type scenario struct {
	t     *testing.T
	ctx   context.Context
	f     *fleet
	a     *app
	res   *result
	began time.Time
}

// newScenario starts a fleet with cfg and the app, and adds the scenario's line to the
// report when it ends.
func newScenario(t *testing.T, cfg fleetConfig) *scenario {
	t.Helper()
	s := &scenario{t: t, ctx: t.Context(), res: &result{scenario: strings.TrimPrefix(t.Name(), "TestChaos/")}, began: time.Now()}
	t.Cleanup(func() { // registered first, so it runs last
		s.res.wall = time.Since(s.began)
		s.res.passed = !t.Failed()
		record(s.res)
	})
	s.f = newFleet(t, cfg)
	s.a = newApp(t, s.f)
	return s
}

// note adds a line to the scenario's report and its log.
func (s *scenario) note(format string, args ...any) {
	s.t.Helper()
	msg := fmt.Sprintf(format, args...)
	s.res.notes = append(s.res.notes, msg)
	s.t.Log(msg)
}

// stuckAfter is how long a scenario waits for its runs to end before it calls those that
// have not stuck: generous, so that a loaded machine does not fail the short suite, and
// far below the hour that a lost River job waits for River's rescuer.
var stuckAfter = size(60*time.Second, 120*time.Second)

// runRow is a run as the database holds it.
type runRow struct {
	ID, Function, Status   string
	ErrType, ErrMessage    string
	Attempts, Invocation   int
	FailedInvocations      int
	Key                    string
	CreatedAt              time.Time
	FinishedAt, LeaseUntil *time.Time
	WakeAt                 *time.Time
	JobState, JobAttempted string // its newest River invoke job, for stuck runs
}

func (r *runRow) terminal() bool {
	return r.Status == "completed" || r.Status == "failed" || r.Status == "cancelled"
}

func (r *runRow) String() string {
	s := fmt.Sprintf("%s %s %s attempts=%d invocation=%d failed_invocations=%d", r.ID, r.Function, r.Status, r.Attempts, r.Invocation, r.FailedInvocations)
	if r.LeaseUntil != nil {
		s += fmt.Sprintf(" lease_until=+%s", time.Until(*r.LeaseUntil).Round(time.Second))
	}
	if r.WakeAt != nil {
		s += fmt.Sprintf(" wake_at=+%s", time.Until(*r.WakeAt).Round(time.Second))
	}
	if r.ErrType != "" || r.ErrMessage != "" {
		s += fmt.Sprintf(" error=%s: %q", r.ErrType, r.ErrMessage)
	}
	if r.JobState != "" {
		s += fmt.Sprintf(" river_job=%s attempted_by=%s", r.JobState, r.JobAttempted)
	}
	return s
}

const runColumns = `id::text, function, status, coalesce(error->>'type', ''), coalesce(error->>'message', ''),
	attempts, invocation, failed_invocations, coalesce(idempotency_key, ''), created_at, finished_at, lease_until, wake_at`

func scanRuns(rows pgx.Rows) (map[string]*runRow, error) {
	runs := map[string]*runRow{}
	var r runRow
	_, err := pgx.ForEachRow(rows, []any{&r.ID, &r.Function, &r.Status, &r.ErrType, &r.ErrMessage, &r.Attempts, &r.Invocation,
		&r.FailedInvocations, &r.Key, &r.CreatedAt, &r.FinishedAt, &r.LeaseUntil, &r.WakeAt}, func() error {
		c := r
		runs[r.ID] = &c
		return nil
	})
	return runs, err
}

// runs reads the runs ids from the database.
func (f *fleet) runs(ctx context.Context, ids []string) (map[string]*runRow, error) {
	rows, _ := f.db.Query(ctx, `SELECT `+runColumns+` FROM stepgate.run WHERE id = ANY($1::uuid[])`, ids)
	return scanRuns(rows)
}

// runsOf reads every run of function.
func (f *fleet) runsOf(ctx context.Context, function string) (map[string]*runRow, error) {
	rows, _ := f.db.Query(ctx, `SELECT `+runColumns+` FROM stepgate.run WHERE function = $1`, function)
	return scanRuns(rows)
}

// pending counts the runs of ids that are not terminal.
func (f *fleet) pending(ctx context.Context, ids []string) (int, error) {
	var n int
	err := f.db.QueryRow(ctx, `SELECT count(*) FROM stepgate.run WHERE id = ANY($1::uuid[])
		AND status NOT IN ('completed', 'failed', 'cancelled')`, ids).Scan(&n)
	return n, err
}

// addJobs fills in the River invoke job of each run of runs.
func (f *fleet) addJobs(ctx context.Context, runs []*runRow) {
	for _, r := range runs {
		_ = f.db.QueryRow(ctx, `SELECT state::text, coalesce(array_to_string(attempted_by, ','), '') FROM river_job
			WHERE kind = 'stepgate.invoke' AND args->>'run_id' = $1 ORDER BY id DESC LIMIT 1`, r.ID).Scan(&r.JobState, &r.JobAttempted)
	}
}

// expectation returns what is wrong with how run r ended, or "".
type expectation func(r *runRow) string

// completed expects every run to complete.
func completed(r *runRow) string {
	if r.Status != "completed" {
		return "ended " + r.Status + ", not completed"
	}
	return ""
}

// completedWithoutFailure expects a run to complete with no failed invocation: when a
// gateway dies or stops, the invocations it loses are the gateway's failures, not the
// function's, and must not count against its retry policy.
func completedWithoutFailure(r *runRow) string {
	if msg := completed(r); msg != "" {
		return msg
	}
	if r.FailedInvocations > 0 {
		return fmt.Sprintf("completed, but with %d failed invocations counted against the function", r.FailedInvocations)
	}
	return ""
}

// settle waits up to deadline for every run of ids to be terminal, then checks the
// scenario's runs and journal:
//
//   - every run ended as expect says, and none is stuck (non-terminal at the deadline);
//   - the journal holds each (run, seq) once, with seqs 1..n and no gap;
//   - a journaled step never ran again: no execution in an invocation later than the
//     one that journaled it;
//   - every checkpoint the gateway acknowledged is in the journal.
//
// It returns the runs as they ended.
func (s *scenario) settle(ids []string, deadline time.Duration, expect expectation) map[string]*runRow {
	t, ctx, f := s.t, s.ctx, s.f
	t.Helper()
	ids = slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == "" })
	s.res.started += len(ids)
	_ = waitFor(ctx, deadline, "every run terminal", func() (bool, error) {
		n, err := f.pending(ctx, ids)
		return err == nil && n == 0, err
	})
	runs, err := f.runs(ctx, ids)
	if err != nil {
		t.Fatalf("read runs: %v", err)
	}
	if len(runs) != len(ids) {
		t.Errorf("%d of the %d runs started are not in the database", len(ids)-len(runs), len(ids))
	}

	var stuck []*runRow
	wrong := map[string][]string{} // what is wrong -> run ids
	for _, r := range runs {
		switch {
		case !r.terminal():
			stuck = append(stuck, r)
		case r.Status == "completed":
			s.res.completed++
		default:
			s.res.failed++
		}
		if r.terminal() {
			if msg := expect(r); msg != "" {
				wrong[msg] = append(wrong[msg], r.ID)
			}
		}
	}
	s.res.stuck += len(stuck)
	if len(stuck) > 0 {
		slices.SortFunc(stuck, func(a, b *runRow) int { return a.CreatedAt.Compare(b.CreatedAt) })
		f.addJobs(ctx, stuck[:min(len(stuck), 20)])
		var b strings.Builder
		for _, r := range stuck[:min(len(stuck), 20)] {
			b.WriteString("\n  " + r.String())
		}
		t.Errorf("%d of %d runs are stuck, not terminal %s after the scenario's last fault (first %d):%s",
			len(stuck), len(runs), deadline, min(len(stuck), 20), b.String())
	}
	for _, msg := range slices.Sorted(maps.Keys(wrong)) {
		bad := wrong[msg]
		var b strings.Builder
		for _, id := range bad[:min(len(bad), 5)] {
			b.WriteString("\n  " + runs[id].String())
		}
		t.Errorf("%d runs: %s; e.g.:%s", len(bad), msg, b.String())
	}
	s.checkJournal(runs)
	s.note("invocations by gateway: %s", fmtCounts(countBy(s.a.rec.invocations(), func(i *invocation) string { return i.gateway })))
	return runs
}

// entry is a journal entry as the database holds it.
type entry struct {
	seq        int
	kind, name string
	invocation int
}

// checkJournal checks the journal of runs against the recorder: see settle.
func (s *scenario) checkJournal(runs map[string]*runRow) {
	t, ctx := s.t, s.ctx
	ids := slices.Collect(maps.Keys(runs))
	journals := map[string][]entry{}
	rows, _ := s.f.db.Query(ctx, `SELECT run_id::text, seq, kind, name, invocation FROM stepgate.journal_entry
		WHERE run_id = ANY($1::uuid[]) ORDER BY run_id, seq`, ids)
	var runID string
	var e entry
	if _, err := pgx.ForEachRow(rows, []any{&runID, &e.seq, &e.kind, &e.name, &e.invocation}, func() error {
		journals[runID] = append(journals[runID], e)
		return nil
	}); err != nil {
		t.Fatalf("read journal: %v", err)
	}
	if err := s.f.db.QueryRow(ctx, `SELECT count(*) FROM stepgate.attempt_failure WHERE run_id = ANY($1::uuid[]) AND seq = 0`, ids).
		Scan(&s.res.failedInvocations); err != nil {
		t.Fatalf("read failed attempts: %v", err)
	}

	// Exactly once per (run, seq) (the primary key's promise, checked all the same), and
	// seqs 1..n with no gap.
	var gaps []string
	for id, js := range journals {
		for i, e := range js {
			switch {
			case i > 0 && e.seq == js[i-1].seq:
				s.res.duplicates++
			case i > 0 && e.seq != js[i-1].seq+1:
				gaps = append(gaps, fmt.Sprintf("run %s: seq %d follows %d", id, e.seq, js[i-1].seq))
			}
		}
		if len(js) > 0 && js[0].seq != 1 {
			gaps = append(gaps, fmt.Sprintf("run %s: the journal starts at seq %d", id, js[0].seq))
		}
	}
	s.res.gaps += len(gaps)
	if s.res.duplicates > 0 {
		t.Errorf("the journal holds %d (run, seq) more than once", s.res.duplicates)
	}
	if len(gaps) > 0 {
		t.Errorf("%d gaps in the journals, e.g. %s", len(gaps), gaps[0])
	}

	// A journaled step never runs again.
	journaledBy := func(runID, name string) (int, bool) {
		for _, e := range journals[runID] {
			if e.kind == "step" && e.name == name {
				return e.invocation, true
			}
		}
		return 0, false
	}
	var reruns []string
	for _, x := range s.a.rec.executions() {
		if _, ours := runs[x.runID]; !ours {
			continue
		}
		by, ok := journaledBy(x.runID, x.step)
		switch {
		case !ok:
		case x.invocation > by:
			reruns = append(reruns, fmt.Sprintf("run %s step %q journaled by invocation %d ran again in invocation %d (on %s)",
				x.runID, x.step, by, x.invocation, x.gateway))
		case x.invocation < by:
			s.res.repeats++
		}
	}
	s.res.reruns += len(reruns)
	if len(reruns) > 0 {
		t.Errorf("%d executions of journaled steps, e.g.:\n  %s", len(reruns), strings.Join(reruns[:min(len(reruns), 5)], "\n  "))
	}

	// Acknowledged checkpoints are all in the journal.
	var lost []string
	for _, a := range s.a.rec.acked() {
		if _, ours := runs[a.runID]; !ours {
			continue
		}
		if !slices.ContainsFunc(journals[a.runID], func(e entry) bool { return e.seq == a.seq && e.name == a.name }) {
			lost = append(lost, fmt.Sprintf("run %s seq %d %q (acknowledged by %s)", a.runID, a.seq, a.name, a.gateway))
		}
	}
	s.res.missingAcks += len(lost)
	if len(lost) > 0 {
		t.Errorf("%d acknowledged checkpoints are not in the journal, e.g.:\n  %s", len(lost), strings.Join(lost[:min(len(lost), 5)], "\n  "))
	}
}

// checkNoFailedAttempts checks that the runs have no failed attempt recorded, of a whole
// invocation or of a step.
func (s *scenario) checkNoFailedAttempts(ids []string) {
	rows, err := s.f.db.Query(s.ctx, `SELECT run_id::text, seq, attempt, coalesce(error->>'type', ''), coalesce(error->>'message', '')
		FROM stepgate.attempt_failure WHERE run_id = ANY($1::uuid[]) ORDER BY created_at`, ids)
	if err != nil {
		s.t.Fatal(err)
	}
	defer rows.Close()
	var n int
	var first string
	for rows.Next() {
		var runID, typ, msg string
		var seq, attempt int
		if err := rows.Scan(&runID, &seq, &attempt, &typ, &msg); err != nil {
			s.t.Fatal(err)
		}
		if n == 0 {
			first = fmt.Sprintf("run %s seq %d attempt %d: %s: %s", runID, seq, attempt, typ, msg)
		}
		n++
	}
	if n > 0 {
		s.t.Errorf("%d failed attempts recorded (stepgate.attempt_failure), e.g. %s", n, first)
	}
}

// interruption is a moment when gateways died (kill -9) or were told to stop (SIGTERM).
type interruption struct {
	gateways []string
	at       time.Time
	// stop: the gateways were told to stop (SIGTERM), so they should finish what they
	// have in flight (see checkDrained) rather than leave it to be recovered.
	stop bool
}

// inFlight returns the invocations of the interrupted gateways in flight at k.at: sent
// before it, and not answered by then, or answered within the second before it (the
// gateway may have died applying the answer).
func (s *scenario) inFlight(k interruption, window time.Duration) []*invocation {
	var out []*invocation
	for _, inv := range s.a.rec.invocations() {
		if !slices.Contains(k.gateways, inv.gateway) || !inv.start.Before(k.at) {
			continue
		}
		if end, _ := inv.ended(); end.IsZero() || end.After(k.at.Add(-window)) {
			out = append(out, inv)
		}
	}
	return out
}

// nextInvocation returns the first invocation of runID that started after at, or nil.
func (s *scenario) nextInvocation(runID string, at time.Time) *invocation {
	var next *invocation
	for _, inv := range s.a.rec.invocations() {
		if inv.runID == runID && inv.start.After(at) && (next == nil || inv.start.Before(next.start)) {
			next = inv
		}
	}
	return next
}

// recoveries measures how long after k each run it interrupted was invoked again (on any
// gateway): the runs that had an invocation in flight on a gateway of k, and that needed
// another (those whose answer was applied before k did not, nor, after a SIGTERM, those
// that the stopping gateway finished). It records them in the
// report and returns them with the runs that were never invoked again and are not
// terminal.
func (s *scenario) recoveries(k interruption, runs map[string]*runRow) (ds []time.Duration, unrecovered []string) {
	seen := map[string]bool{}
	for _, inv := range s.inFlight(k, time.Second) {
		if seen[inv.runID] {
			continue
		}
		seen[inv.runID] = true
		if next := s.nextInvocation(inv.runID, k.at); next != nil {
			ds = append(ds, next.start.Sub(k.at))
			continue
		}
		switch r := runs[inv.runID]; {
		case r == nil:
		case !r.terminal():
			unrecovered = append(unrecovered, inv.runID)
		case r.FinishedAt != nil && r.FinishedAt.After(k.at) && !k.stop:
			// The gateways died, yet it ended without another request to the function:
			// a gateway failed it (out of attempts or recoveries). It moved then.
			ds = append(ds, r.FinishedAt.Sub(k.at))
		}
	}
	s.res.inFlight += len(ds) + len(unrecovered)
	s.res.recoveries = append(s.res.recoveries, ds...)
	return ds, unrecovered
}

// reportRecoveries logs the recovery figures of the interruptions, and in the long suite
// fails when their p99 passes bound (the pass criterion); in the short suite a
// loaded CI machine could pass it without a fault of the gateway, so it only prints it.
func (s *scenario) reportRecoveries(ks []interruption, runs map[string]*runRow, bound time.Duration) {
	t := s.t
	var all []time.Duration
	for i, k := range ks {
		ds, unrecovered := s.recoveries(k, runs)
		p50, p99, mx := percentiles(ds)
		s.note("interruption %d (%s at +%s): %d runs in flight recovered, p50 %s, p99 %s, max %s; %d never invoked again",
			i+1, strings.Join(k.gateways, "+"), k.at.Sub(s.began).Round(100*time.Millisecond), len(ds), fmtDur(p50), fmtDur(p99), fmtDur(mx), len(unrecovered))
		if len(unrecovered) > 0 {
			t.Errorf("interruption %d: %d runs in flight on %v were never invoked again, e.g. %s", i+1, len(unrecovered), k.gateways, unrecovered[0])
		}
		all = append(all, ds...)
	}
	p50, p99, mx := percentiles(all)
	s.note("recovery over %d interruptions: %d runs, p50 %s, p99 %s, max %s (bound: p99 <= %s)", len(ks), len(all), fmtDur(p50), fmtDur(p99), fmtDur(mx), bound)
	if long && p99 > bound {
		t.Errorf("recovery p99 %s is past the bound of %s (p50 %s, max %s, %d runs)", p99, bound, p50, mx, len(all))
	}
}

// --- small helpers ---------------------------------------------------------------------

// countBy counts xs by key.
func countBy[T any](xs []T, key func(T) string) map[string]int {
	m := map[string]int{}
	for _, x := range xs {
		m[key(x)]++
	}
	return m
}

// fmtCounts formats counts as "a=1 b=2", by key.
func fmtCounts(m map[string]int) string {
	var parts []string
	for _, k := range slices.SortedFunc(maps.Keys(m), func(a, b string) int { return cmp.Compare(a, b) }) {
		parts = append(parts, fmt.Sprintf("%s=%d", k, m[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}
