// Package gateway is stepgate's HTTP server: the public API generated from openapi.yaml
// (functions, apps, runs), the checkpoint endpoint functions call while they run, and
// the dashboard. It authenticates every /v1 request, scopes it to the caller's tenant,
// and hands runs to the invoker.
package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"go.opentelemetry.io/otel/trace"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/internal/helpers/egress"
	"github.com/stepgate/stepgate/internal/helpers/memlimit"
	"github.com/stepgate/stepgate/internal/helpers/notify"
	"github.com/stepgate/stepgate/internal/helpers/readpool"
	"github.com/stepgate/stepgate/internal/helpers/tracing"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/storable"
	"github.com/stepgate/stepgate/protocol"
)

// Config configures a Server.
type Config struct {
	// Pool is the system pool (journal.ConfigurePool with system): it sees every
	// tenant, for work scoped by other means (checkpoints: their invocation token).
	// Required.
	Pool *pgxpool.Pool
	// APIPool is the API pool (journal.ConfigurePool without system): it sees no
	// tenant but through journal.ForTenant, which everything done for a caller uses.
	// Required.
	APIPool *pgxpool.Pool
	Invoker *invoker.Invoker // Required, started.
	// Reads, when set, serves the reads that may be a little stale (lists, stats, a
	// run's detail and journal: see read) from replicas within its bound, on pools
	// configured as APIPool is; nil: every read is on APIPool.
	Reads *readpool.Reads
	// TracerProvider, the invoker's too, when set, traces each start request in its
	// run's trace and accepts callers' traceparent headers as links.
	TracerProvider trace.TracerProvider
	Verifier       *auth.Verifier         // Required: checks callers' JWTs.
	Tokens         *auth.InvocationTokens // Required: checks checkpoints' invocation tokens.
	Logger         *slog.Logger           // Required.
	// Keys sign the manifest requests of app syncs with the caller's tenant's keys, and
	// hand out the tenants' public keys. Required.
	Keys *auth.SigningKeys
	// MaxBodyBytes bounds request bodies (run inputs, checkpoints); larger ones get a
	// 413. Defaults to 1 MiB.
	MaxBodyBytes int64
	// Web serves the dashboard at /. Optional.
	Web http.Handler
	// OperatorRole is the role of the deployment's operators, who alone may open
	// River's UI (it shows every tenant's jobs). No tenant role grants it; choose one
	// your identity provider gives operators only. Empty: nobody may.
	OperatorRole string
	// OperatorTenant, when set, counts OperatorRole only in tokens of this tenant.
	OperatorTenant string
	// MaxWaitInvocations bounds the runs started with ?wait that this gateway invokes
	// itself at once, in all; MaxWaitInvocationsPerTenant, per tenant. Past them a run
	// is queued for any gateway's workers, and the request still waits for its result.
	// Default to 1,000 and 200.
	MaxWaitInvocations, MaxWaitInvocationsPerTenant int
	// MaxStreamsPerTenant bounds the live streams (GET /v1/runs/stream, a run's stream)
	// and long-polls (a run's result or value with ?wait) one tenant holds open on this
	// gateway, counted together; MaxStreamsPerSubject, those of one subject of a tenant.
	// Past them a request is a 429 with Retry-After. Default to 100 and 10.
	MaxStreamsPerTenant, MaxStreamsPerSubject int
	// MaxSyncStartsPerTenant bounds the starts with ?wait (POST /v1/functions/{name}/runs)
	// one tenant holds open on this gateway, waiting for their runs' results;
	// MaxSyncStartsPerSubject, those of one subject of a tenant. They are caps of their
	// own, not the streams': a sync start is how a service calls a function, many at
	// once with one token. Past them a start is a 429 with Retry-After and creates no
	// run. Default to 200 and 100.
	MaxSyncStartsPerTenant, MaxSyncStartsPerSubject int
	// MaxHeavyReadsPerTenant bounds the heavy reads (heavyRead: exports, deploy checks,
	// the failures view, event lists, run lists with include_io) one tenant runs at once
	// on this gateway; MaxHeavyReadsPerSubject, those of one subject of a tenant. Past
	// them a request is a 429 with Retry-After. Default to 8 and 2.
	MaxHeavyReadsPerTenant, MaxHeavyReadsPerSubject int
	// MemoryLimit is the process's soft memory limit in bytes (memlimit): while the
	// live heap is near it, heavy reads are refused 503 with Retry-After. Zero: the
	// runtime's limit (GOMEMLIMIT, or none).
	MemoryLimit int64
	// Egress says which function and app URLs each tenant may register, which
	// addresses the manifest requests may dial, and how much of their failures a tenant
	// is told. Its zero value allows the public internet only.
	Egress egress.Policy
	// Metrics, when set, are served at GET /metrics to operators (see mountMetrics).
	Metrics http.Handler
	// MaxCheckBytes bounds what one check of an app against live runs
	// (POST /v1/apps?check=true) sends in all: the bytes of the replayed runs' inputs
	// and journal entries (invoker.CheckBudget). Defaults to DefaultMaxCheckBytes.
	MaxCheckBytes int64
}

