package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/internal/helpers/egress"
	"github.com/stepgate/stepgate/internal/helpers/memlimit"
	"github.com/stepgate/stepgate/internal/helpers/metrics"
	"github.com/stepgate/stepgate/internal/helpers/readpool"
	"github.com/stepgate/stepgate/internal/helpers/tracing"
	"github.com/stepgate/stepgate/internal/wiring/gatewayproc"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/migrations"
	"github.com/stepgate/stepgate/web"
)

// serverConfig is how a gateway process is configured, read from the environment and
// flags; process turns it into the gatewayproc.Config that serve and dev start.
type serverConfig struct {
	databaseURL string
	// readURL (STEPGATE_DATABASE_READ_URL) names streaming standbys that serve the reads
	// that may be a little stale, no further behind than readMaxLag
	// (STEPGATE_DATABASE_READ_MAX_LAG; negative: every read on the primary).
	readURL    string
	readMaxLag time.Duration
	// pooler (STEPGATE_DATABASE_POOLER) is gatewayproc.PoolerTransaction when
	// DATABASE_URL goes through a pooler in transaction mode; listenURL
	// (STEPGATE_DATABASE_LISTEN_URL) is then a direct connection for LISTEN and the
	// migrations.
	pooler, listenURL string
	addr              string
	publicURL         string // how functions reach this gateway, for checkpoints
	jwt               jwtConfig
	// invocationKeys key the invocation tokens (STEPGATE_INVOCATION_KEY, newest first);
	// none: the database's keys, made by the first gateway (auth.LoadInvocationTokens).
	invocationKeys [][]byte
	// egress: STEPGATE_ALLOWED_NETWORKS, STEPGATE_ALLOWED_FUNCTION_HOSTS,
	// STEPGATE_TENANT_NETWORKS, STEPGATE_PRIVATE_ERROR_DETAIL.
	egress egress.Policy
	limits invoker.Limits
	// caps bound what one gateway holds at once: STEPGATE_MAX_WAIT_INVOCATIONS,
	// STEPGATE_MAX_WAIT_INVOCATIONS_PER_TENANT, STEPGATE_MAX_STREAMS_PER_TENANT,
	// STEPGATE_MAX_STREAMS_PER_SUBJECT, STEPGATE_MAX_SYNC_STARTS_PER_TENANT,
	// STEPGATE_MAX_SYNC_STARTS_PER_SUBJECT.
	maxWaits, maxWaitsPerTenant, maxStreamsPerTenant, maxStreamsPerSubject int
	maxSyncStartsPerTenant, maxSyncStartsPerSubject                        int
	// STEPGATE_MAX_HEAVY_READS_PER_TENANT, STEPGATE_MAX_HEAVY_READS_PER_SUBJECT.
	maxHeavyReadsPerTenant, maxHeavyReadsPerSubject int
	// memoryLimit: STEPGATE_MEMORY_LIMIT, GOMEMLIMIT, or the default (memlimit.Choose).
	memoryLimit memlimit.Limit
	// operatorRole and operatorTenant say who operates the deployment (River's UI):
	// STEPGATE_OPERATOR_ROLE, STEPGATE_OPERATOR_TENANT.
	operatorRole, operatorTenant string
	// Crash recovery: STEPGATE_LEASE_TTL, STEPGATE_MAX_RECOVERIES; and how long a
	// stopping gateway lets its invocations finish, STEPGATE_DRAIN_TIMEOUT.
	leaseTTL, drainTimeout time.Duration
	// databaseTimeout (STEPGATE_DATABASE_TIMEOUT) bounds each statement's wait for the
	// database's answer (gatewayproc.Config.DatabaseTimeout).
	databaseTimeout time.Duration
	// Retention: STEPGATE_RETENTION (how long finished runs are kept, unless their
	// function says otherwise), STEPGATE_RETENTION_INTERVAL (how often it deletes).
	retention, retentionInterval time.Duration
	maxRecoveries                int
	duplexOff                    bool
	// workers and fairReserve: STEPGATE_WORKERS, STEPGATE_FAIR_RESERVE (readWorkers).
	workers, fairReserve int
	maxBodyBytes         int64
	maxConns             int32
	logLevel             slog.Level
	pprofAddr            string // serves net/http/pprof when set
	// metricsAddr serves /metrics to anyone who reaches it when set
	// (STEPGATE_METRICS_ADDR); metrics, STEPGATE_METRICS_TENANT_LABEL.
	metricsAddr string
	metrics     metrics.Config
}

