// Package gatewayproc wires a whole gateway process, and only this package does: it
// migrates the database, opens the system and API pools, makes the invocation tokens,
// the tenants' signing keys and the token verifier, starts the invoker, makes the
// gateway on it and serves HTTP. Stop takes them down in the reverse order, draining
// first. `stepgate serve`, `stepgate dev` and the tests' internal/wiring/stack all start
// their gateways with [Start], so they run the same wiring; each reads its settings
// its own way (the environment, flags, test options) into a [Config].
package gatewayproc

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/trace"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/gateway"
	"github.com/stepgate/stepgate/internal/helpers/egress"
	"github.com/stepgate/stepgate/internal/helpers/memlimit"
	"github.com/stepgate/stepgate/internal/helpers/metrics"
	"github.com/stepgate/stepgate/internal/helpers/readpool"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/stats"
	"github.com/stepgate/stepgate/migrations"
)

// Config is what a gateway process needs. Zero values keep the defaults of the
// packages it wires (invoker.Config, gateway.Config) unless a field says otherwise.
type Config struct {
	// Database is where the gateway connects, as its login user: the user that migrates
	// the schema, which must be able to act as journal.AppRole and journal.SystemRole
	// (see journal.ConfigurePool). Its MaxConns bounds the connections of the two pools
	// together. Start does not change it. A config that names several hosts (a
	// primary and its standbys) should validate them as target_session_attrs=read-write
	// does, so that after a failover the pools connect to the new primary only; Start
	// warns when it does not. Required.
	Database *pgxpool.Config
	// APIMaxConns is the API pool's share of Database.MaxConns; the system pool gets the
	// rest. Defaults to half. Each pool has at least 2.
	APIMaxConns int32
	// DatabaseTimeout bounds how long each statement of the gateway's pools (not the
	// migrations') waits for the database's answer; past it the statement fails as the
	// database being out of reach, and an API request's answer is a 503 with
	// Retry-After. The connections also get a connect timeout (unless the URL sets
	// connect_timeout), TCP keepalive and TCP_USER_TIMEOUT: see dbbounds.go. Defaults
	// to DefaultDatabaseTimeout.
	DatabaseTimeout time.Duration
	// ReadDatabase, when set, is where the reads that may be a little stale go (see
	// gateway.Server's read: lists, stats, a run's detail and journal): streaming
	// standbys of Database, one pool per host it names, each as large as the API pool
	// and acting as journal.AppRole as the API pool does. A replica further behind the
	// primary than ReadMaxLag, or unreachable, is skipped for the primary (see package
	// readpool). Start does not change it.
	ReadDatabase *pgxpool.Config
	// ReadMaxLag bounds how far behind a replica that serves reads may be; see
	// readpool.Config.MaxLag. Defaults to 1s; a negative one sends every read to the
	// primary, the replicas unused.
	ReadMaxLag time.Duration
	// Pooler is PoolerTransaction when Database goes through a connection pooler in
	// transaction mode (PgBouncer's pool_mode=transaction), where a client's session is
	// not kept from one transaction to the next: the pools then prepare no named
	// statements (Database's default_query_exec_mode, when it is cache_statement, becomes
	// cache_describe), their connections get their roles per transaction instead of per
	// session (the pooler must make each server connection act as journal.SystemRole:
	// see journal.ActAsAppPerTransaction), and LISTEN goes to ListenDatabase, or, without
	// it, the gateway polls (River with PollOnly; see invoker.Config.PollOnly). Empty:
	// the connections are the database's own, as with a pooler in session mode.
	Pooler string
	// ListenDatabase, with Pooler, is a direct connection to the database (not through
	// the pooler) for what a transaction pooler cannot carry: the LISTEN connections of
	// the notify listener and River's notifier (one each), and the migrations, which
	// hold a session's advisory lock. Nil with Pooler: the gateway polls, and does not
	// migrate (a schema not up to date is an error). Start does not change it.
	ListenDatabase *pgxpool.Config
	// Migrated says the schema is up to date already (as in the tests' template
	// databases), so Start does not migrate it.
	Migrated bool
	Logger   *slog.Logger // Required.
	// Addr is where the gateway listens for HTTP ("127.0.0.1:0": a free port). Defaults
	// to ":8080".
	Addr string
	// PublicURL is the base URL functions reach this gateway at, for checkpoints.
	// Defaults to the listener's [LocalURL].
	PublicURL string
	// InvocationKeys key the invocation tokens, newest first. None: the database's keys,
	// made by the first gateway (auth.LoadInvocationTokens).
	InvocationKeys [][]byte
	// Auth verifies callers' tokens; Start makes an auth.Verifier of it. Its Logger
	// defaults to Logger.
	Auth auth.Config
	// Egress says which addresses the gateway dials: functions, and the manifests of app
	// syncs. Its zero value allows the public internet only.
	Egress egress.Policy
	// Limits bound functions and runs.
	Limits invoker.Limits
	// Crash recovery: see the invoker.Config fields of the same names.
	LeaseTTL         time.Duration
	MaintainInterval time.Duration
	SweepGrace       time.Duration
	MaxRecoveries    int
	// DuplexOff: see invoker.Config.DuplexOff (STEPGATE_DUPLEX=off).
	DuplexOff bool
	// River's workers and the fair share of them: see the invoker.Config fields of the
	// same names.
	Workers, FairReserve int
	// Retention and RetentionInterval: see the invoker.Config fields of the same names.
	Retention, RetentionInterval time.Duration
	// Clock is the invoker's clock (invoker.Config.Clock); nil: the system clock.
	Clock invoker.Clock
	// DrainTimeout is how long Stop lets the invocations in flight finish before it
	// hands the rest over to the other gateways. Defaults to 30s.
	DrainTimeout time.Duration
	// DrainSignals end the drain at once when one of them arrives during it (an
	// operator's second interrupt), handing the invocations over. None: only
	// DrainTimeout and Stop's context end it.
	DrainSignals []os.Signal
	// The gateway: see the gateway.Config fields of the same names. Web serves the
	// dashboard; nil serves none.
	MaxBodyBytes                                    int64
	Web                                             http.Handler
	OperatorRole, OperatorTenant                    string
	MaxWaitInvocations, MaxWaitInvocationsPerTenant int
	MaxStreamsPerTenant, MaxStreamsPerSubject       int
	MaxSyncStartsPerTenant, MaxSyncStartsPerSubject int
	MaxHeavyReadsPerTenant, MaxHeavyReadsPerSubject int
	// MemoryLimit, when set, becomes the process's soft memory limit (memlimit.Set)
	// at Start, logged, and the gateway's (gateway.Config.MemoryLimit). Zero: the
	// runtime's as it is.
	MemoryLimit memlimit.Limit
	// Gateway, when set, changes the gateway's config just before the gateway is made:
	// a test's way to set what Config does not name.
	Gateway func(*gateway.Config)
	// PprofAddr, when set, is where net/http/pprof is served, until Stop. Failing to
	// listen there is logged, not returned.
	PprofAddr string
	// MetricsAddr, when set, is where the metrics are served at /metrics to anyone who
	// reaches it (a network only the scraper reaches), until Stop; the gateway's own
	// /metrics, for operators' tokens, is served either way. Failing to listen there
	// is returned.
	MetricsAddr string
	// Metrics configures the metrics (see package metrics).
	Metrics metrics.Config
	// TracerProvider, when set, traces runs (see invoker.Config.TracerProvider); the
	// caller shuts it down after Stop. Nil: no traces.
	TracerProvider trace.TracerProvider
	// TraceErrorMessages: see invoker.Config.TraceErrorMessages.
	TraceErrorMessages bool
}

