package invoker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/flow"
)

// Flow control: a function's throttle, rate limit and debounce (config.throttle,
// config.rate_limit, config.debounce) apply to the starts of its runs through the API
// (StartRun, StartRunNow), event triggers (SendEvent) and schedules, in the transaction
// that creates the run; their state is in Postgres (flow.Throttle, TakeRate,
// Debounce), so they hold across gateways. Child runs (an invoke await) and reruns are
// not subject to them.
//
// The hot path costs nothing more: journal.CreateRun's one statement creates the run of
// a revision without flow control, and refuses (with a *journal.FlowError, in its
// fallback query) that of a revision with it; only then does createRun apply the flow
// control and create the run anew. Order: the idempotency key (an existing run is
// returned, and no rate is taken), then the rate limit (a start past it creates nothing),
// then the debounce (collapse into the open window's run, or open one), then the
// throttle (the run is scheduled at the time the rate allows).

// RateLimitedError is a start refused by a rate limit, or by a throttle whose queue
// is full: it creates no run. RetryAfter is when a start of the same key may pass.
type RateLimitedError struct {
	Function   string
	Reason     string // For people: "rate limited: 10 per 1s (key customer_id=c-9)".
	RetryAfter time.Duration
}

func (e *RateLimitedError) Error() string {
	return fmt.Sprintf("function %s: %s; retry after %s", e.Function, e.Reason, e.RetryAfter)
}

// ErrDelayedDebounce: a delayed start (start_at, delay) of a debounced function.
var ErrDelayedDebounce = errors.New("a debounced function's runs cannot have a delayed start (start_at or delay): the debounce sets when they start")

// createRun creates the run n in tx, applying its function's flow control if it has
// any (see above). created is false when the idempotency key named an existing run, or
// when the start collapsed into a debounced run, which is returned. A new run's River
// jobs are the caller's to insert (enqueueNew); a collapse inserts the invocation job of
// its new start time itself. With n.Claim, a run that flow control holds back is
// created scheduled or queued instead. Errors are CreateRun's, *RateLimitedError and
// ErrDelayedDebounce.
func (inv *Invoker) createRun(ctx context.Context, tx pgx.Tx, n journal.NewRun) (*journal.Run, bool, error) {
	n.MaxTenantRuns, n.MaxTenantJournalBytes = inv.limits.MaxTenantRuns, inv.limits.MaxTenantJournalBytes
	run, created, err := journal.CreateRun(ctx, tx, n)
	var fe *journal.FlowError
	if !errors.As(err, &fe) {
		return run, created, err
	}
	return inv.createFlowed(ctx, tx, n, fe)
}

// createFlowed is createRun past the *journal.FlowError of a revision with flow control.
func (inv *Invoker) createFlowed(ctx context.Context, tx pgx.Tx, n journal.NewRun, fe *journal.FlowError) (*journal.Run, bool, error) {
	fc, err := ParseFlow(fe.Config)
	if err != nil {
		return nil, false, fmt.Errorf("function %s: stored %w", n.Function, err)
	}
	n.Flowed = true
	if fc == nil {
		return journal.CreateRun(ctx, tx, n)
	}
	if n.IdempotencyKey != "" {
		run, err := journal.RunByIdempotencyKey(ctx, tx, n.Tenant, n.Function, n.IdempotencyKey, n.Input)
		if !errors.Is(err, journal.ErrNotFound) {
			return run, false, err
		}
	}
	if r := fc.RateLimit; r != nil {
		key := r.Key.Value(n.Input, n.Identity)
		after, ok, err := flow.TakeRate(ctx, tx, n.Tenant, n.Function, key, flow.Rate{Interval: r.interval(), Burst: r.Burst})
		if err != nil {
			return nil, false, err
		}
		if !ok {
			return nil, false, &RateLimitedError{Function: n.Function, RetryAfter: after,
				Reason: "rate limited: " + r.describe() + r.Key.describe(key)}
		}
	}
	if d := fc.Debounce; d != nil {
		if n.StartAt != nil {
			return nil, false, ErrDelayedDebounce
		}
		collapsed, at, err := journal.Debounce(ctx, tx, journal.DebounceStart{
			Tenant: n.Tenant, Function: n.Function, Key: d.Key.Value(n.Input, n.Identity), RunID: n.ID,
			Input: n.Input, Identity: n.Identity, Period: d.Period, MaxWait: d.MaxWait,
		})
		if err != nil {
			return nil, false, err
		}
		if collapsed != nil {
			// Its earlier job finds it not due (ClaimRun) and ends; this one starts it.
			if _, err := inv.river.InsertTx(ctx, tx, invokeJob(collapsed), &river.InsertOpts{ScheduledAt: *collapsed.WakeAt}); err != nil {
				return nil, false, fmt.Errorf("enqueue debounced run %s: %w", collapsed.ID, err)
			}
			return collapsed, false, nil
		}
		held := "debounced until " + at.UTC().Format("2006-01-02T15:04:05.000Z")
		n.StartAt, n.Held, n.Claim = &at, &held, false
	}
	if r := fc.Throttle; r != nil {
		key := r.Key.Value(n.Input, n.Identity)
		ahead, bound := r.ahead()
		start, now, after, ok, err := flow.Throttle(ctx, tx, n.Tenant, n.Function, key,
			flow.Rate{Interval: r.interval(), Burst: r.Burst}, ahead)
		if err != nil {
			return nil, false, err
		}
		if !ok {
			return nil, false, &RateLimitedError{Function: n.Function, RetryAfter: after,
				Reason: fmt.Sprintf("throttle queue full: %s at %s%s", bound, r.describe(), r.Key.describe(key))}
		}
		if start.After(now) {
			held := "throttled: " + r.describe() + r.Key.describe(key)
			if n.StartAt == nil || n.StartAt.Before(start) {
				n.StartAt = &start
			}
			n.Held, n.Claim = &held, false
		}
	}
	return journal.CreateRun(ctx, tx, n)
}

