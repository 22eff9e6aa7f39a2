package invoker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	// Time zones work on a machine without a zoneinfo database (a slim image).
	_ "time/tzdata"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/robfig/cron/v3"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/schedule"
)

// Schedules start runs on cron ticks. Each schedule has its next tick (next_at,
// database clock) and a River job scheduled at it, unique per (schedule, generation,
// tick), inserted in the transaction that put the schedule or handled its previous
// tick. Handling a tick, in one transaction: claims the schedule row for that tick (a
// deleted schedule, one put again since, or a tick handled already does nothing),
// starts the runs of the ticks due by the database clock (below), each with the
// idempotency key "schedule:<name>:<tick, RFC3339 UTC>" and the identity of whoever put
// the schedule, enqueues their invocations, moves next_at to the first tick after the
// database clock, and inserts the River job of that tick. So a tick starts one run
// however often it is handled and however many gateways run.
//
// Catch-up: a tick handled at most the schedule's catchup window W after its time
// (default 1m, 1s to 24h) is on time and starts its run, whatever the policy, so a
// gateway restart or a change of River's leader loses no tick: the runs start late,
// each keyed by its own tick. Ticks handled more than W late were missed, and the
// schedule's catchup policy says what they start: skip, no run; one (the default), one
// run together, for the earliest of them; all, a run each, oldest first, at most 100:
// when more were missed, the latest 100 start runs and the older ones none (logged).
// One handling starts at most 1000 runs; past that, again the latest ticks start theirs
// and the older ones none (logged). Finding the ticks walks at most a few thousand of
// them at a time, however long the schedule was down: the on-time ones are found from
// the start of the window, not from the first missed tick.
//
// Who handles a tick: the gateway that put the schedule or handled its last tick arms
// a timer in its process for the next tick, as for sleeps, so the tick starts its runs
// within milliseconds of its time. When that gateway is gone, every gateway's
// maintenance passes call [Schedules.TickOverdue] (maintenance.OverdueTicks) about once
// a second, which takes the
// ticks more than a second overdue and arms the timer of the next tick in its own
// process. The River job is the last backstop (River moves scheduled jobs only on its
// leader, which may take tens of seconds to elect), and otherwise finds its tick
// handled. A tick that fails (a function deleted, invoke_roles that now exclude the
// schedule's identity) starts no run, is logged, and the schedule goes on.

// Cron is a parsed schedule expression in its time zone.
type Cron struct {
	schedule cron.Schedule
	loc      *time.Location
}

// cronParser reads the five standard fields and the descriptors.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseCron parses a schedule's expression: five fields (minute, hour, day of month,
// month, day of week: "*/5 * * * *", "0 9 * * MON-FRI") or a descriptor (@yearly,
// @annually, @monthly, @weekly, @daily, @midnight, @hourly, or @every with a duration
// of whole seconds, at least 1s: "@every 1m"), in the IANA time zone timezone ("" is
// UTC). Its errors say what is wrong, for the caller to show.
func ParseCron(expr, timezone string) (*Cron, error) {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return nil, errors.New(`cron is empty: want five fields ("*/5 * * * *") or a descriptor ("@hourly", "@every 1m")`)
	}
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return nil, fmt.Errorf("cron %q: set the time zone with timezone, not in the expression", expr)
	}
	if timezone == "" {
		timezone = "UTC"
	}
	loc, err := time.LoadLocation(timezone)
	if err != nil || timezone == "Local" {
		return nil, fmt.Errorf("timezone %q is not an IANA time zone such as UTC or Europe/Paris", timezone)
	}
	if d, ok := strings.CutPrefix(expr, "@every "); ok {
		every, err := time.ParseDuration(strings.TrimSpace(d))
		if err == nil && (every < time.Second || every%time.Second != 0) {
			return nil, fmt.Errorf("cron %q: @every takes a whole number of seconds, at least 1s", expr)
		}
	}
	s, err := cronParser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("cron %q: %v", expr, err)
	}
	c := &Cron{schedule: s, loc: loc}
	if c.Next(time.Now()).IsZero() {
		return nil, fmt.Errorf("cron %q never fires", expr)
	}
	return c, nil
}

