// Package invoker moves runs: it calls functions over HTTP with their journal, applies
// their answers, and drives what waits (sleeps, retries, expired leases) with River jobs.
//
// A run's next move is always durable before it is made: the outcome of an invocation
// and the River job that makes the next move commit in one transaction. Timers in this
// process wake sleeping runs on time; the River job is the backstop that wakes them when
// this process is gone. River retries its own jobs only for infrastructure errors; the
// retries a function asked for are journal events.
package invoker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	"riverqueue.com/riverui"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/internal/helpers/egress"
	"github.com/stepgate/stepgate/internal/helpers/metrics"
	"github.com/stepgate/stepgate/internal/helpers/notify"
	"github.com/stepgate/stepgate/internal/helpers/tracing"
	"github.com/stepgate/stepgate/invoker/internal/call"
	"github.com/stepgate/stepgate/invoker/internal/clock"
	"github.com/stepgate/stepgate/invoker/internal/fairshare"
	"github.com/stepgate/stepgate/invoker/internal/maintenance"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/stats"
)

// Config configures an Invoker.
type Config struct {
	Pool   *pgxpool.Pool // Required.
	Logger *slog.Logger  // Required.
	// CheckpointURL is the base URL functions reach this gateway at, for checkpoints
	// ("http://127.0.0.1:8080"). Required.
	CheckpointURL string
	// Keys sign each request to a function with its tenant's keys. Required.
	Keys   *auth.SigningKeys
	Tokens *auth.InvocationTokens // Required.
	// Egress says which addresses each tenant's functions may be at (its clients call
	// them: egress.Policy.Clients), and how much of a failed invocation of a function
	// outside the public internet the run shows (egress.Policy.PrivateErrorDetail).
	// Defaults to the zero egress.Policy: the public internet only. Invocation timeouts
	// come from each function's config.
	Egress egress.Policy
	// MaxAnswerBytes bounds a function's answer, and each frame of a duplex one. Defaults
	// to 16 MiB.
	MaxAnswerBytes int64
	// DuplexOff calls every function in request/response mode, whatever its config's
	// modes say (STEPGATE_DUPLEX=off).
	DuplexOff bool
	// Workers is how many River-driven invocations run at once. Defaults to 100.
	Workers int
	// FairReserve is how many of the Workers only tenants below their equal share may
	// take, so that a tenant with a backlog cannot hold every worker (see package fairshare).
	// Defaults to a tenth of the Workers, rounded up; negative: none (any tenant may hold
	// every worker). At most Workers-1.
	FairReserve int
	// Retention is how long finished runs are kept unless their function's
	// config.retention says otherwise; old events and tombstones go after it too.
	// Defaults to DefaultRetention (30 days).
	Retention time.Duration
	// RetentionInterval is how often retention deletes what is past it. Defaults to a
	// minute.
	RetentionInterval time.Duration
	// RetentionBatch is how many rows one of its transactions deletes. Defaults to 500.
	RetentionBatch int
	// FetchCooldown is River's minimum time between job fetches. Defaults to 2ms, so a
	// queued run starts within a few milliseconds.
	FetchCooldown time.Duration
	// LeaseTTL is how long an invocation owns its run past its gateway's last renewal
	// of its lease (see lease.go): how long a dead gateway's runs wait before another
	// takes them. Defaults to 5s.
	LeaseTTL time.Duration
	// RenewInterval is how often this gateway renews its invocations' leases. Defaults
	// to LeaseTTL/5.
	RenewInterval time.Duration
	// MaintainInterval is how often, on average, this gateway recovers runs whose lease
	// lapsed, enqueues stranded runs and handles overdue schedule ticks. Defaults to 1s.
	MaintainInterval time.Duration
	// SweepGrace is how long a run is due, with no live job, before the sweep enqueues
	// one (see journal.StrandedRuns). Defaults to 3s.
	SweepGrace time.Duration
	// MaxRecoveries is how many recoveries in a row (with no new journal entry between
	// them) a run may have before it fails max_recoveries. Defaults to 100.
	MaxRecoveries int
	// Limits bound functions' configs and answers and runs' journals.
	Limits Limits
	// Listener is the process's LISTEN connection (see package notify), which its owner
	// runs. Nil: the invoker makes one on ListenPool (or Pool), or a polling one with
	// PollOnly, and runs it from Start to Stop.
	Listener *notify.Listener
	// ListenPool, when set, is where River's notifier takes its LISTEN connection, and
	// the listener the invoker makes its own: a direct connection to the database when
	// Pool goes through a pooler in transaction mode, which cannot carry LISTEN. Nil:
	// Pool.
	ListenPool *pgxpool.Pool
	// PollOnly: nothing LISTENs, for a Pool behind a transaction pooler with no
	// ListenPool. River polls for jobs every FetchPollInterval, fetching at once the jobs
	// this process inserts; the listener the invoker makes polls too
	// (notify.NewPollingListener): the waiters on runs look again every
	// FetchPollInterval, the live streams resync every PollResync.
	PollOnly bool
	// PollResync is how often, with PollOnly, the live streams are told to resync.
	// Defaults to 5s.
	PollResync time.Duration
	// FetchPollInterval is how often River looks for jobs that no notification told it
	// of. Defaults to 1s.
	FetchPollInterval time.Duration
	// Clock makes the timers of runs' wake-ups and deadlines and schedules' ticks, and
	// is the clock of the maintenance services (maintenance.go). Defaults to the system
	// clock.
	Clock Clock
	// Metrics records runs, invocations, checkpoints and answers. Nil records nothing.
	Metrics *metrics.Metrics
	// TracerProvider, when set, traces each run (see tracing.go) and River's jobs
	// (otelriver), and sends each invocation's traceparent to the function. Nil: no
	// traces, and no tracing work on the hot path. Use one made by package tracing
	// (FromEnv or NewProvider), which exports the runs' root spans with their ids.
	TracerProvider trace.TracerProvider
	// TraceErrorMessages, when true, exports the messages of errors (a failed
	// invocation's, a step's, a run's) in spans' status descriptions, each cut to
	// tracing.MaxMessageBytes. When false (the default) a span's status description is
	// the error's type only: messages hold what functions and their answers say, which
	// the trace backend's readers may not be meant to see. Inputs and outputs are never
	// exported.
	TraceErrorMessages bool
}

