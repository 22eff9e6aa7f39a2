package invoker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"
	// Time zones work on a machine without a zoneinfo database (a slim image).
	_ "time/tzdata"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/robfig/cron/v3"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/journal"
)

// Schedules start runs on cron ticks. Each schedule has its next tick (next_at,
// database clock) and a River job scheduled at it, unique per (schedule, generation,
// tick), inserted in the transaction that put the schedule or handled its previous
// tick. A tick, in one transaction: claims the schedule row for that tick (a deleted
// schedule, one put again since, or a tick handled already does nothing), starts the
// run with the idempotency key "schedule:<name>:<tick, RFC3339 UTC>" and the identity
// of whoever put the schedule, enqueues its invocation, moves next_at to the first tick
// after the database clock, and inserts the River job of that tick. So a tick starts
// one run however often its job runs and however many gateways run.
//
// Missed ticks are skipped: a tick handled late (every gateway was down) starts one run,
// for the tick it was due at, and the next one is the first after the time it was
// handled, not the ticks missed meanwhile.
//
// River moves scheduled jobs to available every 5s (on its leader), so the job alone
// would start a run up to ~5s late. The gateway that put the schedule or handled its
// last tick therefore also arms a timer in its process for the next tick, as for
// sleeps; the River job is the backstop when that gateway is gone, and otherwise finds
// its tick handled. A tick that fails (a function deleted, invoke_roles that now
// exclude the schedule's identity) starts no run, is logged, and the schedule goes on.

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

func tickOf(s *journal.Schedule) TickArgs {
	return TickArgs{ScheduleID: s.ID, Generation: s.Generation, At: s.NextAt.UTC()}
}

// EnqueueTick inserts, in tx, the River job of s's next tick (s.NextAt). The job is
// unique per schedule, generation and tick: inserting it again does nothing.
func (inv *Invoker) EnqueueTick(ctx context.Context, tx pgx.Tx, s *journal.Schedule) error {
	args := tickOf(s)
	_, err := inv.river.InsertTx(ctx, tx, args, &river.InsertOpts{
		ScheduledAt: args.At,
		UniqueOpts:  river.UniqueOpts{ByArgs: true},
	})
	if err != nil {
		return fmt.Errorf("enqueue tick of schedule %s: %w", s.Name, err)
	}
	return nil
}

// ArmTick arms this process's timer for s's next tick, due in d, once EnqueueTick's
// transaction has committed. It replaces the timer of an earlier tick of s.
func (inv *Invoker) ArmTick(s *journal.Schedule, d time.Duration) {
	inv.ticks.arm(inv, tickOf(s), d, 0)
}

// tickKey is the idempotency key of the run a schedule's tick starts.
func tickKey(schedule string, at time.Time) string {
	return "schedule:" + schedule + ":" + at.UTC().Format(time.RFC3339)
}

// tick handles one tick of a schedule in one transaction, and arms the timer of the
// next one. A stale tick does nothing. It returns how long until the tick is due when
// it is not due yet (the database clock is behind its caller's).
func (inv *Invoker) tick(ctx context.Context, args TickArgs) (time.Duration, error) {
	var (
		wait        time.Duration
		next        *journal.Schedule
		clock, read time.Time
	)
	err := pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
		s, c, err := journal.ClaimTick(ctx, tx, args.ScheduleID, args.Generation, args.At)
		if err != nil {
			return err
		}
		clock, read = c, time.Now()
		if s.NextAt.After(clock) {
			wait = s.NextAt.Sub(clock)
			return nil
		}
		spec, err := ParseCron(s.Cron, s.Timezone)
		if err != nil {
			return river.JobCancel(fmt.Errorf("schedule %s: %w", s.Name, err)) // stored valid; never retried
		}
		runID, err := inv.startTick(ctx, tx, s, args.At)
		if err != nil {
			return err
		}
		s.NextAt = spec.Next(clock)
		if s.NextAt.IsZero() {
			return river.JobCancel(fmt.Errorf("schedule %s: %q has no tick after %s", s.Name, s.Cron, clock))
		}
		if err := journal.AdvanceSchedule(ctx, tx, s.ID, args.At, runID, s.NextAt); err != nil {
			return err
		}
		next = s
		return inv.EnqueueTick(ctx, tx, s)
	})
	if errors.Is(err, journal.ErrNotFound) {
		return 0, nil // deleted, put again, or handled already
	}
	if err != nil {
		return 0, err
	}
	if next != nil {
		inv.ticks.arm(inv, tickOf(next), next.NextAt.Sub(clock)-time.Since(read), 0)
	}
	return wait, nil
}

