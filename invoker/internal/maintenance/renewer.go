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

// Run renews every interval, at fixed times from its start (as a time.Ticker does: an
// interval a slow renewal overran is skipped), until ctx ends.
func (r *Renewer) Run(ctx context.Context) {
	next := r.clock.Now().Add(r.every)
	for {
		if !clock.Sleep(r.clock, ctx.Done(), next.Sub(r.clock.Now())) {
			return
		}
		r.renew(ctx)
		now := r.clock.Now()
		for next = next.Add(r.every); !next.After(now); next = next.Add(r.every) {
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