// startFlowedTriggers starts, in tx, the runs of the functions with flow control that
// the event ev (just stored) triggers, through their flow control, with their River
// jobs, and records them in the event: the runs started (or the debounced runs the
// starts collapsed into) in its runs, the starts a rate limit (or a full throttle
// queue) dropped in its skipped. It returns the runs' ids, and the deadlines of those
// it created, for armDeadlines once tx commits.
func (inv *Invoker) startFlowedTriggers(ctx context.Context, tx pgx.Tx, ev *journal.Event) ([]string, []newDeadline, error) {
	var runs []string
	var deadlines []newDeadline
	var skipped []journal.SkippedStart
	for _, fn := range ev.Flowed {
		run, created, err := inv.createRun(ctx, tx, journal.NewRun{
			ID: uuid.Must(uuid.NewV7()).String(), Tenant: ev.Tenant, Function: fn,
			Input: ev.Data, Identity: ev.Identity,
		})
		var rl *RateLimitedError
		switch {
		case errors.As(err, &rl):
			skipped = append(skipped, journal.SkippedStart{Function: fn, Reason: rl.Reason})
			continue
		case errors.Is(err, journal.ErrNotFound), errors.Is(err, journal.ErrForbidden):
			continue // deleted or changed since the event's statement matched it
		case err != nil:
			return nil, nil, err
		}
		if created {
			if err := inv.enqueueNew(ctx, tx, run); err != nil {
				return nil, nil, err
			}
			deadlines = append(deadlines, deadlineOf(run)...)
		}
		if run.Held != nil {
			ev.Held = append(ev.Held, run)
		}
		runs = append(runs, run.ID)
	}
	if err := flow.CompleteEvent(ctx, tx, ev.Tenant, ev.ID, runs, skipped); err != nil {
		return nil, nil, err
	}
	ev.Skipped = skipped
	return runs, deadlines, nil
}

// armHeld arms this process's timer for a run that flow control scheduled (or a
// debounce pushed back), once that has committed, when it is due within the lead of the
// maintenance passes, which would not arm it otherwise (a push may move a run already
// armed; the timer of its old time finds it not due). Without it, River's scheduler
// starts the run, up to seconds late.
func (inv *Invoker) armHeld(run *journal.Run) {
	if run == nil || run.Status != journal.StatusScheduled || run.Held == nil || run.WakeAt == nil {
		return
	}
	// The database clock is the judge; a hair late costs less than a wasted early try.
	if d := time.Until(*run.WakeAt) + time.Millisecond; d <= inv.wakeLead() {
		inv.armTimer(run.ID, nil, d, 0, 0)
	}
}