// Server is the gateway's HTTP server. It implements server.StrictServerInterface.
type Server struct {
	pool     *pgxpool.Pool   // the system pool
	api      *pgxpool.Pool   // the API pool: use it through tenantDB
	reads    *readpool.Reads // nil: no replicas; use it through read
	inv      *invoker.Invoker
	verifier *auth.Verifier
	tokens   *auth.InvocationTokens
	log      *slog.Logger
	keys     *auth.SigningKeys
	egress   egress.Policy
	tracer   trace.Tracer // nil: traces are off
	// operatorRole and operatorTenant say who may open River's UI (see operates).
	operatorRole, operatorTenant string
	waits                        *slots          // synchronous invocations, by tenant
	tenantStreams                *slots          // live streams and long-polls, by tenant
	subjectStreams               *slots          // live streams and long-polls, by tenant and subject
	tenantSyncStarts             *slots          // starts with ?wait waiting, by tenant
	subjectSyncStarts            *slots          // starts with ?wait waiting, by tenant and subject
	tenantHeavyReads             *slots          // heavy reads running, by tenant
	subjectHeavyReads            *slots          // heavy reads running, by tenant and subject
	memoryLimit                  int64           // see Config.MemoryLimit
	clients                      *egress.Clients // fetch manifests, each tenant with its own policy
	checkBytes                   int64           // Config.MaxCheckBytes
	echo                         *echo.Echo
	stream                       *notify.Hub
	draining                     atomic.Bool // see Drain

	shutdownMu sync.Mutex
	shutdowns  map[*http.Server]chan struct{} // see shutdownOf
}

// Drain makes the gateway refuse new runs (503 with Retry-After, so a client or load
// balancer tries another gateway) and report itself not ready (GET /healthz answers
// 503), while it goes on serving everything else: the checkpoints and answers of the
// invocations it has in flight, reads, streams. Call it when the process is asked to
// stop, before invoker.Invoker.Drain.
func (s *Server) Drain() { s.draining.Store(true) }

// errDraining refuses a new run on a gateway that is stopping.
var errDraining = &unavailableError{"this gateway is shutting down and takes no new runs; retry, and another gateway takes it"}

var _ server.StrictServerInterface = (*Server)(nil)

