package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/examples"
	"github.com/stepgate/stepgate/functions/signature"
	"github.com/stepgate/stepgate/gateway"
	"github.com/stepgate/stepgate/gateway/api"
	"github.com/stepgate/stepgate/internal/egress"
	"github.com/stepgate/stepgate/internal/pgserver"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/migrations"
	"github.com/stepgate/stepgate/web"
)

// serverConfig is what a gateway process needs, read from the environment and flags.
type serverConfig struct {
	databaseURL string
	addr        string
	publicURL   string // how functions reach this gateway, for checkpoints
	jwt         jwtConfig
	// invocationKeys key the invocation tokens (STEPGATE_INVOCATION_KEY, newest first);
	// none: the database's keys, made by the first gateway (auth.LoadInvocationTokens).
	invocationKeys [][]byte
	egress         egress.Policy // STEPGATE_ALLOWED_NETWORKS, STEPGATE_ALLOWED_FUNCTION_HOSTS
	limits         invoker.Limits
	// caps bound what one gateway holds at once: STEPGATE_MAX_WAIT_INVOCATIONS,
	// STEPGATE_MAX_WAIT_INVOCATIONS_PER_TENANT, STEPGATE_MAX_STREAMS_PER_TENANT,
	// STEPGATE_MAX_STREAMS_PER_SUBJECT.
	maxWaits, maxWaitsPerTenant, maxStreamsPerTenant, maxStreamsPerSubject int
	// operatorRole and operatorTenant say who operates the deployment (River's UI):
	// STEPGATE_OPERATOR_ROLE, STEPGATE_OPERATOR_TENANT.
	operatorRole, operatorTenant string
	// Crash recovery: STEPGATE_LEASE_TTL, STEPGATE_MAX_RECOVERIES; and how long a
	// stopping gateway lets its invocations finish, STEPGATE_DRAIN_TIMEOUT.
	leaseTTL, drainTimeout time.Duration
	maxRecoveries          int
	maxBodyBytes           int64
	maxConns               int32
	logLevel               slog.Level
	pprofAddr              string // serves net/http/pprof when set
}