// PoolerTransaction is Config.Pooler for a pooler in transaction mode.
const PoolerTransaction = "transaction"

// pollInterval is how often a gateway with Config.Pooler and no ListenDatabase polls
// for what notifications would tell it: River's fetches of new jobs, and the waiters on
// runs' ends and outputs (see notify.NewPollingListener); the live streams are told to
// resync every pollResync.
const (
	pollInterval = 200 * time.Millisecond
	pollResync   = 5 * time.Second
)

// Process is a running gateway: its pools, keys, invoker and HTTP server. Its fields
// are set by Start; read them, do not change them.
type Process struct {
	// URL is the base URL functions reach the gateway at (Config.PublicURL, or its
	// default), without a trailing "/".
	URL string
	// Pool is the system pool: it acts as journal.SystemRole and sees every tenant (the
	// invoker, River, checkpoints). APIPool is the API pool: it acts as journal.AppRole
	// and sees a tenant only through journal.ForTenant.
	Pool, APIPool *pgxpool.Pool
	// Reads picks the pool of the reads that may be a little stale; nil without
	// Config.ReadDatabase.
	Reads *readpool.Reads
	// Keys are the tenants' signing keys, kept in the database. Tokens are the
	// invocation tokens.
	Keys     *auth.SigningKeys
	Tokens   *auth.InvocationTokens
	Verifier *auth.Verifier
	Invoker  *invoker.Invoker // started
	Server   *gateway.Server
	Metrics  *metrics.Metrics
	// Listen is the pool of the direct connections that LISTEN (Config.ListenDatabase);
	// nil without it.
	Listen *pgxpool.Pool
	// MetricsAddr is the address of the metrics' own listener; nil without
	// Config.MetricsAddr.
	MetricsAddr net.Addr

	log          *slog.Logger
	ln           net.Listener
	srv          *http.Server
	served       chan error
	pprof        *http.Server
	metricsSrv   *http.Server
	drainTimeout time.Duration
	drainSignals []os.Signal
	// endRequests ends the requests still open once the invocations are drained.
	endRequests context.CancelFunc
	stopOnce    sync.Once
}