// readServerConfig reads the environment variables documented in docs/configuration.md.
func readServerConfig(getenv func(string) string) (serverConfig, error) {
	c := serverConfig{
		databaseURL: getenv("DATABASE_URL"),
		readURL:     strings.TrimSpace(getenv("STEPGATE_DATABASE_READ_URL")),
		addr:        cmp.Or(getenv("STEPGATE_ADDR"), ":8080"),
		publicURL:   getenv("STEPGATE_PUBLIC_URL"),
		pprofAddr:   getenv("STEPGATE_PPROF_ADDR"),
		metricsAddr: getenv("STEPGATE_METRICS_ADDR"),
	}
	switch v := getenv("STEPGATE_METRICS_TENANT_LABEL"); v {
	case "", "0", "false":
	case "1", "true":
		c.metrics.TenantLabel = true
	default:
		return c, fmt.Errorf("STEPGATE_METRICS_TENANT_LABEL %q is not 1 or 0", v)
	}
	if getenv("STEPGATE_SIGNING_KEYS") != "" {
		return c, errors.New("STEPGATE_SIGNING_KEYS is no longer read: the gateway signs each tenant's requests with that tenant's own " +
			"Ed25519 key, made and kept in the database; unset it, and give your functions their tenant's public key (stepgate keys)")
	}
	for i, k := range list(getenv("STEPGATE_INVOCATION_KEY")) {
		if len(k) < auth.MinInvocationKeyBytes {
			return c, fmt.Errorf("STEPGATE_INVOCATION_KEY: key %d is %d bytes; each needs at least %d (e.g. openssl rand -base64 32), "+
				"or leave it unset to use the database's key", i+1, len(k), auth.MinInvocationKeyBytes)
		}
		c.invocationKeys = append(c.invocationKeys, []byte(k))
	}
	var err error
	if c.egress.AllowedNetworks, err = egress.ParseNetworks(list(getenv("STEPGATE_ALLOWED_NETWORKS"))); err != nil {
		return c, fmt.Errorf("STEPGATE_ALLOWED_NETWORKS: %w", err)
	}
	if c.egress.AllowedHosts, err = egress.ParseHosts(list(getenv("STEPGATE_ALLOWED_FUNCTION_HOSTS"))); err != nil {
		return c, fmt.Errorf("STEPGATE_ALLOWED_FUNCTION_HOSTS: %w", err)
	}
	if c.egress.TenantNetworks, err = egress.ParseTenantNetworks(getenv("STEPGATE_TENANT_NETWORKS")); err != nil {
		return c, fmt.Errorf("STEPGATE_TENANT_NETWORKS: %w", err)
	}
	if c.egress.PrivateErrorDetail, err = readBool(getenv, "STEPGATE_PRIVATE_ERROR_DETAIL"); err != nil {
		return c, err
	}
	c.operatorRole = strings.TrimSpace(getenv("STEPGATE_OPERATOR_ROLE"))
	c.operatorTenant = strings.TrimSpace(getenv("STEPGATE_OPERATOR_TENANT"))
	if err := checkOperatorRole(c.operatorRole); err != nil {
		return c, err
	}
	if c.limits, err = readLimits(getenv); err != nil {
		return c, err
	}
	for _, n := range []struct {
		name string
		to   *int
	}{
		{"STEPGATE_MAX_WAIT_INVOCATIONS", &c.maxWaits},
		{"STEPGATE_MAX_WAIT_INVOCATIONS_PER_TENANT", &c.maxWaitsPerTenant},
		{"STEPGATE_MAX_STREAMS_PER_TENANT", &c.maxStreamsPerTenant},
		{"STEPGATE_MAX_STREAMS_PER_SUBJECT", &c.maxStreamsPerSubject},
		{"STEPGATE_MAX_SYNC_STARTS_PER_TENANT", &c.maxSyncStartsPerTenant},
		{"STEPGATE_MAX_SYNC_STARTS_PER_SUBJECT", &c.maxSyncStartsPerSubject},
		{"STEPGATE_MAX_HEAVY_READS_PER_TENANT", &c.maxHeavyReadsPerTenant},
		{"STEPGATE_MAX_HEAVY_READS_PER_SUBJECT", &c.maxHeavyReadsPerSubject},
	} {
		v, err := envInt(getenv, n.name, 0)
		if err != nil {
			return c, err
		}
		*n.to = int(min(v, math.MaxInt32))
	}
	if c.memoryLimit, err = memlimit.Choose(getenv, memlimit.SystemFiles); err != nil {
		return c, err
	}
	if c.jwt, err = readJWTConfig(getenv); err != nil {
		return c, err
	}
	for _, d := range []struct {
		name string
		to   *time.Duration
		def  time.Duration
	}{
		{"STEPGATE_LEASE_TTL", &c.leaseTTL, 5 * time.Second},
		{"STEPGATE_DRAIN_TIMEOUT", &c.drainTimeout, 30 * time.Second},
		{"STEPGATE_DATABASE_TIMEOUT", &c.databaseTimeout, gatewayproc.DefaultDatabaseTimeout},
		{"STEPGATE_RETENTION", &c.retention, invoker.DefaultRetention},
		{"STEPGATE_RETENTION_INTERVAL", &c.retentionInterval, time.Minute},
	} {
		if *d.to, err = envDuration(getenv, d.name, d.def); err != nil {
			return c, err
		}
	}
	if c.retention < invoker.MinRetention {
		return c, fmt.Errorf("STEPGATE_RETENTION %s is shorter than %s", c.retention, invoker.MinRetention)
	}
	if c.retentionInterval < time.Second {
		return c, fmt.Errorf("STEPGATE_RETENTION_INTERVAL %s is shorter than 1s", c.retentionInterval)
	}
	if c.readMaxLag, err = readMaxLag(getenv); err != nil {
		return c, err
	}
	if c.pooler, c.listenURL, err = readPooler(getenv); err != nil {
		return c, err
	}
	if c.leaseTTL < 500*time.Millisecond {
		return c, fmt.Errorf("STEPGATE_LEASE_TTL %s is shorter than 500ms: leases would lapse on a busy gateway", c.leaseTTL)
	}
	if c.databaseTimeout < time.Second || c.databaseTimeout > 10*time.Minute {
		return c, fmt.Errorf("STEPGATE_DATABASE_TIMEOUT %s is not between 1s and 10m (how long a statement waits for the database's answer "+
			"before the gateway gives up on it: the API then answers 503 with Retry-After)", c.databaseTimeout)
	}
	recoveries, err := envInt(getenv, "STEPGATE_MAX_RECOVERIES", 100)
	if err != nil {
		return c, err
	}
	c.maxRecoveries = int(min(recoveries, math.MaxInt32))
	switch d := getenv("STEPGATE_DUPLEX"); d {
	case "", "on":
	case "off":
		c.duplexOff = true
	default:
		return c, fmt.Errorf("STEPGATE_DUPLEX %q is not on or off", d)
	}
	if c.workers, c.fairReserve, err = readWorkers(getenv); err != nil {
		return c, err
	}
	if c.maxBodyBytes, err = envInt(getenv, "STEPGATE_MAX_BODY_BYTES", 1<<20); err != nil {
		return c, err
	}
	conns, err := envInt(getenv, "STEPGATE_DB_MAX_CONNS", 40)
	if err != nil {
		return c, err
	}
	c.maxConns = int32(conns)
	if lvl := getenv("STEPGATE_LOG_LEVEL"); lvl != "" {
		if err := c.logLevel.UnmarshalText([]byte(lvl)); err != nil {
			return c, fmt.Errorf("STEPGATE_LOG_LEVEL %q is not one of debug, info, warn, error", lvl)
		}
	}
	return c, nil
}