// Next returns the first tick after t, in UTC, or the zero time if there is none in
// the next five years (ParseCron refuses such an expression).
func (c *Cron) Next(t time.Time) time.Time {
	next := c.schedule.Next(t.In(c.loc))
	if next.IsZero() {
		return next
	}
	return next.UTC()
}

// TickArgs is the River job of one tick of a schedule, scheduled at the tick.
type TickArgs struct {
	ScheduleID string    `json:"schedule_id"`
	Generation int       `json:"generation"`
	At         time.Time `json:"at"`
}

// Kind implements river.JobArgs.
func (TickArgs) Kind() string { return "stepgate.schedule_tick" }

func tickOf(s *schedule.Schedule) TickArgs {
	return TickArgs{ScheduleID: s.ID, Generation: s.Generation, At: s.NextAt.UTC()}
}

// tickKey is the idempotency key of the run a schedule's tick starts.
func tickKey(schedule string, at time.Time) string {
	return "schedule:" + schedule + ":" + at.UTC().Format(time.RFC3339)
}

// claimFunc claims a schedule for one of its ticks: schedule.ClaimTick or
// schedule.TryClaimTick.
type claimFunc func(ctx context.Context, db journal.DB, id string, generation int, at time.Time) (*schedule.Schedule, time.Time, error)

// tick handles one tick of a schedule in one transaction, and arms the timer of the
// next one. It reports whether it handled the tick: a stale tick, or one that claim
// did not get, does nothing. It returns how long until the tick is due when it is not
// due yet (the database clock is behind its caller's).
func (inv *Invoker) tick(ctx context.Context, args TickArgs, claim claimFunc) (bool, time.Duration, error) {
	var (
		wait        time.Duration
		next        *schedule.Schedule
		clock, read time.Time
		deadlines   []newDeadline
	)
	err := pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
		s, c, err := claim(ctx, tx, args.ScheduleID, args.Generation, args.At)
		if err != nil {
			return err
		}
		clock, read = c, inv.clock.Now()
		if s.NextAt.After(clock) {
			wait = s.NextAt.Sub(clock)
			return nil
		}
		spec, err := ParseCron(s.Cron, s.Timezone)
		if err != nil {
			return river.JobCancel(fmt.Errorf("schedule %s: %w", s.Name, err)) // stored valid; never retried
		}
		due := spec.due(args.At, clock, s.Catchup, s.CatchupWindow)
		inv.logCatchup(ctx, s, args.At, due)
		last, runID := args.At, (*string)(nil)
		for _, at := range due.ticks {
			var started []newDeadline
			if runID, started, err = inv.startTick(ctx, tx, s, at); err != nil {
				return err
			}
			deadlines = append(deadlines, started...)
			last = at
		}
		s.NextAt = spec.Next(clock)
		if s.NextAt.IsZero() {
			return river.JobCancel(fmt.Errorf("schedule %s: %q has no tick after %s", s.Name, s.Cron, clock))
		}
		if err := schedule.AdvanceSchedule(ctx, tx, s.ID, last, runID, s.NextAt); err != nil {
			return err
		}
		next = s
		return inv.schedules.EnqueueTick(ctx, tx, s)
	})
	if errors.Is(err, journal.ErrNotFound) {
		return false, 0, nil // deleted, put again, handled already, or being handled
	}
	if err != nil {
		return false, 0, err
	}
	if next == nil {
		return false, wait, nil
	}
	inv.armDeadlines(deadlines)
	inv.armTick(tickOf(next), next.NextAt.Sub(clock)-inv.clock.Now().Sub(read), 0)
	return true, 0, nil
}