// Start connects, migrates (unless Config.Migrated), opens the two pools, starts the
// invoker and serves the gateway on Config.Addr. It fails when the database user may
// not act as the pools' roles, and warns when row-level security does not apply to
// them. On an error, what it started is stopped. ctx bounds the start; it is also
// River's context (see invoker.Invoker.Start): cancelling it stops River's fetching,
// so stop the process with Stop.
func Start(ctx context.Context, cfg Config) (*Process, error) {
	if cfg.Database == nil || cfg.Logger == nil {
		return nil, errors.New("gatewayproc: Database and Logger are required")
	}
	log := cfg.Logger
	if cfg.MemoryLimit.Bytes > 0 {
		memlimit.Set(cfg.MemoryLimit)
		log.Info("soft memory limit set: heavy reads are refused while the live heap is past 70% of it",
			slog.String("limit", cfg.MemoryLimit.String()))
	}
	pc := cfg.Database.Copy()
	if hosts := databaseHosts(pc); len(hosts) > 1 && pc.ConnConfig.ValidateConnect == nil {
		log.Warn("the database URL names several hosts but not target_session_attrs=read-write: the gateway may connect to a standby, "+
			"and answer 503 until it is promoted; add target_session_attrs=read-write to connect only to the primary",
			slog.String("hosts", strings.Join(hosts, ",")))
	}
	pooled := false
	switch cfg.Pooler {
	case "":
		if cfg.ListenDatabase != nil {
			return nil, errors.New("gatewayproc: ListenDatabase is for a gateway behind a transaction pooler (Pooler)")
		}
	case PoolerTransaction:
		pooled = true
		if pc.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
			pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
		}
	default:
		return nil, fmt.Errorf("gatewayproc: Pooler %q is not %q or empty", cfg.Pooler, PoolerTransaction)
	}
	if !cfg.Migrated && !pooled {
		if err := migrate(ctx, pc); err != nil {
			return nil, err
		}
	}
	if !cfg.Migrated && pooled && cfg.ListenDatabase != nil {
		if err := migrate(ctx, cfg.ListenDatabase); err != nil {
			return nil, fmt.Errorf("migrate through the direct connection (ListenDatabase): %w", err)
		}
	}
	pc = bounded(pc, cfg.DatabaseTimeout, DefaultConnectTimeout) // after the migrations, which it would bound too
	pool, api, err := openPools(ctx, pc, cfg.APIMaxConns, pooled, log)
	if err != nil {
		return nil, err
	}
	p := &Process{
		Pool: pool, APIPool: api, log: log, served: make(chan error, 1),
		drainTimeout: cmp.Or(cfg.DrainTimeout, 30*time.Second), drainSignals: cfg.DrainSignals,
	}
	fail := func(err error) (*Process, error) {
		p.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	if !cfg.Migrated && pooled && cfg.ListenDatabase == nil {
		// Behind a transaction pooler the migrations' session lock would not hold: they
		// need a direct connection, which this gateway was not given.
		pending, err := migrations.Pending(ctx, pool)
		if err != nil {
			return fail(fmt.Errorf("check the migrations: %w", err))
		}
		if len(pending) > 0 {
			return fail(fmt.Errorf("the schema is not up to date (pending: %s), and a gateway behind a transaction pooler migrates only through a direct "+
				"connection: set STEPGATE_DATABASE_LISTEN_URL to one, or run `stepgate migrate` with DATABASE_URL naming the database directly",
				strings.Join(pending, ", ")))
		}
	}
	if pooled {
		if cfg.ListenDatabase != nil {
			lc := bounded(cfg.ListenDatabase, cfg.DatabaseTimeout, DefaultConnectTimeout) // a copy
			lc.MaxConns = 2                                                               // the notify listener's and River's notifier's
			if p.Listen, err = pgxpool.NewWithConfig(ctx, lc); err != nil {
				return fail(fmt.Errorf("connect to the listen database: %w", err))
			}
		} else {
			log.Info("behind a transaction pooler with no direct connection to LISTEN on: polling; runs' ends reach their waiters within "+
				pollInterval.String()+", jobs of other gateways are fetched within "+pollInterval.String()+", live streams resync every "+pollResync.String(),
				slog.Duration("poll_interval", pollInterval))
		}
	}
	addr := cmp.Or(cfg.Addr, ":8080")
	if p.ln, err = net.Listen("tcp", addr); err != nil {
		return fail(fmt.Errorf("listen on %s: %w", addr, err))
	}
	p.URL = strings.TrimRight(cmp.Or(cfg.PublicURL, LocalURL(p.ln.Addr())), "/")
	if len(cfg.InvocationKeys) > 0 {
		p.Tokens, err = auth.NewInvocationTokens(cfg.InvocationKeys...)
	} else {
		p.Tokens, err = auth.LoadInvocationTokens(ctx, pool)
	}
	if err != nil {
		return fail(err)
	}
	p.Keys = auth.NewSigningKeys(pool)
	authCfg := cfg.Auth
	authCfg.Logger = cmp.Or(authCfg.Logger, log)
	if p.Verifier, err = auth.NewVerifier(authCfg); err != nil {
		return fail(err)
	}
	if cfg.ReadDatabase != nil && cfg.ReadMaxLag >= 0 {
		if p.Reads, err = openReads(ctx, bounded(cfg.ReadDatabase, cfg.DatabaseTimeout, 2*time.Second), cmp.Or(cfg.ReadMaxLag, time.Second), pool, api, log); err != nil {
			return fail(err)
		}
		p.Reads.Start(ctx)
	}
	p.Metrics = metrics.New(cfg.Metrics)
	p.Metrics.AddPool("system", pool)
	p.Metrics.AddPool("api", api)
	p.Metrics.AddQueue(func(ctx context.Context) (metrics.Queue, error) {
		q, err := stats.ReadQueueStats(ctx, pool)
		return metrics.Queue{Queued: q.Due, OldestAge: q.OldestAge, Jobs: q.Jobs}, err
	})
	p.Invoker, err = invoker.New(invoker.Config{
		Pool: pool, Logger: log, CheckpointURL: p.URL, Keys: p.Keys, Tokens: p.Tokens, Egress: cfg.Egress,
		Limits: cfg.Limits, LeaseTTL: cfg.LeaseTTL, MaintainInterval: cfg.MaintainInterval, SweepGrace: cfg.SweepGrace,
		MaxRecoveries: cfg.MaxRecoveries, DuplexOff: cfg.DuplexOff, Workers: cfg.Workers, FairReserve: cfg.FairReserve, Metrics: p.Metrics,
		Retention: cfg.Retention, RetentionInterval: cfg.RetentionInterval, TracerProvider: cfg.TracerProvider,
		TraceErrorMessages: cfg.TraceErrorMessages, Clock: cfg.Clock,
		ListenPool: p.Listen, PollOnly: pooled && p.Listen == nil, FetchPollInterval: pollIntervalIf(pooled && p.Listen == nil), PollResync: pollResync,
	})
	if err != nil {
		return fail(err)
	}
	if err := p.Invoker.Start(ctx); err != nil {
		return fail(err)
	}
	gcfg := gateway.Config{
		Pool: pool, APIPool: api, Reads: p.Reads, Invoker: p.Invoker, TracerProvider: cfg.TracerProvider, Verifier: p.Verifier, Tokens: p.Tokens, Logger: log,
		Keys: p.Keys, Egress: cfg.Egress, MaxBodyBytes: cfg.MaxBodyBytes, Web: cfg.Web,
		OperatorRole: cfg.OperatorRole, OperatorTenant: cfg.OperatorTenant,
		MaxWaitInvocations: cfg.MaxWaitInvocations, MaxWaitInvocationsPerTenant: cfg.MaxWaitInvocationsPerTenant,
		MaxStreamsPerTenant: cfg.MaxStreamsPerTenant, MaxStreamsPerSubject: cfg.MaxStreamsPerSubject,
		MaxSyncStartsPerTenant: cfg.MaxSyncStartsPerTenant, MaxSyncStartsPerSubject: cfg.MaxSyncStartsPerSubject,
		MaxHeavyReadsPerTenant: cfg.MaxHeavyReadsPerTenant, MaxHeavyReadsPerSubject: cfg.MaxHeavyReadsPerSubject,
		MemoryLimit: cfg.MemoryLimit.Bytes,
		Metrics:     p.Metrics.Handler(),
	}
	if cfg.Gateway != nil {
		cfg.Gateway(&gcfg)
	}
	if p.Server, err = gateway.New(gcfg); err != nil {
		return fail(err)
	}
	// The requests' context outlives ctx: a stopping gateway goes on serving the
	// checkpoints of its invocations in flight until they are drained.
	requests, endRequests := context.WithCancel(context.WithoutCancel(ctx))
	p.endRequests = endRequests
	p.srv = &http.Server{Handler: p.Server.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return requests }}
	go func() { p.served <- p.srv.Serve(p.ln) }()
	if cfg.PprofAddr != "" {
		p.servePprof(cfg.PprofAddr)
	}
	if cfg.MetricsAddr != "" {
		if err := p.serveMetrics(cfg.MetricsAddr); err != nil {
			return fail(err)
		}
	}
	log.Info("gateway serving", slog.String("addr", p.ln.Addr().String()), slog.String("public_url", p.URL))
	return p, nil
}