// checkOperatorRole refuses an operator role that a tenant's own tokens carry: a
// built-in role (admin included) or a permission name, compared in any case. Such a role
// would open River's UI, which shows every tenant's jobs, to every tenant's admins.
func checkOperatorRole(role string) error {
	for r := range access.Roles() {
		if strings.EqualFold(role, r) {
			return fmt.Errorf("STEPGATE_OPERATOR_ROLE %q is a tenant role: every tenant's %s would open River's UI, which shows every tenant's jobs; "+
				"choose a role only your platform's operators hold, such as %s", role, r, devOperatorRole)
		}
	}
	for _, p := range access.Permissions() {
		if strings.EqualFold(role, string(p)) {
			return fmt.Errorf("STEPGATE_OPERATOR_ROLE %q is a permission a tenant's tokens may carry as a role: they would open River's UI, which shows every tenant's jobs; "+
				"choose a role only your platform's operators hold, such as %s", role, devOperatorRole)
		}
	}
	return nil
}

// readLimits reads the bounds on functions and runs; unset ones keep their defaults.
func readLimits(getenv func(string) string) (invoker.Limits, error) {
	var l invoker.Limits
	for _, d := range []struct {
		name string
		to   *time.Duration
	}{
		{"STEPGATE_MAX_FUNCTION_TIMEOUT", &l.MaxTimeout},
		{"STEPGATE_MIN_BACKOFF", &l.MinBackoff},
	} {
		if v := getenv(d.name); v != "" {
			x, err := time.ParseDuration(v)
			if err != nil || x <= 0 {
				return l, fmt.Errorf("%s %q is not a positive duration, such as 15m", d.name, v)
			}
			*d.to = x
		}
	}
	for _, n := range []struct {
		name string
		to   func(int64)
	}{
		{"STEPGATE_MAX_ATTEMPTS", func(v int64) { l.MaxAttempts = int(v) }},
		{"STEPGATE_MAX_OUTPUT_BYTES", func(v int64) { l.MaxOutputBytes = int(v) }},
		{"STEPGATE_MAX_JOURNAL_ENTRIES", func(v int64) { l.MaxEntries = int(v) }},
		{"STEPGATE_MAX_JOURNAL_BYTES", func(v int64) { l.MaxJournalBytes = v }},
		{"STEPGATE_MAX_CHUNK_BYTES", func(v int64) { l.MaxChunkBytes = int(v) }},
		{"STEPGATE_MAX_STREAM_CHUNKS", func(v int64) { l.MaxStreamChunks = int(v) }},
		{"STEPGATE_MAX_STREAM_BYTES", func(v int64) { l.MaxStreamBytes = v }},
		{"STEPGATE_MAX_RUN_STREAMS", func(v int64) { l.MaxRunStreams = int(v) }},
	} {
		v, err := envInt(getenv, n.name, 0)
		if err != nil {
			return l, err
		}
		if v > 0 {
			n.to(min(v, math.MaxInt32))
		}
	}
	for _, n := range []struct {
		name string
		to   *int64
	}{
		{"STEPGATE_MAX_TENANT_RUNS", &l.MaxTenantRuns},
		{"STEPGATE_MAX_TENANT_STREAM_BYTES", &l.MaxTenantStreamBytes},
		{"STEPGATE_MAX_TENANT_MAILBOX_BYTES", &l.MaxTenantMailboxBytes},
		{"STEPGATE_MAX_TENANT_EVENT_BYTES", &l.MaxTenantEventBytes},
		{"STEPGATE_MAX_TENANT_JOURNAL_BYTES", &l.MaxTenantJournalBytes},
	} {
		v, err := envInt(getenv, n.name, 0)
		if err != nil {
			return l, err
		}
		if v > 0 {
			*n.to = v
		}
	}
	return l, nil
}