// logCatchup logs what a handling does with ticks its catch-up policy does not start
// runs for.
func (inv *Invoker) logCatchup(ctx context.Context, s *schedule.Schedule, at time.Time, d dueTicks) {
	if !d.missed && !d.dropped {
		return
	}
	log := inv.log.With(slog.String("schedule", s.Name), slog.String("tenant", s.Tenant),
		slog.String("catchup", string(s.Catchup)), slog.Duration("catchup_window", s.CatchupWindow),
		slog.Time("first_tick", at), slog.Int("runs", len(d.ticks)))
	if d.dropped {
		var firstKept time.Time
		if len(d.ticks) > 0 {
			firstKept = d.ticks[0]
		}
		log.WarnContext(ctx, "schedule ticks dropped past the catch-up bounds: the older start no run",
			slog.Time("first_kept", firstKept))
		return
	}
	log.InfoContext(ctx, "schedule ticks missed")
}

// Bounds of one handling of a schedule's ticks.
const (
	maxCatchupRuns = 100             // Catchup all: the latest missed ticks start runs.
	maxTickRuns    = 1000            // Runs one handling starts, on-time ones included.
	maxTickWalk    = 4 * maxTickRuns // Ticks one walk with Cron.Next goes through.
)

// dueTicks are the ticks one handling of a schedule starts runs for.
type dueTicks struct {
	ticks   []time.Time // Oldest first.
	missed  bool        // Some ticks were handled more than the catchup window late.
	dropped bool        // Some ticks the policy starts runs for start none: past the bounds.
}

// due returns the ticks that start runs when the ticks from at (the schedule's next
// tick, not after clock) to clock are handled at clock under policy and window.
func (c *Cron) due(at, clock time.Time, policy schedule.Catchup, window time.Duration) dueTicks {
	edge := clock.Add(-window) // A tick before edge was missed.
	if !at.Before(edge) {
		ticks, dropped := c.latest(at, clock, maxTickRuns)
		return dueTicks{ticks: ticks, dropped: dropped}
	}
	d := dueTicks{missed: true}
	switch policy {
	case schedule.CatchupOne:
		d.ticks = []time.Time{at}
	case schedule.CatchupAll:
		d.ticks, d.dropped = c.latest(at, edge.Add(-time.Nanosecond), maxCatchupRuns)
	}
	onTime, dropped := c.latest(c.from(edge), clock, maxTickRuns-len(d.ticks))
	d.ticks = append(d.ticks, onTime...)
	d.dropped = d.dropped || dropped
	return d
}

// from returns the first tick at or after t, or the zero time if there is none.
func (c *Cron) from(t time.Time) time.Time {
	return c.Next(t.Add(-time.Nanosecond))
}

// latest returns the latest n ticks from first (a tick, or the zero time for none) to
// last, oldest first, and whether it left earlier ones out. It walks at most
// maxTickWalk ticks at a time however many lie between: when there are more, it starts
// later, halving the span, until a walk sees between n and maxTickWalk ticks.
func (c *Cron) latest(first, last time.Time, n int) ([]time.Time, bool) {
	if n <= 0 || first.IsZero() {
		return nil, !first.IsZero() && !first.After(last)
	}
	var ticks []time.Time
	// A walk from lo goes through more than maxTickWalk ticks, one from hi fewer than n.
	lo, hi, start, from := first, last, first, first
	for try := range 64 { // Each try halves hi-lo: 64 reach its nanosecond.
		var seen int
		var complete bool
		ticks, seen, complete = c.walk(from, last, n)
		switch {
		case !complete:
			lo = start
		case seen < n && try > 0:
			hi = start
		default:
			return ticks, try > 0 || seen > n
		}
		start = lo.Add(hi.Sub(lo) / 2)
		from = c.from(start)
	}
	return ticks, true
}

