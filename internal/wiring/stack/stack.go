// Package stack starts a whole stepgate gateway for tests: a fresh migrated database,
// the invoker with its River client, and the HTTP server on a real loopback port, wired
// by internal/wiring/gatewayproc as `stepgate serve` wires them; with helpers to mint tokens,
// serve function apps and call the API through the generated client. Everything stops
// when the test ends.
package stack

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/examples"
	"github.com/stepgate/stepgate/gateway"
	"github.com/stepgate/stepgate/internal/helpers/egress"
	"github.com/stepgate/stepgate/internal/helpers/metrics"
	"github.com/stepgate/stepgate/internal/helpers/readpool"
	"github.com/stepgate/stepgate/internal/wiring/gatewayproc"
	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/ndjson"
	"github.com/stepgate/stepgate/web"
)

// Stack is a running gateway.
type Stack struct {
	URL string // The gateway's base URL.
	// Pool is the gateway's system pool: it acts as journal.SystemRole and sees every
	// tenant. APIPool is its API pool: it sees a tenant only through journal.ForTenant.
	Pool      *pgxpool.Pool
	APIPool   *pgxpool.Pool
	Invoker   *invoker.Invoker
	Server    *gateway.Server
	JWTSecret []byte
	// Keys are the tenants' signing keys, kept in the database as the gateway keeps
	// them. Tokens are the invocation tokens, keyed with the database's key.
	Keys   *auth.SigningKeys
	Tokens *auth.InvocationTokens
	// Auth is the gateway's token verification config; NewToken signs with it.
	Auth auth.Config
	// Token is a token of the default tenant with the admin role and OperatorRole, as
	// the one `stepgate dev` prints: on a dev instance the developer is the operator.
	Token string
	// Reads picks the pool of the reads that may be a little stale; nil without
	// Options.ReadDatabaseURL.
	Reads *readpool.Reads
	// MetricsAddr is the metrics' own listener (Options.MetricsAddr); nil without one.
	MetricsAddr net.Addr
}

// Options change a Stack; zero values keep the gateway's defaults.
type Options struct {
	MaxBodyBytes int64
	// DatabaseTimeout: see gatewayproc.Config.DatabaseTimeout.
	DatabaseTimeout time.Duration
	// Crash recovery: see the invoker.Config fields of the same names.
	LeaseTTL         time.Duration
	MaintainInterval time.Duration
	SweepGrace       time.Duration
	MaxRecoveries    int
	// River's workers and the fair share of them: see the invoker.Config fields of the
	// same names.
	Workers, FairReserve int
	// Retention and RetentionInterval: see the invoker.Config fields of the same names.
	Retention, RetentionInterval time.Duration
	// Clock is the invoker's clock (invoker.Config.Clock): a test under invoker/ passes
	// a test clock it advances by hand. Nil: the system clock.
	Clock invoker.Clock
	// DatabaseURL shares a database with another Stack (two gateways); empty makes a
	// new one. It must be migrated already, as pgtest.DBURL's are.
	DatabaseURL string
	// Auth configures token verification. Its Secrets default to JWTSecret, so
	// Token and NewToken keep working when only keys, issuer or claims are added.
	Auth auth.Config
	// Gateway, when set, changes the gateway's config before it starts.
	Gateway func(*gateway.Config)
	// Egress says which addresses the gateway dials; nil: Loopback.
	Egress *egress.Policy
	// Limits bound functions and runs. MinBackoff defaults to 1ms here, so tests may
	// retry fast; the rest keep the gateway's defaults.
	Limits invoker.Limits
	// Metrics and MetricsAddr: see the gatewayproc.Config fields of the same names.
	Metrics     metrics.Config
	MetricsAddr string
	// TracerProvider: see the gatewayproc.Config field of that name.
	TracerProvider trace.TracerProvider
	// TraceErrorMessages: see the gatewayproc.Config field of that name.
	TraceErrorMessages bool
	// ReadDatabaseURL, when set, names streaming standbys of the database for the reads
	// that may be a little stale, within ReadMaxLag (default 1s): see the
	// gatewayproc.Config fields ReadDatabase and ReadMaxLag.
	ReadDatabaseURL string
	ReadMaxLag      time.Duration
	// Logs, when set, also gets every log line of the gateway, as JSON, from the debug
	// level up: what `stepgate serve` would write.
	Logs io.Writer
	// Database, when set, changes the gateway's database config before it connects:
	// a test sets a tracer that sees every statement of the gateway's connections (its
	// pools' and its listener's), or a hook on them.
	Database func(*pgxpool.Config)
}