func envDuration(getenv func(string) string, name string, def time.Duration) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%s %q is not a positive duration, such as 30s", name, v)
	}
	return d, nil
}

// readMaxLag reads STEPGATE_DATABASE_READ_MAX_LAG: from 0s (every read on the primary,
// returned as -1) to readpool.MaxLagLimit; 1s when unset.
func readMaxLag(getenv func(string) string) (time.Duration, error) {
	const name = "STEPGATE_DATABASE_READ_MAX_LAG"
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return time.Second, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 || d > readpool.MaxLagLimit {
		return 0, fmt.Errorf("%s %q is not a duration from 0s to %s, such as 1s (how far behind the primary a replica of "+
			"STEPGATE_DATABASE_READ_URL may be and still serve reads; 0s sends every read to the primary)", name, v, readpool.MaxLagLimit)
	}
	if d == 0 {
		return -1, nil
	}
	return d, nil
}

// readPooler reads STEPGATE_DATABASE_POOLER (none, session or transaction; unset:
// none) and STEPGATE_DATABASE_LISTEN_URL, which only a transaction pooler takes. It
// returns gatewayproc.PoolerTransaction, or "" for no pooler or a session pooler (which
// keeps sessions: nothing changes).
func readPooler(getenv func(string) string) (pooler, listenURL string, err error) {
	listenURL = strings.TrimSpace(getenv("STEPGATE_DATABASE_LISTEN_URL"))
	switch v := strings.TrimSpace(getenv("STEPGATE_DATABASE_POOLER")); v {
	case "", "none", "session":
		if listenURL != "" {
			return "", "", errors.New("STEPGATE_DATABASE_LISTEN_URL is set but STEPGATE_DATABASE_POOLER is not transaction: the listen URL is the " +
				"direct connection of a gateway whose DATABASE_URL goes through a pooler in transaction mode; set STEPGATE_DATABASE_POOLER=transaction, or unset it")
		}
		return "", "", nil
	case gatewayproc.PoolerTransaction:
		return v, listenURL, nil
	default:
		return "", "", fmt.Errorf("STEPGATE_DATABASE_POOLER %q is not none, session or transaction (how DATABASE_URL reaches the database: "+
			"transaction for a pooler in transaction mode, such as PgBouncer's pool_mode=transaction)", v)
	}
}