// Invoker calls functions and applies their answers. See the package doc.
type Invoker struct {
	pool     *pgxpool.Pool
	appender *journal.Appender // checkpoints, group-committed
	log      *slog.Logger
	river    *river.Client[pgx.Tx]
	caller   *call.Caller // sends invocations (package call)
	// earlyClaimed, set by the tests only, sees each claim armWake makes ahead of a wake.
	earlyClaimed func(*journal.Claim)
	tokens       *auth.InvocationTokens
	checkpoint   string
	duplexOff    bool // Config.DuplexOff
	limits       Limits
	retention    time.Duration // Config.Retention: events older are deleted (a wait's look-back's bound)
	// rerunBatchSize is how many runs a batch of a bulk rerun takes: RerunBatchSize, or
	// fewer in the tests.
	rerunBatchSize int
	// afterRerunBatch, set by the tests, runs after each batch of a bulk rerun commits.
	afterRerunBatch func()
	// Crash recovery (lease.go).
	leaseTTL      time.Duration
	renewEvery    time.Duration
	maintainEvery time.Duration
	sweepGrace    time.Duration
	maxRecoveries int
	// The maintenance services (maintenance.go) and their clock.
	clock       Clock
	renewer     *maintenance.Renewer
	maintainer  *maintenance.Maintainer
	schedules   *Schedules
	operations  *Operations
	callbacks   *Callbacks
	checkpoints *Checkpoints
	messages    *Messages

	functions     *Functions
	metrics       *metrics.Metrics
	tracer        trace.Tracer     // nil: traces are off
	traceMessages bool             // Config.TraceErrorMessages
	riverStarted  atomic.Bool      // see Running
	listener      *notify.Listener // the process's LISTEN connection; waiters subscribe to it
	ownsListener  bool             // made by New: Start runs it

	timers *timers          // runs' wake-ups and deadlines, schedules' ticks, in this process (timers.go)
	fair   *fairshare.Share // the tenants' shares of River's workers

	callbackKeyMu sync.Mutex
	callbackKey   journal.CallbackKey // read once, when first needed (callbackKeyOf)

	inflightMu sync.Mutex
	inflight   map[string]map[*inflightCall]struct{} // run id -> its invocations from this process
	inflightN  int
	idle       chan struct{} // closed when inflightN drops to 0 (whenIdle)

	loopsCancel context.CancelFunc // stops the renewal and maintenance loops
	loopsWG     sync.WaitGroup

	bg       context.Context // for work that outlives a request: timers' invocations
	bgCancel context.CancelFunc
	bgWG     sync.WaitGroup
}