// servePprof serves net/http/pprof on addr until Stop.
func (p *Process) servePprof(addr string) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	p.pprof = &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := p.pprof.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
			p.log.Warn("pprof server stopped", slog.Any("error", err))
		}
	}()
}

// serveMetrics serves the metrics at addr's /metrics until Stop.
func (p *Process) serveMetrics(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	p.MetricsAddr = ln.Addr()
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", p.Metrics.Handler())
	p.metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := p.metricsSrv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			p.log.Warn("metrics server stopped", slog.Any("error", err))
		}
	}()
	return nil
}

// Addr returns the address the gateway listens on.
func (p *Process) Addr() net.Addr { return p.ln.Addr() }

// Done returns a channel that receives the error the HTTP server stopped serving with:
// something went wrong when it comes before Stop; http.ErrServerClosed after it.
func (p *Process) Done() <-chan error { return p.served }

// Stop drains the gateway, then shuts it down. Draining: the gateway takes no new runs
// and reports itself not ready, River fetches no more jobs, and the invocations in
// flight go on, their checkpoints served, until DrainTimeout, a DrainSignal or the end
// of ctx; the rest are handed over to the other gateways. Then the requests still open
// end (a caller waiting for a run is answered its status), the HTTP server closes
// (allowed 10s, whatever ctx), River stops, and the pools close.
//
// Stop may be called more than once, and after the invoker was drained or stopped on
// its own; later calls return when the first one has finished.
func (p *Process) Stop(ctx context.Context) {
	p.stopOnce.Do(func() { p.stop(ctx) })
}

