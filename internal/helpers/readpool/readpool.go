// Package readpool sends reads that may be a little stale to streaming standbys of the
// primary (hot standbys), as long as they are no further behind than a bound, and to
// the primary otherwise. The gateway's dashboard and API list, stats and journal reads
// go through it (STEPGATE_DATABASE_READ_URL); everything that must see the latest state
// stays on the primary.
//
// How far behind a replica is: every check interval (a quarter of the bound, from 50ms
// to 250ms) the primary's WAL flush position P is read, then the replica's replay
// position R; a replica whose R has reached the P of a check has replayed everything
// the primary had committed when that check began, so it is caught up as of that
// instant. The bound: a read goes to a replica only while the replica was caught up as
// of an instant no more than MaxLag before the read begins, so the read sees every
// write committed on the primary MaxLag or more before it. An idle primary writes no WAL, so an idle replica stays caught up;
// a replica whose replay stopped, or that cannot be reached, falls out of the bound
// within MaxLag (at once when a check fails) and the reads go to the primary. A
// server that is not in recovery (a promoted standby) serves no reads.
package readpool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// MaxLagLimit is the largest bound Config.MaxLag may be.
const MaxLagLimit = time.Minute

// Config configures Reads.
type Config struct {
	// Primary is a pool on the primary where its WAL position is read (the system
	// pool). Fallback is the pool the reads use when no replica is within the bound
	// (the API pool). Required.
	Primary, Fallback *pgxpool.Pool
	// Replicas are pools on the standbys, one per host (see SplitHosts), configured as
	// Fallback is (journal.ConfigurePool). Reads closes them.
	Replicas []*pgxpool.Pool
	// MaxLag bounds how far behind the primary a replica that serves reads may be; see
	// the package doc. From 0 (exclusive) to MaxLagLimit.
	MaxLag time.Duration
	Logger *slog.Logger // Required.
}

// Reads picks the pool of each read: a replica within the bound, else the primary.
// Start it to check the replicas; until then (and after Close) every read goes to the
// primary.
type Reads struct {
	primary, fallback *pgxpool.Pool
	replicas          []*replica
	maxLag, interval  time.Duration
	log               *slog.Logger
	next              atomic.Uint32 // round robin among the fresh replicas
	served            atomic.Uint64 // reads Pick sent to a replica
	stop              context.CancelFunc
	done              chan struct{}
	// samples are the primary's WAL positions the checks read, oldest first, no older
	// than maxLag: a replica that replays a little behind a busy primary has reached an
	// earlier check's position though not the last one's. Only the checker uses it.
	samples        []sample
	primaryFailing bool // the last check could not read the primary's position
}

// sample is the primary's WAL flush position read by a check that began at began.
type sample struct {
	began time.Time
	lsn   uint64
}

// replica is one standby and how fresh it is.
type replica struct {
	pool *pgxpool.Pool
	name string // host:port, for the logs
	// caughtUp is the unix-nanosecond instant the replica was last known to have
	// replayed everything committed on the primary before it; 0: not known.
	caughtUp atomic.Int64
	fresh    bool // as last logged, by the checker only
}

// New returns a Reads over cfg's pools. It does not connect.
func New(cfg Config) (*Reads, error) {
	if cfg.Primary == nil || cfg.Fallback == nil || cfg.Logger == nil {
		return nil, errors.New("readpool: Primary, Fallback and Logger are required")
	}
	if cfg.MaxLag <= 0 || cfg.MaxLag > MaxLagLimit {
		return nil, fmt.Errorf("readpool: MaxLag %s is not more than 0s and at most %s", cfg.MaxLag, MaxLagLimit)
	}
	r := &Reads{primary: cfg.Primary, fallback: cfg.Fallback, maxLag: cfg.MaxLag, log: cfg.Logger,
		interval: min(max(cfg.MaxLag/4, 50*time.Millisecond), 250*time.Millisecond)}
	for _, p := range cfg.Replicas {
		c := p.Config().ConnConfig
		r.replicas = append(r.replicas, &replica{pool: p, name: net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port)))})
	}
	return r, nil
}