// checkExecMode refuses, behind a transaction pooler, a DATABASE_URL that asks for
// named prepared statements (default_query_exec_mode=cache_statement, pgx's default
// otherwise), which a transaction pooler breaks: a statement prepared on one server
// connection is missing on the next.
func checkExecMode(databaseURL string, db *pgxpool.Config) error {
	if db.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement && strings.Contains(databaseURL, "default_query_exec_mode") {
		return errors.New("DATABASE_URL: default_query_exec_mode=cache_statement prepares named statements, which a pooler in transaction mode " +
			"(STEPGATE_DATABASE_POOLER=transaction) does not keep from one transaction to the next; leave it out (the gateway uses cache_describe) " +
			"or use cache_describe, describe_exec, exec or simple_protocol")
	}
	return nil
}

func envInt(getenv func(string) string, name string, def int64) (int64, error) {
	v := getenv(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s %q is not a positive whole number", name, v)
	}
	return n, nil
}

func (c serverConfig) validate() error {
	var missing []string
	if c.databaseURL == "" {
		missing = append(missing, "DATABASE_URL (the Postgres database, e.g. postgres://user:pass@host:5432/stepgate)")
	}
	if !c.jwt.hasKey() {
		missing = append(missing, errNoVerificationKey.Error())
	}
	if len(missing) > 0 {
		return errors.New("serve needs:\n  " + strings.Join(missing, "\n  "))
	}
	return c.validateKeys()
}

// validateKeys checks the token verification settings.
func (c serverConfig) validateKeys() error {
	_, err := c.jwt.authConfig(nil)
	return err
}

// process returns the config of the gateway process: c, with its token verification
// config made (log logs JWKS refreshes) and its database URL parsed.
func (c serverConfig) process(log *slog.Logger) (gatewayproc.Config, error) {
	db, err := pgxpool.ParseConfig(c.databaseURL)
	if err != nil {
		return gatewayproc.Config{}, fmt.Errorf("DATABASE_URL: %w", err)
	}
	db.MaxConns = c.maxConns
	var listen *pgxpool.Config
	if c.pooler != "" {
		if err := checkExecMode(c.databaseURL, db); err != nil {
			return gatewayproc.Config{}, err
		}
		if c.listenURL != "" {
			if listen, err = pgxpool.ParseConfig(c.listenURL); err != nil {
				return gatewayproc.Config{}, fmt.Errorf("STEPGATE_DATABASE_LISTEN_URL: %w", err)
			}
		}
	}
	var read *pgxpool.Config
	if c.readURL != "" {
		if read, err = pgxpool.ParseConfig(c.readURL); err != nil {
			return gatewayproc.Config{}, fmt.Errorf("STEPGATE_DATABASE_READ_URL: %w", err)
		}
	}
	authCfg, err := c.jwt.authConfig(log)
	if err != nil {
		return gatewayproc.Config{}, err
	}
	return gatewayproc.Config{
		Database: db, Pooler: c.pooler, ListenDatabase: listen, ReadDatabase: read, ReadMaxLag: c.readMaxLag, Logger: log, Addr: c.addr, PublicURL: c.publicURL, InvocationKeys: c.invocationKeys,
		Auth: authCfg, Egress: c.egress, Limits: c.limits, LeaseTTL: c.leaseTTL, DatabaseTimeout: c.databaseTimeout, MaxRecoveries: c.maxRecoveries, DuplexOff: c.duplexOff,
		DrainTimeout: c.drainTimeout, DrainSignals: []os.Signal{os.Interrupt, syscall.SIGTERM},
		MaxBodyBytes: c.maxBodyBytes, Web: web.Handler(), OperatorRole: c.operatorRole, OperatorTenant: c.operatorTenant,
		MaxWaitInvocations: c.maxWaits, MaxWaitInvocationsPerTenant: c.maxWaitsPerTenant,
		MaxStreamsPerTenant: c.maxStreamsPerTenant, MaxStreamsPerSubject: c.maxStreamsPerSubject,
		MaxSyncStartsPerTenant: c.maxSyncStartsPerTenant, MaxSyncStartsPerSubject: c.maxSyncStartsPerSubject,
		MaxHeavyReadsPerTenant: c.maxHeavyReadsPerTenant, MaxHeavyReadsPerSubject: c.maxHeavyReadsPerSubject,
		MemoryLimit: c.memoryLimit,
		PprofAddr:   c.pprofAddr, Workers: c.workers, FairReserve: c.fairReserve,
		MetricsAddr: c.metricsAddr, Metrics: c.metrics,
		Retention: c.retention, RetentionInterval: c.retentionInterval,
	}, nil
}