// Start starts a gateway for the test, wired as `stepgate serve` wires one
// (gatewayproc.Start), with a test's choices: small pools, logs to tb.Log, the
// Loopback egress policy, a fixed JWT secret. It stops, draining first, when the test
// ends; a test may drain or stop its Invoker itself before that.
func Start(tb testing.TB, opts Options) *Stack {
	tb.Helper()
	url := opts.DatabaseURL
	if url == "" {
		url = pgtest.DBURL(tb)
	}
	db, err := pgxpool.ParseConfig(url)
	if err != nil {
		tb.Fatal(err)
	}
	// Small pools: test packages run side by side on one Postgres (max_connections 100).
	db.MaxConns = 7
	if opts.Database != nil {
		opts.Database(db)
	}
	log := testLogger(tb)
	if opts.Logs != nil {
		log = slog.New(slog.NewMultiHandler(log.Handler(), slog.NewJSONHandler(opts.Logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	}
	s := &Stack{JWTSecret: []byte("test-jwt-secret-0123456789abcdef0123456789")}
	s.Auth = opts.Auth
	if len(s.Auth.Secrets) == 0 {
		s.Auth.Secrets = [][]byte{s.JWTSecret}
	}
	s.Auth.Logger = cmp.Or(s.Auth.Logger, log)
	policy := Loopback
	if opts.Egress != nil {
		policy = *opts.Egress
	}
	limits := opts.Limits
	limits.MinBackoff = cmp.Or(limits.MinBackoff, time.Millisecond)
	var read *pgxpool.Config
	if opts.ReadDatabaseURL != "" {
		if read, err = pgxpool.ParseConfig(opts.ReadDatabaseURL); err != nil {
			tb.Fatal(err)
		}
	}
	p, err := gatewayproc.Start(tb.Context(), gatewayproc.Config{
		Database: db, ReadDatabase: read, ReadMaxLag: opts.ReadMaxLag, APIMaxConns: 2, Migrated: true, Logger: log, Addr: "127.0.0.1:0",
		Auth: s.Auth, Egress: policy, Limits: limits,
		LeaseTTL: opts.LeaseTTL, MaintainInterval: opts.MaintainInterval, SweepGrace: opts.SweepGrace, DatabaseTimeout: opts.DatabaseTimeout,
		MaxRecoveries: opts.MaxRecoveries, DrainTimeout: 10 * time.Second, Workers: opts.Workers, FairReserve: opts.FairReserve,
		Retention: opts.Retention, RetentionInterval: opts.RetentionInterval,
		MaxBodyBytes: opts.MaxBodyBytes, Web: web.Handler(), OperatorRole: OperatorRole, Gateway: opts.Gateway,
		Metrics: opts.Metrics, MetricsAddr: opts.MetricsAddr, TracerProvider: opts.TracerProvider,
		TraceErrorMessages: opts.TraceErrorMessages, Clock: opts.Clock,
	})
	if err != nil {
		tb.Fatal(err)
	}
	// Registered after the database's and the logger's cleanups, so it runs before them.
	tb.Cleanup(func() { p.Stop(context.Background()) })
	s.URL, s.Pool, s.APIPool, s.Invoker, s.Server, s.Keys, s.Tokens = p.URL, p.Pool, p.APIPool, p.Invoker, p.Server, p.Keys, p.Tokens
	s.MetricsAddr, s.Reads = p.MetricsAddr, p.Reads
	s.Token = s.NewToken(tb, auth.Identity{Subject: "tester", Tenant: auth.DefaultTenant, Roles: []string{"admin", OperatorRole}})
	return s
}

// NewToken signs an HS256 token for id with the gateway's first secret, issuer and
// audience, valid for an hour.
func (s *Stack) NewToken(tb testing.TB, id auth.Identity) string {
	tb.Helper()
	tok, err := s.Auth.NewToken(id, time.Hour)
	if err != nil {
		tb.Fatal(err)
	}
	return tok
}

// Client returns a generated API client that sends token.
func (s *Stack) Client(tb testing.TB, token string) *protocol.ClientWithResponses {
	tb.Helper()
	c, err := protocol.NewClientWithResponses(s.URL, protocol.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	}))
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// AwaitStatus polls run id through c until it has status, for states no request waits
// on, and returns the run; it fails the test, with the status seen, after 30 s.
func AwaitStatus(t *testing.T, c *protocol.ClientWithResponses, id string, status protocol.RunStatus) protocol.RunDetail {
	t.Helper()
	var run protocol.RunDetail
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		resp, err := c.GetRunWithResponse(t.Context(), id, nil)
		if assert.NoError(ct, err) && assert.NotNil(ct, resp.JSON200, "%d %s", resp.StatusCode(), resp.Body) {
			run = *resp.JSON200
			assert.Equal(ct, status, run.Status)
		}
	}, 30*time.Second, 5*time.Millisecond, "run %s never became %s", id, status)
	return run
}