// New returns an Invoker with its River client, not started.
func New(cfg Config) (*Invoker, error) {
	if cfg.Pool == nil || cfg.Logger == nil || cfg.Tokens == nil || cfg.CheckpointURL == "" || cfg.Keys == nil {
		return nil, errors.New("invoker: Pool, Logger, Tokens, CheckpointURL and Keys are required")
	}
	caller := &call.Caller{Clients: cfg.Egress.Clients(), Egress: cfg.Egress, Keys: cfg.Keys,
		MaxAnswer: cmp.Or(cfg.MaxAnswerBytes, 16<<20), Tracing: cfg.TracerProvider != nil, Log: cfg.Logger}
	inv := &Invoker{
		pool:           cfg.Pool,
		log:            cfg.Logger,
		caller:         caller,
		tokens:         cfg.Tokens,
		checkpoint:     cfg.CheckpointURL,
		duplexOff:      cfg.DuplexOff,
		limits:         cfg.Limits.WithDefaults(),
		retention:      cmp.Or(cfg.Retention, DefaultRetention),
		rerunBatchSize: RerunBatchSize,

		leaseTTL:      cmp.Or(cfg.LeaseTTL, 5*time.Second),
		maintainEvery: cmp.Or(cfg.MaintainInterval, time.Second),
		sweepGrace:    cmp.Or(cfg.SweepGrace, 3*time.Second),
		maxRecoveries: cmp.Or(cfg.MaxRecoveries, 100),
		listener:      cfg.Listener,
		metrics:       cfg.Metrics,
		inflight:      map[string]map[*inflightCall]struct{}{},
	}
	inv.functions = &Functions{pool: cfg.Pool, limits: inv.limits, retention: inv.retention}
	inv.appender = journal.NewAppender(cfg.Pool, checkpointWrites, checkpointWriteTimeout)
	switch {
	case inv.listener != nil:
	case cfg.PollOnly:
		inv.listener, inv.ownsListener = notify.NewPollingListener(cmp.Or(cfg.FetchPollInterval, time.Second), cmp.Or(cfg.PollResync, 5*time.Second)), true
	default:
		inv.listener, inv.ownsListener = notify.NewListener(cmp.Or(cfg.ListenPool, cfg.Pool), cfg.Logger), true
	}
	inv.listener.HandleSlotWakes(func(id string) { inv.wake(id, nil, 0) })
	inv.renewEvery = cmp.Or(cfg.RenewInterval, inv.leaseTTL/5)
	if inv.renewEvery >= inv.leaseTTL {
		return nil, fmt.Errorf("invoker: the renewal interval %s must be shorter than the lease TTL %s", inv.renewEvery, inv.leaseTTL)
	}
	inv.clock = cmp.Or[Clock](cfg.Clock, clock.Real{})
	inv.bg, inv.bgCancel = context.WithCancel(context.Background())
	inv.timers = newTimers(inv.clock, &inv.bgWG)
	inv.schedules = &Schedules{inv: inv}
	inv.operations = &Operations{inv: inv}
	inv.callbacks = &Callbacks{inv: inv}
	inv.checkpoints = &Checkpoints{inv: inv}
	inv.messages = &Messages{inv: inv}
	inv.renewer, inv.maintainer = inv.newMaintenance()
	inv.fair = fairshare.New(cmp.Or(cfg.Workers, 100), cfg.FairReserve)
	workers := river.NewWorkers()
	river.AddWorker(workers, &invokeWorker{inv: inv})
	river.AddWorker(workers, &tickWorker{inv: inv})
	river.AddWorker(workers, &cancelTreeWorker{inv: inv})
	river.AddWorker(workers, &cancelOperationWorker{inv: inv})
	river.AddWorker(workers, &rerunOperationWorker{inv: inv})
	river.AddWorker(workers, &deadlineWorker{inv: inv})
	river.AddWorker(workers, maintenance.NewRetention(cfg.Pool, cmp.Or(cfg.Retention, DefaultRetention),
		cmp.Or(cfg.RetentionBatch, 500), cfg.Logger, inv.clock))
	river.AddWorker(workers, maintenance.NewSeries(cfg.Pool, cfg.Logger))
	var middleware []rivertype.Middleware
	if cfg.TracerProvider != nil {
		inv.tracer = cfg.TracerProvider.Tracer(tracing.Name)
		inv.traceMessages = cfg.TraceErrorMessages
		middleware = append(middleware, otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
			TracerProvider: cfg.TracerProvider,
			MeterProvider:  metricnoop.NewMeterProvider(), // the gateway's metrics are Prometheus'
			// A job's work span links to the span that inserted it (an invocation's
			// answer, a start request).
			EnableTracePropagation:      true,
			EnableWorkSpanJobKindSuffix: true,
		}))
	}
	rc, err := river.NewClient(riverDriver(cfg), &river.Config{
		Middleware:        middleware,
		Logger:            slog.New(warnOnly{cfg.Logger.Handler()}).With(slog.String("component", "river")),
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: inv.fair.Workers()}},
		Workers:           workers,
		FetchCooldown:     cmp.Or(cfg.FetchCooldown, 2*time.Millisecond),
		FetchPollInterval: cmp.Or(cfg.FetchPollInterval, time.Second),
		JobTimeout:        -1, // each invocation is bounded by its function's timeout
		// The gateway acts as stepgate_system, which does not own River's indexes, so
		// River's daily REINDEX would fail; operators reindex as the owner if needed.
		ReindexerIndexNames: []string{},
		// A job fetched by a process that died stays running until River's leader rescues
		// it. The sweep moves its run long before (see journal.StrandedRuns); the rescued
		// job finds nothing to claim. A job whose invocation is still in flight may be
		// rescued too: its retry finds the run claimed and does nothing.
		RescueStuckJobsAfter: time.Minute,
		PeriodicJobs: []*river.PeriodicJob{maintenance.RetentionJob(cmp.Or(cfg.RetentionInterval, time.Minute)),
			maintenance.SeriesJob()},
	})
	if err != nil {
		return nil, fmt.Errorf("invoker: river client: %w", err)
	}
	inv.river = rc
	return inv, nil
}