func (p *Process) stop(ctx context.Context) {
	if p.Server != nil {
		p.Server.Drain()
	}
	if p.Invoker != nil {
		p.drain(ctx)
	}
	if p.endRequests != nil {
		p.endRequests()
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if p.srv != nil {
		if err := p.srv.Shutdown(ctx); err != nil {
			p.log.Warn("http shutdown", slog.Any("error", err))
			p.srv.Close()
		}
	} else if p.ln != nil {
		p.ln.Close()
	}
	if p.pprof != nil {
		p.pprof.Close()
	}
	if p.metricsSrv != nil {
		p.metricsSrv.Close()
	}
	if p.Invoker != nil {
		if err := p.Invoker.Stop(ctx); err != nil {
			p.log.Warn("invoker stop", slog.Any("error", err))
		}
	}
	if p.Verifier != nil {
		p.Verifier.Close()
	}
	if p.Reads != nil {
		p.Reads.Close()
	}
	p.APIPool.Close()
	p.Pool.Close()
	if p.Listen != nil {
		p.Listen.Close()
	}
}

// pollIntervalIf returns pollInterval when polling, else 0 (the invoker's default).
func pollIntervalIf(polling bool) time.Duration {
	if polling {
		return pollInterval
	}
	return 0
}

// drain lets the invocations in flight finish, then hands the rest over; see Stop.
func (p *Process) drain(ctx context.Context) {
	if n := p.Invoker.Status().InFlight; n > 0 {
		msg := "draining: waiting for the invocations in flight to finish"
		if len(p.drainSignals) > 0 {
			msg += "; interrupt again to hand them over at once"
		}
		p.log.Info(msg, slog.Int("invocations", n), slog.Duration("drain_timeout", p.drainTimeout))
	}
	ctx, cancel := context.WithTimeout(ctx, p.drainTimeout)
	defer cancel()
	if len(p.drainSignals) > 0 {
		var stopSignals context.CancelFunc
		ctx, stopSignals = signal.NotifyContext(ctx, p.drainSignals...)
		defer stopSignals()
	}
	n, err := p.Invoker.Drain(ctx)
	switch {
	case err != nil:
		p.log.Warn("draining: could not hand the invocations over; their leases lapse and other gateways take them", slog.Any("error", err))
	case n > 0:
		p.log.Info("draining: handed invocations over to the other gateways", slog.Int("invocations", n))
	}
}

// migrate applies the migrations as pc's login user, on a pool of its own: the
// gateway's pools act as journal.AppRole and journal.SystemRole, which may not change
// the schema.
func migrate(ctx context.Context, pc *pgxpool.Config) error {
	mc := pc.Copy()
	mc.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, mc)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	return nil
}