// ServeApp serves a function app on a loopback port for the test and returns its URL,
// ending in "/".
func (s *Stack) ServeApp(tb testing.TB, h http.Handler) string {
	tb.Helper()
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return srv.URL + "/"
}

// OperatorRole is the role of the deployment's operators in a Stack, who alone open
// River's UI.
const OperatorRole = "stepgate-operator"

// Loopback is the egress policy of a Stack: the public internet and loopback, where
// tests serve their functions, whose failures runs show whole (as `stepgate dev`
// does), as for functions on the public internet.
var Loopback = egress.Policy{
	AllowedNetworks:    []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")},
	PrivateErrorDetail: true,
}

// PrivateLoopback is the production shape of Loopback: loopback is opened as an
// operator opens a private network, and runs show a failure of a function there by
// its HTTP status and size only.
var PrivateLoopback = egress.Policy{AllowedNetworks: Loopback.AllowedNetworks}

// NewApp returns an SDK app that verifies this gateway's signatures with the public
// keys of the tenant each request names, as `stepgate dev`'s example app does.
func (s *Stack) NewApp() *functions.App {
	return functions.New(functions.Config{Keys: s.Keys.Verification})
}

// NewRequestApp is NewApp for an app whose manifest lists the request/response mode
// only (functions.Config.RequestResponseOnly): for tests of that mode's checkpoint URL,
// token and claim.
func (s *Stack) NewRequestApp() *functions.App {
	return functions.New(functions.Config{Keys: s.Keys.Verification, RequestResponseOnly: true})
}

// SyncExamples serves the example functions and registers them with the admin token.
func (s *Stack) SyncExamples(tb testing.TB) {
	tb.Helper()
	app := s.NewApp()
	examples.Register(app)
	s.Sync(tb, s.ServeApp(tb, app))
}

// Sync registers every function of the app at appURL.
func (s *Stack) Sync(tb testing.TB, appURL string) {
	tb.Helper()
	resp, err := s.Client(tb, s.Token).SyncAppWithResponse(tb.Context(), nil, protocol.AppSync{URL: appURL})
	if err != nil {
		tb.Fatal(err)
	}
	if resp.JSON200 == nil {
		tb.Fatalf("sync %s: HTTP %d: %s", appURL, resp.StatusCode(), resp.Body)
	}
}

// PeekInvocation returns the invocation request r carries, for a test's handler that
// looks at it before the function's: the whole body of a request/response invocation,
// the first line of a duplex one (application/x-ndjson), whose acknowledgements follow.
// r.Body is left to give the same bytes again, then the rest of the exchange.
func PeekInvocation(r *http.Request) ([]byte, error) {
	if !ndjson.Is(r.Header.Get("Content-Type")) {
		body, err := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		return body, err
	}
	br := bufio.NewReader(r.Body)
	line, err := br.ReadBytes('\n')
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(line), br), r.Body}
	return bytes.TrimSuffix(line, []byte{'\n'}), err
}