// New returns a Server; serve it with Handler.
func New(cfg Config) (*Server, error) {
	if cfg.Pool == nil || cfg.Invoker == nil || cfg.Verifier == nil || cfg.Tokens == nil || cfg.Logger == nil || cfg.Keys == nil {
		return nil, errors.New("gateway: Pool, Invoker, Verifier, Tokens, Logger and Keys are required")
	}
	if cfg.APIPool == nil {
		return nil, errors.New("gateway: APIPool is required")
	}
	s := &Server{
		pool:              cfg.Pool,
		api:               cfg.APIPool,
		reads:             cfg.Reads,
		inv:               cfg.Invoker,
		verifier:          cfg.Verifier,
		tokens:            cfg.Tokens,
		log:               cfg.Logger,
		keys:              cfg.Keys,
		egress:            cfg.Egress,
		operatorRole:      cfg.OperatorRole,
		operatorTenant:    cfg.OperatorTenant,
		waits:             newSlots(cmp.Or(cfg.MaxWaitInvocations, 1000), cmp.Or(cfg.MaxWaitInvocationsPerTenant, 200)),
		tenantStreams:     newSlots(0, cmp.Or(cfg.MaxStreamsPerTenant, 100)),
		subjectStreams:    newSlots(0, cmp.Or(cfg.MaxStreamsPerSubject, 10)),
		tenantSyncStarts:  newSlots(0, cmp.Or(cfg.MaxSyncStartsPerTenant, 200)),
		subjectSyncStarts: newSlots(0, cmp.Or(cfg.MaxSyncStartsPerSubject, 100)),
		tenantHeavyReads:  newSlots(0, cmp.Or(cfg.MaxHeavyReadsPerTenant, 8)),
		subjectHeavyReads: newSlots(0, cmp.Or(cfg.MaxHeavyReadsPerSubject, 2)),
		memoryLimit:       cmp.Or(cfg.MemoryLimit, memlimit.Current()),
		clients:           cfg.Egress.Clients(),
		checkBytes:        cmp.Or(cfg.MaxCheckBytes, DefaultMaxCheckBytes),
		shutdowns:         map[*http.Server]chan struct{}{},
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.Binder = jsonBinder{}
	e.Pre(streamToken)
	e.Use(middleware.Recover())
	e.Use(checkParams)
	e.Use(bodyLimits(cmp.Or(cfg.MaxBodyBytes, 1<<20), int64(cfg.Invoker.Limits().MaxOutputBytes)+64<<10))
	e.Use(s.authenticate)
	if cfg.TracerProvider != nil {
		s.tracer = cfg.TracerProvider.Tracer(tracing.Name)
		e.Use(acceptTraceparent)
	}
	server.RegisterHandlers(e, server.NewStrictHandler(s, []server.StrictMiddlewareFunc{authorize}))
	s.stream = notify.NewHub(cfg.Invoker.Listener(), cfg.Pool, cfg.Logger, encodeEvent)
	if err := s.mountRiverUI(e, cfg.Invoker); err != nil {
		return nil, err
	}
	if cfg.Metrics != nil {
		s.mountMetrics(e, cfg.Metrics)
	}
	if cfg.Web != nil {
		web := echo.WrapHandler(cfg.Web)
		e.GET("/*", func(c echo.Context) error {
			if strings.HasPrefix(c.Request().URL.Path, "/v1/") {
				return echo.ErrNotFound // an unknown API path gets a problem, not a page
			}
			return web(c)
		})
	}
	s.echo = e
	return s, nil
}

// bodyLimits bounds request bodies: a checkpoint's by the largest entry output (plus room
// for the rest of the entry), every other by limit. A larger body is a 413.
func bodyLimits(limit, checkpoint int64) echo.MiddlewareFunc {
	api := middleware.BodyLimit(fmt.Sprintf("%dB", limit))
	cp := middleware.BodyLimit(fmt.Sprintf("%dB", checkpoint))
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		apiNext, cpNext := api(next), cp(next)
		return func(c echo.Context) error {
			if isCheckpoint(c.Path()) {
				return cpNext(c)
			}
			return apiNext(c)
		}
	}
}

// Handler returns the HTTP handler of the whole gateway.
func (s *Server) Handler() http.Handler { return s.echo }

// tokenPaths are the routes whose path holds their credential, a callback's token: they
// take no bearer token (a third party with no account calls them), and the token
// scopes them to one callback of one run.
var tokenPaths = map[string]bool{"/v1/callbacks/:token": true, "/v1/callbacks/:token/reject": true}

// loggedPath is the request's path for the logs: a callback's token, a credential, is
// masked.
func loggedPath(c echo.Context) string {
	if tokenPaths[c.Path()] {
		return strings.Replace(c.Request().URL.Path, c.Param("token"), journal.MaskedToken, 1)
	}
	return c.Request().URL.Path
}