// databaseHosts returns the distinct host:port pairs pc connects to, in the order it
// tries them (a host's TLS and plain attempts are one).
func databaseHosts(pc *pgxpool.Config) []string {
	var hosts []string
	add := func(host string, port uint16) {
		if hp := net.JoinHostPort(host, strconv.Itoa(int(port))); !slices.Contains(hosts, hp) {
			hosts = append(hosts, hp)
		}
	}
	add(pc.ConnConfig.Host, pc.ConnConfig.Port)
	for _, f := range pc.ConnConfig.Fallbacks {
		add(f.Host, f.Port)
	}
	return hosts
}

// openPools opens the gateway's two pools, which share pc.MaxConns: the system pool
// (the invoker, River and checkpoints, which see every tenant) and the API pool (one
// tenant per transaction, through journal.ForTenant), of apiConns (default: half). It
// fails when the database user may not act as their roles, and warns when row-level
// security does not apply to them. pooled: the connections go through a transaction
// pooler, which makes each act as journal.SystemRole (see Config.Pooler); the API pool
// acts as journal.AppRole per transaction.
func openPools(ctx context.Context, pc *pgxpool.Config, apiConns int32, pooled bool, log *slog.Logger) (system, api *pgxpool.Pool, err error) {
	sc, ac := pc.Copy(), pc.Copy()
	ac.MaxConns = max(cmp.Or(apiConns, pc.MaxConns/2), 2)
	sc.MaxConns = max(pc.MaxConns-ac.MaxConns, 2)
	if !pooled {
		journal.ConfigurePool(sc, true)
		journal.ConfigurePool(ac, false)
	}
	if system, err = pgxpool.NewWithConfig(ctx, sc); err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	if api, err = pgxpool.NewWithConfig(ctx, ac); err != nil {
		system.Close()
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	var apiDB journal.DB = api
	if pooled {
		journal.ActAsAppPerTransaction(api)
		apiDB = journal.ForTenant(api, "stepgate.fence-check")
	}
	for _, p := range []struct {
		db   journal.DB
		role string
	}{{system, journal.SystemRole}, {apiDB, journal.AppRole}} {
		fence, err := journal.CheckFence(ctx, p.db)
		switch {
		case err != nil && pooled:
			err = fmt.Errorf("behind a transaction pooler: %w", err)
		case pooled && p.role == journal.SystemRole && fence.User != p.role:
			err = fmt.Errorf("behind a transaction pooler, the pooler must make each server connection act as %s (the gateway cannot: "+
				"a session's SET ROLE would not follow its transactions), but the connections act as %s: in PgBouncer's [databases] entry, "+
				"add connect_query='SET ROLE %s' (see docs/operations.md, Behind PgBouncer)", p.role, fence.User, p.role)
		case err != nil:
		case fence.User == p.role:
			continue
		case fence.Bypassed:
			log.Warn("row-level security is bypassed: the database user cannot act as "+p.role+" and is a superuser or has BYPASSRLS, "+
				"so only the gateway's queries keep tenants apart; grant it "+journal.AppRole+" and "+journal.SystemRole,
				slog.String("db_user", fence.User))
			continue
		default:
			err = fmt.Errorf("the database user %s may not act as %s, and would see no rows: as a superuser or a user with CREATEROLE, "+
				"GRANT %s, %s TO %s (migrating as that user grants them)", fence.User, p.role, journal.AppRole, journal.SystemRole, fence.User)
		}
		system.Close()
		api.Close()
		return nil, nil, err
	}
	return system, api, nil
}

// openReads opens a pool on each host of rc (streaming standbys of the primary) as
// the API pool is opened, and the readpool.Reads that picks among them and api. A
// replica that cannot be reached now is not an error (its reads go to the primary until
// it can be); one whose user may not act as journal.AppRole is.
func openReads(ctx context.Context, rc *pgxpool.Config, maxLag time.Duration, system, api *pgxpool.Pool, log *slog.Logger) (*readpool.Reads, error) {
	var replicas []*pgxpool.Pool
	closeAll := func() {
		for _, r := range replicas {
			r.Close()
		}
	}
	for _, c := range readpool.SplitHosts(rc) {
		c.MaxConns = api.Config().MaxConns
		if c.ConnConfig.ConnectTimeout == 0 {
			// An unreachable replica must not hold a read long before it goes to the primary.
			c.ConnConfig.ConnectTimeout = 2 * time.Second
		}
		journal.ConfigurePool(c, false)
		r, err := pgxpool.NewWithConfig(ctx, c)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("STEPGATE_DATABASE_READ_URL: %w", err)
		}
		replicas = append(replicas, r)
		host := c.ConnConfig.Host
		fctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		fence, err := journal.CheckFence(fctx, r)
		cancel()
		var pe *pgconn.PgError
		switch {
		case errors.As(err, &pe) && pe.Code == "42501": // insufficient_privilege: may not SET ROLE
			closeAll()
			return nil, fmt.Errorf("STEPGATE_DATABASE_READ_URL: the database user of replica %s may not act as %s: %w", host, journal.AppRole, err)
		case err != nil:
			log.Warn("a replica cannot be reached now; reads go to the primary until it can", slog.String("replica", host), slog.Any("error", err))
		case fence.User != journal.AppRole && !fence.Bypassed:
			closeAll()
			return nil, fmt.Errorf("STEPGATE_DATABASE_READ_URL: the database user %s of replica %s may not act as %s, and would see no rows", fence.User, host, journal.AppRole)
		}
	}
	reads, err := readpool.New(readpool.Config{Primary: system, Fallback: api, Replicas: replicas, MaxLag: maxLag, Logger: log})
	if err != nil {
		closeAll()
		return nil, err
	}
	return reads, nil
}

// LocalURL returns the http URL a client on this machine dials to reach a listener at
// a: ":8080" listens on every interface, so it dials http://127.0.0.1:8080.
func LocalURL(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	switch {
	case !ok:
		return "http://" + a.String()
	case ta.IP.IsUnspecified():
		return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ta.Port))
	}
	return "http://" + ta.String()
}