// newLogger returns the process's logger: JSON lines for serve (a log pipeline's
// format), text for dev (a person's).
func newLogger(w io.Writer, level slog.Level, json bool) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	if json {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// serve runs the gateway against DATABASE_URL until interrupted.
func (c *cli) serve(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	addr := fs.String("addr", "", "listen address (default $STEPGATE_ADDR or :8080)")
	if err := fs.Parse(args); err != nil {
		return errFlagsReported
	}
	sc, err := readServerConfig(c.getenv)
	if err != nil {
		return err
	}
	sc.addr = cmp.Or(*addr, sc.addr)
	if err := sc.validate(); err != nil {
		return err
	}
	log := newLogger(c.stderr, sc.logLevel, true)
	if strings.HasPrefix(strings.ToLower(sc.jwt.jwksURL), "http://") {
		log.Warn("STEPGATE_JWKS_URL is not HTTPS: whoever can alter the traffic to it can make the gateway trust their keys",
			slog.String("jwks_url", sc.jwt.jwksURL))
	}
	if sc.operatorRole != "" && sc.operatorTenant == "" {
		log.Warn("STEPGATE_OPERATOR_TENANT is unset: a token of any tenant with the role STEPGATE_OPERATOR_ROLE opens River's UI, "+
			"which shows every tenant's jobs; set it to the tenant of your platform's operators",
			slog.String("operator_role", sc.operatorRole))
	}
	warnEgress(log, sc.egress)
	pc, err := sc.process(log)
	if err != nil {
		return err
	}
	stopTraces, err := c.traces(ctx, &pc)
	if err != nil {
		return err
	}
	defer stopTraces()
	g, err := gatewayproc.Start(ctx, pc)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case err = <-g.Done():
	}
	g.Stop(context.WithoutCancel(ctx))
	return err
}

// warnEgress logs a warning for each network of STEPGATE_ALLOWED_NETWORKS and
// STEPGATE_TENANT_NETWORKS that opens loopback or a cloud metadata or link-local range
// (see egress.Policy.Warnings), naming the variable, the network and the ranges.
func warnEgress(log *slog.Logger, p egress.Policy) {
	for _, w := range (egress.Policy{AllowedNetworks: p.AllowedNetworks}).Warnings() {
		log.Warn("STEPGATE_ALLOWED_NETWORKS: " + w)
	}
	for _, w := range (egress.Policy{TenantNetworks: p.TenantNetworks}).Warnings() {
		log.Warn("STEPGATE_TENANT_NETWORKS: " + w)
	}
}

// migrate applies the migrations to DATABASE_URL.
func (c *cli) migrate(ctx context.Context, _ []string) error {
	url := c.getenv("DATABASE_URL")
	if url == "" {
		return errors.New("migrate needs DATABASE_URL")
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	fmt.Fprintln(c.stdout, "migrated")
	return nil
}

// traces turns traces on in pc when the OpenTelemetry environment asks for them (see
// tracing.FromEnv), and returns what flushes and stops them, to call after the gateway
// stops.
func (c *cli) traces(ctx context.Context, pc *gatewayproc.Config) (stop func(), err error) {
	tp, shutdown, err := tracing.FromEnv(ctx, c.getenv)
	if err != nil {
		return nil, err
	}
	if tp == nil {
		return func() {}, nil
	}
	pc.TracerProvider = tp
	if pc.TraceErrorMessages, err = readBool(c.getenv, "STEPGATE_TRACE_ERROR_MESSAGES"); err != nil {
		_ = shutdown(ctx)
		return nil, err
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			pc.Logger.Warn("flushing traces", slog.Any("error", err))
		}
	}, nil
}

// readBool reads the boolean variable name: unset or empty is false; otherwise one of
// strconv.ParseBool's forms (true, false, 1, 0, ...).
func readBool(getenv func(string) string, name string) (bool, error) {
	v := strings.TrimSpace(getenv(name))
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%s=%s: want true or false", name, v)
	}
	return b, nil
}