type invocationKey struct{}

// isCheckpoint reports whether the route path is one an invocation calls with its
// invocation token: the checkpoint and its stream writes.
func isCheckpoint(path string) bool {
	return path == "/v1/runs/:id/checkpoint" || path == "/v1/runs/:id/checkpoint/stream" || path == "/v1/runs/:id/checkpoint/current"
}

type invocationClaim struct {
	runID      string
	invocation int
}

// authenticate checks the bearer token of every /v1 request but the callback token
// routes (tokenPaths): a user JWT, or for the checkpoint endpoint an invocation token. The identity goes into the request context;
// authorize then checks the operation's permission.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		path := c.Path()
		if !strings.HasPrefix(path, "/v1/") || tokenPaths[path] {
			return next(c)
		}
		token, err := auth.BearerToken(c.Request().Header.Get(echo.HeaderAuthorization))
		if err != nil {
			return err
		}
		ctx := c.Request().Context()
		if isCheckpoint(path) {
			runID, invocation, err := s.tokens.Verify(ctx, token, time.Now())
			if err != nil {
				return err
			}
			ctx = context.WithValue(ctx, invocationKey{}, invocationClaim{runID, invocation})
		} else {
			id, exp, err := s.verifier.Check(ctx, token)
			if err != nil {
				return err
			}
			ctx = auth.WithExpiry(auth.WithIdentity(ctx, id), exp)
		}
		c.SetRequest(c.Request().WithContext(ctx))
		return next(c)
	}
}

// identity returns the caller's identity; the authenticate middleware guarantees one on
// every /v1 route but the checkpoint.
func identity(ctx context.Context) auth.Identity {
	id, ok := auth.IdentityFrom(ctx)
	if !ok {
		panic("gateway: no identity in the context of an authenticated route")
	}
	return id
}

// problemError is an error with the HTTP status and detail its problem body gets.
type problemError struct {
	status int
	detail string
}

// unavailableError is a 503 with Retry-After: 1, for a client to try again shortly (or
// another gateway).
type unavailableError struct{ detail string }

func (e *unavailableError) Error() string { return e.detail }

// busyError is a 429 with Retry-After: 1 and Connection: close: a limit on what the
// caller holds at once is reached, and a place may be free by then.
type busyError struct{ detail string }

func (e *busyError) Error() string { return e.detail }

func (e *problemError) Error() string { return e.detail }

func badRequest(format string, args ...any) error {
	return &problemError{http.StatusBadRequest, fmt.Sprintf(format, args...)}
}

func problem(status int, detail string) protocol.Problem {
	return protocol.Problem{Title: http.StatusText(status), Status: status, Detail: detail}
}