// walk goes through the ticks from first (a tick) to last, at most maxTickWalk of
// them. It returns the latest n it went through, oldest first, how many it went
// through, and whether it reached last.
func (c *Cron) walk(first, last time.Time, n int) ([]time.Time, int, bool) {
	ring := make([]time.Time, 0, n)
	seen := 0
	for t := first; !t.IsZero() && !t.After(last); t = c.Next(t) {
		if seen == maxTickWalk {
			return nil, seen, false
		}
		if len(ring) < n {
			ring = append(ring, t)
		} else {
			ring[seen%n] = t
		}
		seen++
	}
	if seen > n {
		k := seen % n
		ring = slices.Concat(ring[k:], ring[:k])
	}
	return ring, seen, true
}

// startTick starts, in tx, the run of s's tick at, as s's identity, and enqueues its
// invocation. It returns the run's id, or nil when the tick starts no run: the
// function is gone, or its invoke_roles exclude the identity (logged; the schedule
// goes on); and the deadline of the run it created, for armDeadlines once tx commits.
func (inv *Invoker) startTick(ctx context.Context, tx pgx.Tx, s *schedule.Schedule, at time.Time) (*string, []newDeadline, error) {
	run, created, err := inv.createRun(ctx, tx, journal.NewRun{
		ID:             uuid.Must(uuid.NewV7()).String(),
		Tenant:         s.Tenant,
		Function:       s.Function,
		Input:          s.Input,
		Identity:       s.Identity,
		IdempotencyKey: tickKey(s.Name, at),
	})
	log := inv.log.With(slog.String("schedule", s.Name), slog.String("tenant", s.Tenant), slog.Time("tick", at))
	var rl *RateLimitedError
	switch {
	case errors.As(err, &rl):
		// The rate limit's state is written only when a start passes: nothing to undo.
		log.WarnContext(ctx, "schedule tick skipped: "+rl.Reason, slog.String("function", s.Function))
		return nil, nil, nil
	case errors.Is(err, journal.ErrNotFound), errors.Is(err, journal.ErrForbidden), errors.Is(err, journal.ErrIdempotencyMismatch),
		errors.Is(err, journal.ErrQuota):
		log.WarnContext(ctx, "schedule tick started no run", slog.String("function", s.Function), slog.Any("error", err))
		return nil, nil, nil
	case err != nil:
		return nil, nil, err
	}
	if !created {
		return &run.ID, nil, nil
	}
	if err := inv.enqueueNew(ctx, tx, run); err != nil {
		return nil, nil, err
	}
	log.InfoContext(ctx, "scheduled run started", slog.String("run_id", run.ID), slog.String("function", s.Function), slog.String("tenant", run.Tenant))
	return &run.ID, deadlineOf(run), nil
}

type tickWorker struct {
	river.WorkerDefaults[TickArgs]
	inv *Invoker
}

func (w *tickWorker) Work(ctx context.Context, job *river.Job[TickArgs]) error {
	_, wait, err := w.inv.tick(ctx, job.Args, schedule.ClaimTick)
	if err != nil {
		return err
	}
	if wait > 0 {
		return river.JobSnooze(wait)
	}
	return nil
}

// armTick handles args in this process after d, unless the process stops first (then
// the tick's River job, or another gateway's maintenance pass, does).
func (inv *Invoker) armTick(args TickArgs, d time.Duration, tries int) {
	inv.timers.arm(tickTimer(args.ScheduleID), d, func() {
		_, wait, err := inv.tick(inv.bg, args, schedule.ClaimTick)
		switch {
		case err != nil && inv.bg.Err() == nil:
			inv.log.Warn("schedule tick failed; its River job will retry",
				slog.String("schedule_id", args.ScheduleID), slog.Time("tick", args.At), slog.Any("error", err))
		case wait > 0 && tries < 3:
			// The database clock may run a hair behind this timer; look again then.
			inv.armTick(args, wait, tries+1)
		}
	})
}