// riverDriver returns River's driver on cfg.Pool: one that takes its LISTEN connection
// from cfg.ListenPool when set, or that says it cannot listen with cfg.PollOnly, so
// that River polls and fetches at once the jobs this process inserts (River does that
// only for a driver without a listener, not for river.Config.PollOnly).
func riverDriver(cfg Config) riverdriver.Driver[pgx.Tx] {
	d := riverpgxv5.New(cfg.Pool)
	switch {
	case cfg.PollOnly:
		return pollOnlyDriver{d}
	case cfg.ListenPool != nil:
		return listenDriver{Driver: d, listen: riverpgxv5.New(cfg.ListenPool)}
	}
	return d
}

// pollOnlyDriver is River's driver with no listener.
type pollOnlyDriver struct{ *riverpgxv5.Driver }

func (pollOnlyDriver) SupportsListener() bool { return false }

// listenDriver is River's driver whose listener is another pool's.
type listenDriver struct {
	*riverpgxv5.Driver
	listen *riverpgxv5.Driver
}

func (d listenDriver) GetListener(params *riverdriver.GetListenenerParams) riverdriver.Listener {
	return d.listen.GetListener(params)
}

// Start starts River's workers, the lease and maintenance loops and, when the invoker
// made its own, the notification listener; it returns once waiters can rely on
// notifications.
func (inv *Invoker) Start(ctx context.Context) error {
	if inv.ownsListener {
		inv.bgWG.Add(1)
		go func() {
			defer inv.bgWG.Done()
			inv.listener.Run(inv.bg)
		}()
	}
	// River's work outlives ctx (a start-up context, or the process's signal context):
	// Drain and Stop end it, gracefully.
	if err := inv.river.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("invoker: start river: %w", err)
	}
	inv.riverStarted.Store(true)
	loops, cancel := context.WithCancel(context.WithoutCancel(ctx))
	inv.loopsCancel = cancel
	inv.loopsWG.Add(2)
	go func() { defer inv.loopsWG.Done(); inv.renewer.Run(loops) }()
	go func() { defer inv.loopsWG.Done(); inv.maintainer.Run(loops) }()
	select {
	case <-inv.listener.Ready():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Drain stops this process taking new work: River fetches no more jobs, local timers
// are stopped (their runs' River jobs and the other gateways' sweeps take them), and the
// maintenance passes stop. The invocations in flight go on, their leases renewed, until
// they finish or ctx ends; then the rest are handed over: their leases released and
// their runs requeued at once (as recoveries), for another gateway to take without
// waiting for a lease to lapse. The gateway must go on serving checkpoints meanwhile. It
// returns how many invocations were handed over.
func (inv *Invoker) Drain(ctx context.Context) (int, error) {
	inv.stopTimers()
	stopped := make(chan error, 1)
	go func() { stopped <- inv.river.Stop(ctx) }() // stops fetching, waits for running jobs
	select {
	case <-inv.whenIdle():
	case <-ctx.Done():
	}
	handCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	n, err := inv.handOver(handCtx)
	if err != nil {
		return 0, err
	}
	// The abandoned invocations return promptly: their calls are cancelled.
	select {
	case <-inv.whenIdle():
	case <-handCtx.Done():
	}
	select {
	case <-stopped:
	case <-handCtx.Done():
	}
	return n, nil
}

// stopTimers stops this process's timers (sleeps' wake-ups, deadlines, schedules' ticks)
// for good: their River jobs, and the other gateways' maintenance passes, take their runs.
func (inv *Invoker) stopTimers() { inv.timers.stop() }

// Stop stops River (letting running invocations finish until ctx ends), the local
// timers (their runs are woken by their River jobs), the lease renewal and maintenance
// loops, and the listener. Call Drain first to hand unfinished invocations over rather
// than leave their leases to lapse.
func (inv *Invoker) Stop(ctx context.Context) error {
	inv.stopTimers()
	err := inv.river.Stop(ctx)
	if inv.loopsCancel != nil {
		inv.loopsCancel()
		inv.loopsWG.Wait()
	}
	inv.bgCancel()
	inv.bgWG.Wait()
	return err
}

// enqueue inserts, in tx, the River job that invokes a queued run as soon as possible,
// with the run's tenant and priority, read from its row in tx first (journal.RunJobs). A
// run that tx does not see gets no job.
func (inv *Invoker) enqueue(ctx context.Context, tx pgx.Tx, runID string) error {
	if err := inv.enqueueNow(ctx, tx, []string{runID}); err != nil {
		return fmt.Errorf("enqueue run %s: %w", runID, err)
	}
	return nil
}

// Listener returns the process's listening connection: Subscribe tells when a run may
// have reached a terminal status, SubscribeOutput when it may have published a value or
// written to a stream, on any gateway, once a reader attached to it (Attach).
func (inv *Invoker) Listener() *notify.Listener { return inv.listener }

// cancelled tells this process that runID was cancelled (journal.CancelRun has
// committed): its local wake-up and deadline timers are stopped, a call to its function
// from this process is abandoned (its answer would be refused), and its local waiters
// are told.
// Other gateways learn of it through journal.NotifyChannel; their timers and the run's
// River job find nothing to claim, and their calls end at the function's next
// checkpoint, refused.
func (inv *Invoker) cancelled(runID string) { inv.ended(runID, errRunCancelled) }

// ended tells this process that runID ended without the answer of its invocation: its
// wake-up and deadline timers are stopped, its calls from this process are abandoned
// with cause, and its waiters are told.
func (inv *Invoker) ended(runID string, cause error) {
	inv.timers.cancel(runTimer(runID))
	inv.timers.cancel(deadlineTimer(runID))
	inv.inflightMu.Lock()
	for c := range inv.inflight[runID] {
		c.cancel(cause)
	}
	inv.inflightMu.Unlock()
	inv.listener.Signal(runID)
}

// errRunCancelled is the cause of an invocation's context when its run was cancelled;
// errRunFailed when a checkpoint failed it.
var (
	errRunCancelled = errors.New("invoker: the run was cancelled")
	errRunFailed    = errors.New("invoker: a checkpoint failed the run")
)

// checkpointWrites is how many checkpoint writes a gateway has in flight at most; the
// checkpoints arriving meanwhile are gathered into the next (journal.Appender). On the
// 2-core bench machine one write did better than two, and two better than three or
// four, for 16 clients' runs of 3 and 10 steps: larger batches beat parallel writes
// (docs/benchmarks-history.md, "Group commit of checkpoints, pipelined"). A lone checkpoint
// finds the write free, and no write waits long for a lock (journal.AppendEntries).
// checkpointWriteTimeout bounds one write.
const (
	checkpointWrites       = 1
	checkpointWriteTimeout = 30 * time.Second
)

// appendCheckpoint journals e, a function's checkpoint for invocation of runID (see
// journal.AppendEntry), within the invoker's bounds, group-committed with the
// checkpoints of other runs that arrive while writes are in flight (journal.Appender);
// errors are as Checkpoint's.
func (inv *Invoker) appendCheckpoint(ctx context.Context, runID string, invocation int, e journal.Entry) error {
	began := time.Now()
	err := inv.appender.Append(ctx, journal.Append{RunID: runID, Invocation: invocation, Entry: e, Bounds: inv.limits.Bounds()})
	inv.metrics.Checkpoint(time.Since(began))
	if err == nil {
		span := inv.checkpointed(runID, invocation, e.Seq)
		inv.traceEntries(ctx, span, runID, []journal.Entry{e})
	}
	return inv.failOnCheckpoint(ctx, runID, invocation, err)
}

// Claim returns nil when invocation owns run runID now and nonce is the first
// nonce asked for it (or that nonce again), and journal.ErrSuperseded otherwise (see
// journal.ClaimInvocation): what a function asks, with a nonce of its process, before the
// first step body of an invocation that the journal does not hold, so that a captured
// invocation request sent again, to another process, runs no step body, even while the
// invocation it copies runs. nonce must be journal.ValidNonce.
func (c *Checkpoints) Claim(ctx context.Context, runID string, invocation int, nonce string) error {
	inv := c.inv
	return journal.ClaimInvocation(ctx, inv.pool, runID, invocation, nonce)
}

// failOnCheckpoint fails the run of a checkpoint of invocation that failed with err,
// when err is a conflict, a limit (see Checkpoint) or a tenant's quota, and returns err. For checkpoints
// journaled by other means, such as a sent event's.
func (inv *Invoker) failOnCheckpoint(ctx context.Context, runID string, invocation int, err error) error {
	if !errors.Is(err, journal.ErrConflict) && !errors.Is(err, journal.ErrLimit) && !errors.Is(err, journal.ErrQuota) {
		return err
	}
	if ferr := inv.failInvocation(ctx, runID, invocation, *unappliable(err)); ferr != nil && !errors.Is(ferr, journal.ErrSuperseded) {
		return errors.Join(err, ferr)
	}
	return err
}

// failInvocation fails the run that invocation owns with e (type ErrorTypeLimit,
// ErrorTypeNondeterminism, ...), as if the invocation had answered that failure: a
// parent waiting for the run is woken, waiters are told, and this process's call of it
// is abandoned. It returns journal.ErrSuperseded when the invocation no longer owns the
// run.
func (inv *Invoker) failInvocation(ctx context.Context, runID string, invocation int, e journal.ErrorInfo) error {
	ctx = context.WithoutCancel(ctx)
	var f *journal.Finished
	err := pgx.BeginFunc(ctx, inv.pool, func(tx pgx.Tx) error {
		var err error
		f, _, err = inv.finishTx(ctx, tx, &journal.Run{ID: runID, Invocation: invocation},
			journal.InvocationFailed(e))
		return err
	})
	if err != nil {
		return err
	}
	inv.log.InfoContext(ctx, "run failed by its checkpoint", inv.runAttrs(ctx, runID), slog.String("error_type", e.Type), slog.String("error", e.Message))
	if f.Parent != "" {
		inv.wake(f.Parent, nil, 0)
	}
	inv.ended(runID, errRunFailed)
	return nil
}

// Status is what a health check reads of an invoker.
type Status struct {
	// Running: River's client was started and has not stopped, so this process works
	// River's jobs (a draining process stops doing so).
	Running bool
	// InFlight is how many invocations this process has in flight.
	InFlight int
}

// Status returns the invoker's Status now.
func (inv *Invoker) Status() Status { return Status{Running: inv.running(), InFlight: inv.inFlight()} }

// running is Status.Running.
func (inv *Invoker) running() bool {
	if !inv.riverStarted.Load() {
		return false
	}
	select {
	case <-inv.river.Stopped():
		return false
	default:
		return true
	}
}

// Functions returns the registry of the gateway's functions.
func (inv *Invoker) Functions() *Functions { return inv.functions }

// Limits returns the invoker's limits, defaults applied.
func (inv *Invoker) Limits() Limits { return inv.limits }

// RiverUI returns River's own web UI on this invoker's River client, served under
// prefix. It shows, pauses and deletes every tenant's jobs: mount it for the
// deployment's operators only. The handler is not started: started, it would refresh its
// job counts in the background forever; unstarted, it counts when asked.
func (inv *Invoker) RiverUI(prefix string, log *slog.Logger) (http.Handler, error) {
	return riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(inv.river, nil),
		Logger:    log,
		Prefix:    prefix,
	})
}