// handleError is the one place errors become HTTP responses: problem+json bodies whose
// detail says what went wrong. Unexpected errors are logged and answered 500 without
// internals; a request whose caller left is logged at debug level only and not answered.
func (s *Server) handleError(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	status, detail := http.StatusInternalServerError, "internal error; the gateway logged it"
	var pe *problemError
	var qe *journal.QuotaError
	var rl *invoker.RateLimitedError
	var ue *unavailableError
	var be *busyError
	var he *echo.HTTPError
	switch {
	case errors.Is(err, context.Canceled) && c.Request().Context().Err() != nil:
		// The caller left (a long-poll given up, say): nothing went wrong, and no one
		// reads an answer.
		s.log.DebugContext(c.Request().Context(), "request ended: the caller left",
			slog.String("method", c.Request().Method), slog.String("path", loggedPath(c)))
		return
	case errors.As(err, &pe):
		status, detail = pe.status, pe.detail
	case errors.As(err, &qe):
		// A tenant's storage quota: room comes back as runs are received or deleted.
		status, detail = http.StatusTooManyRequests, qe.Message
	case errors.As(err, &rl):
		// Whole seconds, rounded up: a client that waits that long passes.
		status, detail = http.StatusTooManyRequests, rl.Reason+" (function "+rl.Function+")"
		c.Response().Header().Set("Retry-After", strconv.FormatInt(max(1, int64(math.Ceil(rl.RetryAfter.Seconds()))), 10))
	case errors.As(err, &ue):
		status, detail = http.StatusServiceUnavailable, ue.detail
		c.Response().Header().Set("Retry-After", "1")
	case errors.As(err, &be):
		status, detail = http.StatusTooManyRequests, be.detail
		c.Response().Header().Set("Retry-After", "1")
		// The caller holds its limit's worth of connections already: this one is closed,
		// not kept alive beside them.
		c.Response().Header().Set("Connection", "close")
	case journal.IsUnavailable(err) || (errors.Is(err, context.DeadlineExceeded) && c.Request().Context().Err() == nil):
		// Nothing was done, or a write's fate is what a retry with the same idempotency
		// key or checkpoint finds out. A deadline that ran out while the caller still
		// waits is one of the gateway's bounds: on a connection from its pools
		// (STEPGATE_DATABASE_TIMEOUT), when the database hangs.
		status, detail = http.StatusServiceUnavailable, "the database is unreachable; retry shortly"
		c.Response().Header().Set("Retry-After", "1")
		s.log.WarnContext(c.Request().Context(), "request failed: the database is unreachable",
			slog.String("method", c.Request().Method), slog.String("path", loggedPath(c)), slog.Any("error", err))
	case errors.Is(err, storable.ErrUnstorable):
		// The edges check what they can name; this is the database's word on the rest.
		status, detail = http.StatusBadRequest, err.Error()
	case errors.Is(err, auth.ErrUnauthorized):
		// The title says Unauthorized; the detail says which check failed.
		status, detail = http.StatusUnauthorized, strings.TrimPrefix(err.Error(), auth.ErrUnauthorized.Error()+": ")
	case errors.As(err, &he):
		status = he.Code
		detail = fmt.Sprint(he.Message)
		switch status {
		case http.StatusRequestEntityTooLarge:
			detail = "request body is larger than the gateway's limit"
		case http.StatusBadRequest:
			detail = "request is malformed: " + strings.TrimPrefix(detail, "Syntax error: ")
			if he.Internal != nil {
				detail = "request body is not valid JSON: " + he.Internal.Error()
			}
		case http.StatusNotFound:
			detail = "no such endpoint: " + c.Request().Method + " " + c.Request().URL.Path
		}
	default:
		s.log.ErrorContext(c.Request().Context(), "request failed",
			slog.String("method", c.Request().Method), slog.String("path", loggedPath(c)), slog.Any("error", err))
	}
	if status == http.StatusUnauthorized {
		c.Response().Header().Set("WWW-Authenticate", `Bearer realm="stepgate"`)
	}
	c.Response().Header().Set(echo.HeaderContentType, "application/problem+json")
	if c.Request().Method == http.MethodHead {
		_ = c.NoContent(status)
		return
	}
	_ = c.JSON(status, problem(status, detail))
}

// Healthz answers 200 once the database answers. It takes no token, so a failure's
// 503 says only "database unreachable"; the database's error goes to the log.
func (s *Server) Healthz(ctx context.Context, _ server.HealthzRequestObject) (server.HealthzResponseObject, error) {
	if s.draining.Load() {
		return server.Healthz503ApplicationProblemPlusJSONResponse{UnavailableApplicationProblemPlusJSONResponse: server.UnavailableApplicationProblemPlusJSONResponse(
			problem(http.StatusServiceUnavailable, "this gateway is shutting down: it finishes its invocations in flight and takes no new runs"))}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.pool.Ping(ctx); err != nil {
		s.log.WarnContext(ctx, "healthz: the database does not answer", slog.Any("error", err))
		return server.Healthz503ApplicationProblemPlusJSONResponse{UnavailableApplicationProblemPlusJSONResponse: server.UnavailableApplicationProblemPlusJSONResponse(
			problem(http.StatusServiceUnavailable, "database unreachable"))}, nil
	}
	return server.Healthz200JSONResponse{Status: "ok"}, nil
}