// readServerConfig reads the environment variables documented in the README.
func readServerConfig(getenv func(string) string) (serverConfig, error) {
	c := serverConfig{
		databaseURL: getenv("DATABASE_URL"),
		addr:        cmp.Or(getenv("STEPGATE_ADDR"), ":8080"),
		publicURL:   getenv("STEPGATE_PUBLIC_URL"),
		pprofAddr:   getenv("STEPGATE_PPROF_ADDR"),
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
	c.operatorRole = strings.TrimSpace(getenv("STEPGATE_OPERATOR_ROLE"))
	c.operatorTenant = strings.TrimSpace(getenv("STEPGATE_OPERATOR_TENANT"))
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
	} {
		v, err := envInt(getenv, n.name, 0)
		if err != nil {
			return c, err
		}
		*n.to = int(min(v, math.MaxInt32))
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
	} {
		if *d.to, err = envDuration(getenv, d.name, d.def); err != nil {
			return c, err
		}
	}
	if c.leaseTTL < 500*time.Millisecond {
		return c, fmt.Errorf("STEPGATE_LEASE_TTL %s is shorter than 500ms: leases would lapse on a busy gateway", c.leaseTTL)
	}
	recoveries, err := envInt(getenv, "STEPGATE_MAX_RECOVERIES", 100)
	if err != nil {
		return c, err
	}
	c.maxRecoveries = int(min(recoveries, math.MaxInt32))
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
	} {
		v, err := envInt(getenv, n.name, 0)
		if err != nil {
			return l, err
		}
		if v > 0 {
			n.to(min(v, math.MaxInt32))
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

// invocationTokens returns the invocation tokens: keyed with STEPGATE_INVOCATION_KEY
// when set, else with the database's key, which the first gateway makes.
func (c serverConfig) invocationTokens(ctx context.Context, pool *pgxpool.Pool) (*auth.InvocationTokens, error) {
	if len(c.invocationKeys) > 0 {
		return auth.NewInvocationTokens(c.invocationKeys...)
	}
	return auth.LoadInvocationTokens(ctx, pool)
}

func newLogger(level slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// gatewayProcess is a running gateway: its pools, invoker and HTTP server.
type gatewayProcess struct {
	pool     *pgxpool.Pool // the system pool
	api      *pgxpool.Pool // the API pool
	keys     *auth.SigningKeys
	inv      *invoker.Invoker
	server   *gateway.Server
	verifier *auth.Verifier
	srv      *http.Server
	ln       net.Listener
	served   chan error
	log      *slog.Logger
	// endRequests ends the requests still open once the invocations are drained.
	endRequests  context.CancelFunc
	drainTimeout time.Duration
}

// startGateway connects, migrates, starts the invoker and serves HTTP on c.addr.
func startGateway(ctx context.Context, c serverConfig, log *slog.Logger) (*gatewayProcess, error) {
	pc, err := pgxpool.ParseConfig(c.databaseURL)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	pc.MaxConns = c.maxConns
	if err := migrate(ctx, pc); err != nil {
		return nil, err
	}
	pool, api, err := openPools(ctx, pc, log)
	if err != nil {
		return nil, err
	}
	g := &gatewayProcess{pool: pool, api: api, log: log, served: make(chan error, 1), drainTimeout: c.drainTimeout}
	fail := func(err error) (*gatewayProcess, error) {
		g.stop(context.WithoutCancel(ctx))
		return nil, err
	}
	g.ln, err = net.Listen("tcp", c.addr)
	if err != nil {
		return fail(fmt.Errorf("listen on %s: %w", c.addr, err))
	}
	publicURL := strings.TrimRight(cmp.Or(c.publicURL, "http://"+reachable(g.ln.Addr())), "/")
	tokens, err := c.invocationTokens(ctx, pool)
	if err != nil {
		return fail(err)
	}
	g.keys = auth.NewSigningKeys(pool)
	authCfg, err := c.jwt.authConfig(log)
	if err != nil {
		return fail(err)
	}
	verifier, err := auth.NewVerifier(authCfg)
	if err != nil {
		return fail(err)
	}
	g.verifier = verifier
	g.inv, err = invoker.New(invoker.Config{
		Pool: pool, Logger: log, CheckpointURL: publicURL, Keys: g.keys, Tokens: tokens, HTTPClient: c.egress.Client(),
		Limits: c.limits, LeaseTTL: c.leaseTTL, MaxRecoveries: c.maxRecoveries,
	})
	if err != nil {
		return fail(err)
	}
	if err := g.inv.Start(ctx); err != nil {
		return fail(err)
	}
	g.server, err = gateway.New(gateway.Config{
		Pool: pool, APIPool: api, Invoker: g.inv, Verifier: verifier, Tokens: tokens, Logger: log,
		Keys: g.keys, Egress: c.egress, MaxBodyBytes: c.maxBodyBytes, Web: web.Handler(),
		OperatorRole: c.operatorRole, OperatorTenant: c.operatorTenant,
		MaxWaitInvocations: c.maxWaits, MaxWaitInvocationsPerTenant: c.maxWaitsPerTenant,
		MaxStreamsPerTenant: c.maxStreamsPerTenant, MaxStreamsPerSubject: c.maxStreamsPerSubject,
	})
	if err != nil {
		return fail(err)
	}
	requests, endRequests := context.WithCancel(context.WithoutCancel(ctx))
	g.endRequests = endRequests
	g.srv = &http.Server{Handler: g.server.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return requests }}
	go func() { g.served <- g.srv.Serve(g.ln) }()
	if c.pprofAddr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		go func() {
			err := http.ListenAndServe(c.pprofAddr, mux)
			log.Warn("pprof server stopped", slog.Any("error", err))
		}()
	}
	log.Info("gateway serving", slog.String("addr", g.ln.Addr().String()), slog.String("public_url", publicURL))
	return g, nil
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

// openPools opens the gateway's two pools, which share pc.MaxConns: the system pool
// (the invoker, River and checkpoints, which see every tenant) and the API pool (one
// tenant per transaction, through journal.ForTenant). It fails when the database user
// may not act as their roles, and warns when row-level security does not apply to them.
func openPools(ctx context.Context, pc *pgxpool.Config, log *slog.Logger) (system, api *pgxpool.Pool, err error) {
	sc, ac := pc.Copy(), pc.Copy()
	ac.MaxConns = max(pc.MaxConns/2, 2)
	sc.MaxConns = max(pc.MaxConns-ac.MaxConns, 2)
	journal.ConfigurePool(sc, true)
	journal.ConfigurePool(ac, false)
	if system, err = pgxpool.NewWithConfig(ctx, sc); err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	if api, err = pgxpool.NewWithConfig(ctx, ac); err != nil {
		system.Close()
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	for _, p := range []struct {
		pool *pgxpool.Pool
		role string
	}{{system, journal.SystemRole}, {api, journal.AppRole}} {
		fence, err := journal.CheckFence(ctx, p.pool)
		switch {
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

// reachable turns a listener's address into one a local client can dial (":8080"
// listens on every interface; dial 127.0.0.1:8080).
func reachable(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok || ta.IP.IsUnspecified() {
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(ta.Port))
	}
	return ta.String()
}

// stop drains the gateway, then shuts it down. Draining: the gateway takes no new runs
// and reports itself not ready, River fetches no more jobs, and the invocations in
// flight go on, their checkpoints served, until drainTimeout (or a second interrupt);
// the rest are handed over to the other gateways. Then the requests still open end (a
// caller waiting for a run is answered its status), the HTTP server closes, River and
// the listener stop, and the pools close.
func (g *gatewayProcess) stop(ctx context.Context) {
	if g.server != nil {
		g.server.Drain()
	}
	if g.inv != nil {
		if n := g.inv.InFlight(); n > 0 {
			g.log.Info("draining: waiting for the invocations in flight to finish; interrupt again to hand them over at once",
				slog.Int("invocations", n), slog.Duration("drain_timeout", g.drainTimeout))
		}
		drainCtx, cancel := context.WithTimeout(ctx, g.drainTimeout)
		drainCtx, stopSignals := signal.NotifyContext(drainCtx, os.Interrupt, syscall.SIGTERM)
		n, err := g.inv.Drain(drainCtx)
		stopSignals()
		cancel()
		switch {
		case err != nil:
			g.log.Warn("draining: could not hand the invocations over; their leases lapse and other gateways take them", slog.Any("error", err))
		case n > 0:
			g.log.Info("draining: handed invocations over to the other gateways", slog.Int("invocations", n))
		}
	}
	if g.endRequests != nil {
		g.endRequests()
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if g.srv != nil {
		if err := g.srv.Shutdown(ctx); err != nil {
			g.log.Warn("http shutdown", slog.Any("error", err))
			g.srv.Close()
		}
	} else if g.ln != nil {
		g.ln.Close()
	}
	if g.inv != nil {
		if err := g.inv.Stop(ctx); err != nil {
			g.log.Warn("invoker stop", slog.Any("error", err))
		}
	}
	if g.verifier != nil {
		g.verifier.Close()
	}
	g.api.Close()
	g.pool.Close()
}

// cmdServe runs the gateway against DATABASE_URL until interrupted.
func cmdServe(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	addr := fs.String("addr", "", "listen address (default $STEPGATE_ADDR or :8080)")
	if err := fs.Parse(args); err != nil {
		return errFlagsReported
	}
	c, err := readServerConfig(os.Getenv)
	if err != nil {
		return err
	}
	c.addr = cmp.Or(*addr, c.addr)
	if err := c.validate(); err != nil {
		return err
	}
	log := newLogger(c.logLevel)
	if strings.HasPrefix(strings.ToLower(c.jwt.jwksURL), "http://") {
		log.Warn("STEPGATE_JWKS_URL is not HTTPS: whoever can alter the traffic to it can make the gateway trust their keys",
			slog.String("jwks_url", c.jwt.jwksURL))
	}
	g, err := startGateway(ctx, c, log)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case err = <-g.served:
	}
	g.stop(context.WithoutCancel(ctx))
	return err
}

// cmdMigrate applies the migrations to DATABASE_URL.
func cmdMigrate(ctx context.Context, args []string) error {
	url := os.Getenv("DATABASE_URL")
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
	fmt.Println("migrated")
	return nil
}

// devState is what `stepgate dev` keeps in .stepgate/dev.json across restarts, so its
// tokens stay valid and `stepgate token create` can sign with the same key.
type devState struct {
	JWTSecret string `json:"jwt_secret"`
}

func loadDevState(dir string) (devState, error) {
	path := filepath.Join(dir, "dev.json")
	st, err := loadDevStateFile(path)
	if !errors.Is(err, os.ErrNotExist) {
		return st, err
	}
	st = devState{JWTSecret: randomKey()}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return st, err
	}
	b, _ := json.MarshalIndent(st, "", "  ")
	return st, os.WriteFile(path, b, 0o600)
}

func loadDevStateFile(path string) (devState, error) {
	var st devState
	b, err := os.ReadFile(path)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s: %w (delete it to start afresh)", path, err)
	}
	return st, nil
}

func randomKey() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// devTokenTTL is how long the token `stepgate dev` prints lasts; devOperatorRole is the
// operator role of a dev instance (its token carries it).
const (
	devTokenTTL     = 30 * 24 * time.Hour
	devOperatorRole = "stepgate-operator"
)

// cmdDev runs the gateway, the dashboard and the example functions on a private Postgres
// in ./.stepgate (or DATABASE_URL), with generated keys and a printed dev token.
func cmdDev(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "gateway listen address")
	fnAddr := fs.String("functions-addr", "127.0.0.1:0", "listen address of the example functions")
	dir := fs.String("dir", ".stepgate", "where dev keeps its Postgres data and keys")
	if err := fs.Parse(args); err != nil {
		return errFlagsReported
	}
	c, err := readServerConfig(os.Getenv)
	if err != nil {
		return err
	}
	c.addr = *addr
	log := newLogger(c.logLevel)
	st, err := loadDevState(*dir)
	if err != nil {
		return err
	}
	if len(c.jwt.secrets) == 0 {
		c.jwt.secrets = [][]byte{[]byte(st.JWTSecret)}
	}
	// On a dev instance one developer is the tenant and the operator, with a token
	// that lasts the session.
	c.jwt.defaultTenant = cmp.Or(c.jwt.defaultTenant, auth.DefaultTenant)
	c.jwt.maxLifetime = cmp.Or(c.jwt.maxLifetime, devTokenTTL+time.Hour)
	c.operatorRole = cmp.Or(c.operatorRole, devOperatorRole)
	if err := c.validateKeys(); err != nil {
		return err
	}
	// On a dev instance the functions run on this machine.
	c.egress.AllowedNetworks = append(c.egress.AllowedNetworks, netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"))
	if c.databaseURL == "" {
		pg, err := pgserver.Start(ctx, pgserver.Config{Dir: filepath.Join(*dir, "pg"), Logger: log})
		if err != nil {
			return fmt.Errorf("start private postgres: %w", err)
		}
		defer pg.Stop()
		if err := createDatabase(ctx, pg.URL("postgres"), "stepgate"); err != nil {
			return err
		}
		c.databaseURL = pg.URL("stepgate")
	}

	// The example functions: their own HTTP server, as a real app would be. They trust
	// every tenant of this instance (keys is set once the gateway runs, before it can
	// call them), so syncing them under a second tenant works too.
	var keys atomic.Pointer[auth.SigningKeys]
	app := functions.New(functions.Config{Logger: log, Keys: func(ctx context.Context, tenant string, refresh bool) (signature.Keys, error) {
		if k := keys.Load(); k != nil {
			return k.Verification(ctx, tenant, refresh)
		}
		return signature.Keys{}, nil
	}})
	examples.Register(app)
	fnLn, err := net.Listen("tcp", *fnAddr)
	if err != nil {
		return fmt.Errorf("listen for the example functions on %s: %w", *fnAddr, err)
	}
	fnSrv := &http.Server{Handler: app, ReadHeaderTimeout: 10 * time.Second}
	go fnSrv.Serve(fnLn)
	defer fnSrv.Close()

	g, err := startGateway(ctx, c, log)
	if err != nil {
		return err
	}
	defer g.stop(context.WithoutCancel(ctx))
	keys.Store(g.keys)

	authCfg, err := c.jwt.authConfig(log)
	if err != nil {
		return err
	}
	token, err := authCfg.NewToken(auth.Identity{Subject: "dev", Tenant: auth.DefaultTenant, Roles: []string{"admin", c.operatorRole}}, devTokenTTL)
	if err != nil {
		return err
	}
	base := "http://" + reachable(g.ln.Addr())
	appURL := "http://" + reachable(fnLn.Addr()) + "/"
	names, err := syncApp(ctx, base, token, appURL)
	if err != nil {
		return fmt.Errorf("register the example functions: %w", err)
	}
	devKeys, err := g.keys.Keys(ctx, auth.DefaultTenant)
	if err != nil {
		return err
	}
	var publicKeys []string
	for _, k := range devKeys {
		publicKeys = append(publicKeys, signature.FormatKey(k.PublicKey))
	}
	fmt.Printf(`
stepgate dev is running
  dashboard   %[1]s/#token=%[4]s
  API         %[1]s/v1
  functions   %[2]s (served at %[3]s)
  database    %[6]s

STEPGATE_TOKEN=%[4]s
STEPGATE_PUBLIC_KEYS=%[5]s   (your own functions verify requests with it)

Try it:
  curl -s -X POST '%[1]s/v1/functions/orders.checkout/runs?wait=30s' -H 'Authorization: Bearer %[4]s' -H 'Content-Type: application/json' -d '{"item":"book"}'

Then read the run's journal:
  export STEPGATE_URL=%[1]s STEPGATE_TOKEN=%[4]s
  go run ./cmd/stepgate runs list
  go run ./cmd/stepgate runs get <run id>

Press Ctrl+C to stop.
`, base, strings.Join(names, ", "), appURL, token, strings.Join(publicKeys, ","), c.databaseURL)
	select {
	case <-ctx.Done():
		return nil
	case err := <-g.served:
		return err
	}
}

// createDatabase creates name on the server at adminURL unless it exists.
func createDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to private postgres: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("look for database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// syncApp registers every function of the app at appURL through the gateway's API.
func syncApp(ctx context.Context, baseURL, token, appURL string) ([]string, error) {
	client, err := api.NewClientWithResponses(baseURL, api.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	}))
	if err != nil {
		return nil, err
	}
	resp, err := client.SyncAppWithResponse(ctx, api.AppSync{Url: appURL})
	if err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode(), resp.Body)
	}
	var names []string
	for _, f := range resp.JSON200.Functions {
		names = append(names, f.Name)
	}
	return names, nil
}