// InvokeArgs is the River job that invokes a run once it is due.
type InvokeArgs struct {
	RunID string `json:"run_id"`
	// Tenant is the run's tenant, which the worker's fair share reads (package fairshare) and
	// River's UI filters by. Every invoke job is made by invokeJob, from a run at hand,
	// or by runJob, from the run's journal.RunJob read by id, which set it and Priority:
	// no trigger fills them in (migration 0046 dropped the one that did).
	Tenant string `json:"tenant,omitempty"`
	// Priority is the run's priority (journal.Run.Priority): River's job priority, not
	// part of the args.
	Priority int `json:"-"`
}

// InsertOpts implements river.JobArgsWithInsertOpts: the job's priority is its run's.
func (a InvokeArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Priority: a.Priority} }

// invokeJob is the args of an invoke job of run, with its tenant and priority.
func invokeJob(run *journal.Run) InvokeArgs {
	return InvokeArgs{RunID: run.ID, Tenant: run.Tenant, Priority: run.Priority}
}

// runJob is the args of an invoke job of the run r names, with its tenant and priority.
func runJob(r journal.RunJob) InvokeArgs {
	return InvokeArgs{RunID: r.RunID, Tenant: r.Tenant, Priority: r.Priority}
}

// Kind implements river.JobArgs.
func (InvokeArgs) Kind() string { return journal.InvokeJobKind }

