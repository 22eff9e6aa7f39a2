package invoker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/schedule"
)

// Schedules puts and deletes the tenants' schedules and handles their ticks (see
// schedule.go): the invoker's schedule side, reached by [Invoker.Schedules].
type Schedules struct{ inv *Invoker }

// Schedules returns the invoker's schedule side.
func (inv *Invoker) Schedules() *Schedules { return inv.schedules }

// Put creates or replaces a schedule of db's tenant, with the River job of its
// first tick, in one transaction, and arms this process's timer for that tick. The
// schedule's runs carry n.Identity, so the function's invoke_roles must admit it: a
// *journal.ForbiddenError otherwise, and journal.ErrNotFound when the function is not
// registered.
func (s *Schedules) Put(ctx context.Context, db *journal.TenantDB, n schedule.NewSchedule) (*schedule.Schedule, error) {
	var sch *schedule.Schedule
	var wait time.Duration
	var read time.Time
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		fn, err := journal.GetFunction(ctx, tx, db.Tenant(), n.Function)
		if err != nil {
			return err
		}
		if roles := fn.InvokeRoles(); !n.Identity.MayInvoke(roles) {
			return &journal.ForbiddenError{Function: fn.Name, InvokeRoles: roles}
		}
		var clock time.Time
		if sch, clock, err = schedule.PutSchedule(ctx, tx, n); err != nil {
			return err
		}
		wait, read = sch.NextAt.Sub(clock), s.inv.clock.Now()
		return s.EnqueueTick(ctx, tx, sch)
	})
	if err != nil {
		return nil, err
	}
	s.ArmTick(sch, wait-s.inv.clock.Now().Sub(read))
	return sch, nil
}

// Delete deletes a schedule of db's tenant; its ticks already scheduled find
// nothing and do nothing. It returns journal.ErrNotFound when there is none.
func (s *Schedules) Delete(ctx context.Context, db *journal.TenantDB, name string) error {
	return schedule.DeleteSchedule(ctx, db, db.Tenant(), name)
}

// EnqueueTick inserts, in tx, the River job of sch's next tick (sch.NextAt). The job is
// unique per schedule, generation and tick: inserting it again does nothing.
func (s *Schedules) EnqueueTick(ctx context.Context, tx pgx.Tx, sch *schedule.Schedule) error {
	args := tickOf(sch)
	_, err := s.inv.river.InsertTx(ctx, tx, args, &river.InsertOpts{
		ScheduledAt: args.At,
		UniqueOpts:  river.UniqueOpts{ByArgs: true},
	})
	if err != nil {
		return fmt.Errorf("enqueue tick of schedule %s: %w", sch.Name, err)
	}
	return nil
}

// ArmTick arms this process's timer for sch's next tick, due in d, once EnqueueTick's
// transaction has committed. It replaces the timer of an earlier tick of sch.
func (s *Schedules) ArmTick(sch *schedule.Schedule, d time.Duration) {
	s.inv.armTick(tickOf(sch), d, 0)
}

// TickOverdue handles the next tick of each schedule, any tenant's, that is more than
// late past the database clock, the most overdue first, at most limit of them: ticks
// whose gateway's timer is gone and whose River job waits for River's leader. Each is
// handled in its own transaction as its timer would handle it (catch-up policy
// included), and this gateway arms the timer of the schedule's next tick. A tick that
// another transaction holds is left to it, so gateways may call TickOverdue at once
// and each tick is still handled once. It returns how many ticks it handled, and the
// errors of the ticks it could not handle, joined, having tried the others.
func (s *Schedules) TickOverdue(ctx context.Context, late time.Duration, limit int) (int, error) {
	ticks, err := schedule.OverdueTicks(ctx, s.inv.pool, late, limit)
	if err != nil {
		return 0, err
	}
	var (
		handled int
		errs    []error
	)
	for _, t := range ticks {
		if ctx.Err() != nil {
			return handled, ctx.Err()
		}
		ok, _, err := s.inv.tick(ctx, TickArgs{ScheduleID: t.ScheduleID, Generation: t.Generation, At: t.At.UTC()}, schedule.TryClaimTick)
		if err != nil {
			errs = append(errs, fmt.Errorf("overdue tick %s of schedule %s: %w", t.At.UTC().Format(time.RFC3339), t.ScheduleID, err))
		}
		if ok {
			handled++
		}
	}
	return handled, errors.Join(errs...)
}