// Start checks the replicas every interval until Close.
func (r *Reads) Start(ctx context.Context) {
	ctx, r.stop = context.WithCancel(context.WithoutCancel(ctx))
	r.done = make(chan struct{})
	go func() {
		defer close(r.done)
		t := time.NewTicker(r.interval)
		defer t.Stop()
		for {
			r.check(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Close stops the checks and closes the replicas' pools.
func (r *Reads) Close() {
	if r.stop != nil {
		r.stop()
		<-r.done
	}
	for _, rp := range r.replicas {
		rp.caughtUp.Store(0)
		rp.pool.Close()
	}
}

// Pick returns the pool for a read that begins now: a replica within the bound (in
// turn, when there are several), with its index, else the fallback pool and -1.
func (r *Reads) Pick() (*pgxpool.Pool, int) {
	now := time.Now().UnixNano()
	n := len(r.replicas)
	start := int(r.next.Add(1))
	for i := range n {
		j := (start + i) % n
		if c := r.replicas[j].caughtUp.Load(); c != 0 && now-c <= int64(r.maxLag) {
			r.served.Add(1)
			return r.replicas[j].pool, j
		}
	}
	return r.fallback, -1
}

// Served returns how many reads Pick has sent to a replica.
func (r *Reads) Served() uint64 { return r.served.Load() }

// Within returns how many replicas are within the bound now: those Pick may choose.
func (r *Reads) Within() int {
	now, n := time.Now().UnixNano(), 0
	for _, rp := range r.replicas {
		if c := rp.caughtUp.Load(); c != 0 && now-c <= int64(r.maxLag) {
			n++
		}
	}
	return n
}

// Failed says that a read on replica i (as Pick returned) failed for a reason of the
// replica's (unreachable, a query cancelled by replay): no read goes to it until a
// check finds it caught up again.
func (r *Reads) Failed(i int, err error) {
	if i < 0 || i >= len(r.replicas) {
		return
	}
	rp := r.replicas[i]
	if rp.caughtUp.Swap(0) != 0 {
		r.log.Warn("a read on a replica failed; reads go to the primary until it is checked again",
			slog.String("replica", rp.name), slog.Any("error", err))
	}
}

// check reads the primary's WAL position, then each replica's, and records which are
// caught up as of the check's start.
func (r *Reads) check(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(r.maxLag, time.Second))
	defer cancel()
	began := time.Now()
	var primary string
	err := r.primary.QueryRow(ctx, "SELECT pg_current_wal_flush_lsn()::text").Scan(&primary)
	var p uint64
	if err == nil {
		p, err = parseLSN(primary)
	}
	if err != nil {
		if !r.primaryFailing && ctx.Err() == nil {
			r.log.Warn("reading the primary's WAL position failed; the replicas' freshness is not renewed until it succeeds", slog.Any("error", err))
		}
		r.primaryFailing = true
		r.report(began)
		return
	}
	r.primaryFailing = false
	r.samples = append(r.samples, sample{began, p})
	for len(r.samples) > 1 && began.Sub(r.samples[0].began) > r.maxLag {
		r.samples = r.samples[1:]
	}
	var wg sync.WaitGroup
	for _, rp := range r.replicas {
		wg.Go(func() {
			var replay *string
			err := rp.pool.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn()::text").Scan(&replay)
			var lsn uint64
			switch {
			case err != nil:
			case replay == nil:
				err = errors.New("not a standby: pg_last_wal_replay_lsn() is null")
			default:
				lsn, err = parseLSN(*replay)
			}
			switch {
			case err != nil:
				if rp.caughtUp.Swap(0) != 0 || rp.fresh {
					r.log.Warn("checking a replica failed; reads go to the primary", slog.String("replica", rp.name), slog.Any("error", err))
				}
			default:
				r.caughtUp(rp, lsn)
			}
		})
	}
	wg.Wait()
	r.report(time.Now())
}

// caughtUp records that rp has replayed up to lsn: it is caught up as of the start of
// the latest check whose primary position it has reached.
func (r *Reads) caughtUp(rp *replica, lsn uint64) {
	for i := len(r.samples) - 1; i >= 0; i-- {
		if s := r.samples[i]; lsn >= s.lsn {
			if c := s.began.UnixNano(); c > rp.caughtUp.Load() {
				rp.caughtUp.Store(c)
			}
			return
		}
	}
}

// report logs the replicas that came within the bound or fell out of it.
func (r *Reads) report(now time.Time) {
	for _, rp := range r.replicas {
		c := rp.caughtUp.Load()
		fresh := c != 0 && now.UnixNano()-c <= int64(r.maxLag)
		if fresh == rp.fresh {
			continue
		}
		rp.fresh = fresh
		if fresh {
			r.log.Info("a replica is within the read bound; it serves reads", slog.String("replica", rp.name), slog.Duration("max_lag", r.maxLag))
		} else {
			r.log.Warn("a replica is behind the read bound; reads go to the primary", slog.String("replica", rp.name), slog.Duration("max_lag", r.maxLag))
		}
	}
}

// parseLSN parses a pg_lsn's text, "16/B374D848".
func parseLSN(s string) (uint64, error) {
	for i := range len(s) {
		if s[i] != '/' {
			continue
		}
		hi, err1 := strconv.ParseUint(s[:i], 16, 32)
		lo, err2 := strconv.ParseUint(s[i+1:], 16, 32)
		if err1 != nil || err2 != nil {
			break
		}
		return hi<<32 | lo, nil
	}
	return 0, fmt.Errorf("readpool: %q is not an LSN", s)
}

// SplitHosts returns one config per host of cfg (a URL may name several, as
// "host=a,b" or "postgres://a,b/db"), each connecting to that host only, so that each
// replica's freshness is judged on its own. A host's TLS fallbacks (sslmode=prefer)
// stay with it.
func SplitHosts(cfg *pgxpool.Config) []*pgxpool.Config {
	type hostPort struct {
		host string
		port uint16
	}
	all := append([]*pgconn.FallbackConfig{{Host: cfg.ConnConfig.Host, Port: cfg.ConnConfig.Port, TLSConfig: cfg.ConnConfig.TLSConfig}},
		cfg.ConnConfig.Fallbacks...)
	var order []hostPort
	groups := map[hostPort][]*pgconn.FallbackConfig{}
	for _, f := range all {
		k := hostPort{f.Host, f.Port}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], f)
	}
	out := make([]*pgxpool.Config, 0, len(order))
	for _, k := range order {
		g := groups[k]
		c := cfg.Copy()
		c.ConnConfig.Host, c.ConnConfig.Port, c.ConnConfig.TLSConfig = g[0].Host, g[0].Port, g[0].TLSConfig
		c.ConnConfig.Fallbacks = g[1:]
		out = append(out, c)
	}
	return out
}