type invokeWorker struct {
	river.WorkerDefaults[InvokeArgs]
	inv *Invoker
}

// Timeout disables River's job timeout: the function's own timeout bounds the work.
func (w *invokeWorker) Timeout(*river.Job[InvokeArgs]) time.Duration { return -1 }

func (w *invokeWorker) Work(ctx context.Context, job *river.Job[InvokeArgs]) error {
	if !w.inv.fair.Acquire(job.Args.Tenant) {
		return w.inv.holdBack(ctx, job)
	}
	defer w.inv.fair.Release(job.Args.Tenant)
	_, err := w.inv.resumeDue(ctx, job.Args.RunID, false)
	if errors.Is(err, journal.ErrNotDue) || errors.Is(err, journal.ErrSuperseded) || errors.Is(err, journal.ErrHeld) {
		// Woken already (by a local timer), or not due: its own job will come. Or the
		// invocation was abandoned (cancelled, handed over, its lease lost): whoever
		// took the run over enqueued its next job. Or a concurrency limit holds it: a
		// freed slot wakes it (wake).
		return nil
	}
	if err != nil && ctx.Err() == nil {
		w.inv.log.Warn("invoking the run failed; River retries it", w.inv.runAttrs(ctx, job.Args.RunID), slog.Any("error", err))
	}
	return err
}

