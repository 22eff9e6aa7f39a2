package maintenance

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/journal"
)

// Renewer renews, every renewal interval, the leases of this process's invocations in
// flight, in one statement (journal.RenewLeases), to the lease TTL from the database
// clock; the invocations whose lease it could not renew (another gateway recovered the
// run) are abandoned, as their answer would be refused. A renewal that fails (the
// database is out of reach) is logged and retried at the next interval.
type Renewer struct {
	pool   *pgxpool.Pool
	ttl    time.Duration
	every  time.Duration
	leases func() []journal.Lease
	lost   func([]journal.Lease)
	health *Health
	log    *slog.Logger
	clock  clock.Clock
}

// NewRenewer returns the Renewer that renews, to ttl, every every, the leases that
// leases returns, and hands lost the leases it could not renew.
func NewRenewer(pool *pgxpool.Pool, ttl, every time.Duration, leases func() []journal.Lease, lost func([]journal.Lease),
	health *Health, log *slog.Logger, clk clock.Clock) *Renewer {
	return &Renewer{pool: pool, ttl: ttl, every: every, leases: leases, lost: lost, health: health, log: log, clock: clk}
}

// Run renews at each tick, every interval from its start, until ctx ends, as a loop
// on a time.Ticker does: a tick that comes while a renewal is under way is held (one)
// and taken as soon as that renewal ends; any other tick that comes meanwhile is dropped.
func (r *Renewer) Run(ctx context.Context) {
	start := r.clock.Now()
	// tickAfter returns the first tick after t.
	tickAfter := func(t time.Time) time.Time {
		return start.Add((t.Sub(start)/r.every + 1) * r.every)
	}
	next := tickAfter(start)
	for {
		if !clock.Sleep(r.clock, ctx.Done(), next.Sub(r.clock.Now())) {
			return
		}
		taken := r.clock.Now()
		r.renew(ctx)
		now := r.clock.Now()
		next = tickAfter(taken)
		if !next.After(now) {
			next = now // held: taken at once
		}
	}
}

// renew renews the leases once, bounded by the interval, and abandons the invocations
// whose lease is lost.
func (r *Renewer) renew(ctx context.Context) {
	leases := r.leases()
	if len(leases) == 0 {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, r.every)
	kept, err := journal.RenewLeases(rctx, r.pool, leases, r.ttl)
	cancel()
	r.health.Observe(err)
	if err != nil {
		if ctx.Err() == nil {
			r.log.Warn("could not renew the leases of this gateway's invocations; retrying", slog.Int("leases", len(leases)), slog.Any("error", err))
		}
		return
	}
	if len(kept) == len(leases) {
		return
	}
	keep := make(map[journal.Lease]bool, len(kept))
	for _, l := range kept {
		keep[l] = true
	}
	var lost []journal.Lease
	for _, l := range leases {
		if !keep[l] {
			lost = append(lost, l)
		}
	}
	r.lost(lost)
}