// startTick starts, in tx, the run of s's tick at, as s's identity, and enqueues its
// invocation. It returns the run's id, or nil when the tick starts no run: the
// function is gone, or its invoke_roles exclude the identity (logged; the schedule
// goes on).
func (inv *Invoker) startTick(ctx context.Context, tx pgx.Tx, s *journal.Schedule, at time.Time) (*string, error) {
	id := auth.Identity(s.Identity)
	run, created, err := journal.CreateRun(ctx, tx, journal.NewRun{
		ID:               uuid.Must(uuid.NewV7()).String(),
		Tenant:           s.Tenant,
		Function:         s.Function,
		Input:            s.Input,
		Identity:         s.Identity,
		IdempotencyKey:   tickKey(s.Name, at),
		CheckInvokeRoles: !id.IsAdmin(),
		InvokerRoles:     id.Roles,
	})
	log := inv.log.With(slog.String("schedule", s.Name), slog.String("tenant", s.Tenant), slog.Time("tick", at))
	switch {
	case errors.Is(err, journal.ErrNotFound), errors.Is(err, journal.ErrForbidden), errors.Is(err, journal.ErrIdempotencyMismatch):
		log.WarnContext(ctx, "schedule tick started no run", slog.String("function", s.Function), slog.Any("error", err))
		return nil, nil
	case err != nil:
		return nil, err
	}
	if created {
		if err := inv.Enqueue(ctx, tx, run.ID); err != nil {
			return nil, err
		}
		log.InfoContext(ctx, "scheduled run started", slog.String("run_id", run.ID), slog.String("function", s.Function))
	}
	return &run.ID, nil
}

type tickWorker struct {
	river.WorkerDefaults[TickArgs]
	inv *Invoker
}

func (w *tickWorker) Work(ctx context.Context, job *river.Job[TickArgs]) error {
	wait, err := w.inv.tick(ctx, job.Args)
	if err != nil {
		return err
	}
	if wait > 0 {
		return river.JobSnooze(wait)
	}
	return nil
}

// tickTimers are this process's timers of schedules' next ticks, by schedule id.
type tickTimers struct {
	mu      sync.Mutex
	timers  map[string]*time.Timer
	stopped bool
}

// arm handles args in this process after d, unless the process stops first (then
// the tick's River job does).
func (t *tickTimers) arm(inv *Invoker, args TickArgs, d time.Duration, tries int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped {
		return
	}
	if t.timers == nil {
		t.timers = map[string]*time.Timer{}
	}
	if old := t.timers[args.ScheduleID]; old != nil {
		old.Stop()
	}
	var timer *time.Timer
	timer = time.AfterFunc(max(d, 0), func() {
		t.mu.Lock()
		if t.stopped || t.timers[args.ScheduleID] != timer {
			t.mu.Unlock()
			return
		}
		delete(t.timers, args.ScheduleID)
		inv.bgWG.Add(1)
		t.mu.Unlock()
		defer inv.bgWG.Done()
		wait, err := inv.tick(inv.bg, args)
		switch {
		case err != nil && inv.bg.Err() == nil:
			inv.log.Warn("schedule tick failed; its River job will retry",
				slog.String("schedule_id", args.ScheduleID), slog.Time("tick", args.At), slog.Any("error", err))
		case wait > 0 && tries < 3:
			// The database clock may run a hair behind this timer; look again then.
			t.arm(inv, args, wait, tries+1)
		}
	})
	t.timers[args.ScheduleID] = timer
}

// stop stops the timers; the ticks' River jobs handle them.
func (t *tickTimers) stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stopped = true
	for id, timer := range t.timers {
		timer.Stop()
		delete(t.timers, id)
	}
}