// wake invokes runID from this process at once if it is due: a run that a committed
// transaction made due with its River job (a parent whose child has ended, a resumed
// waiter, a new child), or a held run that a freed concurrency slot made due (every
// gateway hears of it on journal.SlotChannel; the stranded-run sweep is the backstop
// when none heard). The first claim wins: when this process finds the run not due,
// another claimed it (its River job's worker, another gateway), and the wake does not
// look again. The River job stays the backstop; with backstop, its id, this process's
// claim deletes it while no worker has it (journal.ClaimWokenRun), the lease and the
// stranded-run sweep being the backstops from then on: a scheduled job (a sleep's, a
// retry's), which no worker can have before it is due. 0: none. A nil rev is looked up.
func (inv *Invoker) wake(runID string, rev *revision, backstop int64) {
	inv.armTimer(runID, rev, 0, maxWakeTries, backstop)
}

// maxWakeTries bounds how often a timer looks again at a run not due yet: a wake time
// on this process's clock may come a hair before it has on the database's.
const maxWakeTries = 3

// armTimer wakes runID in this process after d, unless the process stops first (then
// the River job scheduled with the suspension wakes it). A nil rev is looked up when
// the timer fires. A wake is admitted by the fair share as a River job is: when its
// tenant holds its share of the workers in the reserve zone, the timer does nothing,
// and the run's River job (which every wake has, or the stranded-run sweep) brings it
// to a worker, which holds it back until the tenant is below its share.
func (inv *Invoker) armTimer(runID string, rev *revision, d time.Duration, tries int, backstop int64) {
	inv.timers.arm(runTimer(runID), d, func() {
		var err error
		if rev == nil {
			rev, err = inv.functions.revisionOfRun(inv.bg, runID)
		}
		if err == nil {
			if !inv.fair.Acquire(rev.tenant) {
				return
			}
			_, err = inv.resume(inv.bg, rev, runID, false, backstop)
			inv.fair.Release(rev.tenant)
		}
		if errors.Is(err, journal.ErrNotDue) && tries < maxWakeTries {
			// The database clock may run a hair behind this timer; look again shortly.
			inv.armTimer(runID, rev, 500*time.Microsecond, tries+1, backstop)
			return
		}
		if err != nil && !errors.Is(err, journal.ErrNotDue) && !errors.Is(err, journal.ErrHeld) && inv.bg.Err() == nil {
			inv.log.Warn("timer wake-up failed; the River job will retry", inv.runAttrs(inv.bg, runID), slog.Any("error", err))
		}
	})
}

// earlyWake is how far ahead of a sleep's end a gateway claims the run
// (journal.ClaimRunEarly), so that the claim's commit is done by the time the sleep
// ends; the invocation still waits for the database clock to pass the wake time
// (untilNotBefore). earlyClaimBound is how far ahead, on the database clock, such a
// claim is accepted: the timer runs on this process's clock.
const (
	earlyWake       = 20 * time.Millisecond
	earlyClaimBound = 2 * earlyWake
)

// armWake wakes runID, suspended until wakeAt on the database clock, in this process
// after d (see armTimer). A run that nothing but that time can resume, of a function
// without concurrency limits, is claimed earlyWake ahead and invoked once the database
// clock passes wakeAt; any other (journal.ClaimRunEarly refuses it) is woken at d as
// armTimer does. A nil rev is looked up when the timer fires.
func (inv *Invoker) armWake(runID string, rev *revision, wakeAt time.Time, d time.Duration, backstop int64) {
	if d <= earlyWake || (rev != nil && len(rev.config.Concurrency) > 0) {
		inv.armTimer(runID, rev, d, 0, backstop)
		return
	}
	due := inv.clock.Now().Add(d)
	atTheWake := func() { inv.armTimer(runID, rev, due.Sub(inv.clock.Now()), 0, backstop) }
	inv.timers.arm(runTimer(runID), d-earlyWake, func() {
		var err error
		if rev == nil {
			if rev, err = inv.functions.revisionOfRun(inv.bg, runID); err != nil {
				rev = nil
				atTheWake()
				return
			}
		}
		if len(rev.config.Concurrency) > 0 {
			atTheWake()
			return
		}
		if !inv.fair.Acquire(rev.tenant) {
			return // as armTimer: the run's River job brings it to a worker
		}
		defer inv.fair.Release(rev.tenant)
		c, err := journal.ClaimRunEarly(inv.bg, inv.pool, rev.tenant, runID, wakeAt, earlyClaimBound, inv.leaseTTL, backstop)
		if errors.Is(err, journal.ErrNotDue) {
			// Resumable otherwise (a wait stored), or not suspended until wakeAt any more.
			atTheWake()
			return
		}
		if err == nil {
			if inv.earlyClaimed != nil {
				inv.earlyClaimed(c)
			}
			_, err = inv.invoke(inv.bg, rev, c, false)
		}
		if err != nil && !errors.Is(err, journal.ErrNotDue) && !errors.Is(err, journal.ErrSuperseded) && inv.bg.Err() == nil {
			inv.log.Warn("timer wake-up failed; the River job will retry", inv.runAttrs(inv.bg, runID), slog.Any("error", err))
		}
	})
}

// untilNotBefore returns once the database clock has passed claim.NotBefore (at once
// when it is zero), asking the database's clock (journal.ClockNow) first, then each time
// this process's timer says it should have passed; a failed read is asked again 10 ms
// later. (The claim's own clock is its transaction's start, a commit earlier: timing
// from it would wake late by the commit.) It returns ctx's cause when ctx ends first.
func (inv *Invoker) untilNotBefore(ctx context.Context, claim *journal.Claim) error {
	if claim.NotBefore.IsZero() {
		return nil
	}
	dbNow := claim.Now
	if now, err := journal.ClockNow(ctx, inv.pool); err == nil {
		dbNow = now
	}
	for dbNow.Before(claim.NotBefore) {
		t := time.NewTimer(claim.NotBefore.Sub(dbNow))
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
		now, err := journal.ClockNow(ctx, inv.pool)
		if err != nil {
			now = dbNow.Add(-10 * time.Millisecond) // wait 10 ms, then ask again
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
		}
		dbNow = now
	}
	return nil
}

// runAttrs returns the log attributes of run id, run_id, function and tenant, for log
// lines of rare paths that know only the id: it reads the run (1s at most), or logs
// empty names when it cannot.
func (inv *Invoker) runAttrs(ctx context.Context, id string) slog.Attr {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	tenant, function := stats.RunOwner(ctx, inv.pool, id)
	return slog.Group("", slog.String("run_id", id), slog.String("function", function), slog.String("tenant", tenant))
}

// warnOnly passes on River's warnings and errors; its info logs are per-job chatter.
type warnOnly struct{ slog.Handler }

func (h warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}

func (h warnOnly) WithAttrs(as []slog.Attr) slog.Handler { return warnOnly{h.Handler.WithAttrs(as)} }

func (h warnOnly) WithGroup(name string) slog.Handler { return warnOnly{h.Handler.WithGroup(name)} }
