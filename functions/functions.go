package functions

import (
	"bufio"
	"cmp"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/stepgate/stepgate/client"
	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
	"github.com/stepgate/stepgate/protocol/ndjson"
	"github.com/stepgate/stepgate/protocol/signature"
)

// Config configures an [App].
type Config struct {
	// PublicKeys verify the gateway's Ed25519 signature of every request: your tenant's
	// public keys, as `stepgate keys` prints them (signature.ParsePublicKeys reads that
	// form). A signature that verifies with any of them is accepted, so during a key
	// rotation list both. The gateway alone holds the private keys, so nobody else can
	// sign a request these accept.
	PublicKeys []ed25519.PublicKey
	// HMACSecrets verify the HMAC-SHA256 signature (v1) instead, for when Ed25519 is not
	// at hand: your tenant's secrets, decoded. `stepgate keys secrets` prints them as
	// STEPGATE_HMAC_SECRETS=<secret>,... in base64url (signature.ParseSecrets decodes
	// that form); the key is the decoded bytes, not the text. Weaker: every holder of the
	// secret, such as each of your tenant's other functions, can sign with it. Each must
	// be at least 32 bytes.
	HMACSecrets [][]byte
	// Keys, when set, returns the keys of the tenant a request names, and PublicKeys and
	// HMACSecrets are not used: for an app that serves several tenants, or that fetches
	// its tenant's keys from the gateway ([GatewayKeys]).
	Keys signature.KeyFunc
	// Tenant, when set, refuses requests signed for any other tenant.
	Tenant string
	// InsecureSkipVerify accepts requests whatever their signature: for a test of the
	// function alone, never where the app can be reached. Without it, an app with no
	// keys refuses every request.
	InsecureSkipVerify bool
	// ReplayCacheSize is how many accepted invocation signatures the app remembers to
	// refuse replays within the signature window. Defaults to
	// signature.DefaultReplayCache.
	ReplayCacheSize int
	// HTTPClient makes the checkpoint calls. Defaults to a client whose Transport keeps
	// up to 64 idle connections per host, so the call that each step waits on reuses one.
	HTTPClient *http.Client
	// Logger receives invocations that answer HTTP 500. Defaults to slog.Default().
	Logger *slog.Logger
	// MaxBodyBytes bounds an invocation request's body; larger ones get 413. Defaults
	// to 32 MiB.
	MaxBodyBytes int64
	// RequestResponseOnly has the manifest list the request/response mode only, for an
	// app behind a proxy or platform that buffers request or response bodies (AWS
	// Lambda, Cloudflare Workers, some ingress controllers). Without it the manifest
	// lists the duplex mode too, and the gateway sends each invocation as one exchange
	// that carries its checkpoints both ways: no request back to the gateway per step,
	// and no route from the app to the gateway needed. (The gateway falls back to
	// request/response by itself when a duplex invocation is not answered as frames.)
	RequestResponseOnly bool
}

// App is an [http.Handler] serving the functions registered on it and their manifest.
// It is safe for concurrent use, including Register while serving.
type App struct {
	verify  bool
	modes   *[]protocol.FunctionConfigModes // what the manifest lists
	tenant  string
	sigs    *signature.Verifier
	client  *http.Client
	log     *slog.Logger
	maxBody int64

	mu  sync.Mutex // serializes Register
	reg atomic.Pointer[registry]
}

// registry is immutable once stored: Register copies it.
type registry struct {
	byName   map[string]*function
	manifest []byte
}

type function struct {
	name   string
	config protocol.FunctionConfig
	budget time.Duration // config.max_invocation_duration, or 0
	// sleepMax is the longest sleep waited out in the process (SleepInProcess).
	sleepMax time.Duration
	// lazy journals each step's result with what follows it (LazyCheckpoints).
	lazy bool
	call func(ctx context.Context, input protocol.AnyJSON) (protocol.AnyJSON, error)
}

// New returns an App with no functions. It panics when a public key is not 32 bytes or a
// secret is shorter than 32 bytes, as configuring is part of program setup; read keys
// from text with signature.ParsePublicKeys and signature.ParseSecrets, which say what is
// wrong instead.
func New(cfg Config) *App {
	for i, k := range cfg.PublicKeys {
		if len(k) != ed25519.PublicKeySize {
			panic(fmt.Sprintf("functions: public key %d is %d bytes, not an Ed25519 public key (%d bytes)", i+1, len(k), ed25519.PublicKeySize))
		}
	}
	for i, s := range cfg.HMACSecrets {
		if len(s) < signature.MinSecretBytes {
			panic(fmt.Sprintf("functions: HMAC secret %d is %d bytes; at least %d are required", i+1, len(s), signature.MinSecretBytes))
		}
	}
	keys := cfg.Keys
	if keys == nil {
		keys = signature.StaticKeys(signature.Keys{Public: slices.Clone(cfg.PublicKeys), HMAC: slices.Clone(cfg.HMACSecrets)})
	}
	a := &App{
		verify:  !cfg.InsecureSkipVerify,
		tenant:  cfg.Tenant,
		sigs:    signature.NewVerifier(0, cfg.ReplayCacheSize, keys),
		client:  cmp.Or(cfg.HTTPClient, defaultClient()),
		log:     cmp.Or(cfg.Logger, slog.Default()),
		maxBody: cmp.Or(cfg.MaxBodyBytes, 32<<20),
		modes:   &[]protocol.FunctionConfigModes{protocol.FunctionConfigModesRequest, protocol.FunctionConfigModesDuplex},
	}
	if cfg.RequestResponseOnly {
		a.modes = &[]protocol.FunctionConfigModes{protocol.FunctionConfigModesRequest}
	}
	a.reg.Store(&registry{byName: map[string]*function{}, manifest: a.manifest(nil)})
	return a
}

func defaultClient() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 64
	t.IdleConnTimeout = 90 * time.Second
	t.DisableCompression = true // checkpoint answers are a few bytes
	return &http.Client{Transport: t, Timeout: 30 * time.Second}
}

// Option configures a function's entry in the manifest, which the gateway applies:
// [InvocationTimeout], [InvocationAttempts], [InvocationBackoff], [MaxInvocationDuration], [RunTimeout],
// [Retention], [InvokeRoles], [ResumeRoles], [OnEvent], [Concurrency], [Throttle], [RateLimit],
// [Debounce], [Priority]; or this SDK's own handling of it, not sent to the gateway:
// [SleepInProcess], [LazyCheckpoints].
type Option struct {
	set   func(*protocol.FunctionConfig)
	local func(*function) // an option of this SDK's, not sent to the gateway
}

// InvocationTimeout sets how long one invocation may take before the gateway gives up
// on it and retries. The gateway defaults to 5m. (A wait's timeout is step.Timeout.)
func InvocationTimeout(d time.Duration) Option {
	return Option{set: func(c *protocol.FunctionConfig) { c.Timeout = new(d.String()) }}
}

// InvocationAttempts sets how many invocations the gateway makes, the first included,
// before a run whose invocations keep failing (HTTP 500, timeouts) fails. The gateway
// defaults to 3. (A step's attempts are step.MaxAttempts.)
func InvocationAttempts(n int) Option {
	return Option{set: func(c *protocol.FunctionConfig) { retries(c).MaxAttempts = new(max(n, 1)) }}
}

// InvocationBackoff sets the wait before each retried invocation: a random duration up
// to min(maxInterval, initial * 2^(n-1)) before attempt n+1. Zero values leave the
// gateway's defaults. (A step's backoff is step.Backoff.)
func InvocationBackoff(initial, maxInterval time.Duration) Option {
	return Option{set: func(c *protocol.FunctionConfig) {
		r := retries(c)
		if initial > 0 {
			r.InitialInterval = new(initial.String())
		}
		if maxInterval > 0 {
			r.MaxInterval = new(maxInterval.String())
		}
	}}
}

// MaxInvocationDuration makes each invocation of the function end before d has passed,
// for a serverless platform that stops a request after d: once four fifths of d have
// passed, the SDK stops at the next step boundary (before starting a step the journal
// does not hold, and after at least one such step) and answers a continue await, and
// the gateway calls the function again at once with the journal so far. A step that
// runs longer than d is not cut short. d must be at least 100ms and at most the
// function's [InvocationTimeout] (the gateway refuses the registration otherwise).
func MaxInvocationDuration(d time.Duration) Option {
	return Option{set: func(c *protocol.FunctionConfig) { c.MaxInvocationDuration = new(d.String()) }}
}

// SleepInProcess sets the longest sleep ([step.Sleep], [step.SleepUntil]) that an
// invocation waits out in its process, checkpointed, instead of suspending the run: a
// sleep of 1s then costs no second invocation and ends on this process's timer, not a
// wake-up of the gateway's (measured in BENCHMARKS.md, "A sleep's end"). Without it
// (or with 0) every sleep suspends the run. An invocation sleeps in its process only
// with time to spare before its timeout and its MaxInvocationDuration; while it does,
// the run is running, not sleeping, and holds its concurrency slots.
func SleepInProcess(limit time.Duration) Option {
	return Option{local: func(f *function) { f.sleepMax = max(limit, 0) }}
}

// LazyCheckpoints trades a guarantee for latency, for every step of the function (see
// [step.Lazy] for one step): a step's result is journaled only when the function's next
// step starts or it answers, so if the invocation is lost in between (its process
// killed, say), the step runs again although code after it already saw its result.
// It saves one checkpoint round trip for the last step before an answer or a
// suspension. Without it (the default), [step.Run] returns only once the gateway has
// journaled the step.
func LazyCheckpoints() Option {
	return Option{local: func(f *function) { f.lazy = true }}
}

// RunTimeout bounds each run of the function, from its creation: past it, the run fails
// with error type deadline_exceeded whatever it is doing (see docs/deadlines.md).
// d must be from 1s to 10 years.
func RunTimeout(d time.Duration) Option {
	return Option{set: func(c *protocol.FunctionConfig) { c.RunTimeout = new(d.String()) }}
}

// Retention sets how long the function's finished runs are kept before the gateway
// deletes them (see docs/operations.md, retention); d must be from 1m to 10 years. Without it,
// the gateway's STEPGATE_RETENTION (30 days by default) holds.
func Retention(d time.Duration) Option {
	return Option{set: func(c *protocol.FunctionConfig) { c.Retention = new(d.String()) }}
}

// InvokeRoles restricts who may start runs of the function: a caller needs one of roles
// (or the admin role) besides the runs:invoke permission.
func InvokeRoles(roles ...string) Option {
	return Option{set: func(c *protocol.FunctionConfig) { c.InvokeRoles = new(slices.Clone(roles)) }}
}

// ResumeRoles lets callers with one of roles resume the waits of the function's runs
// (step.WaitForEvent, step.Receive, and those among a step.WaitFirst) besides those that may
// start them ([InvokeRoles]): an event from any other sender leaves such a run waiting,
// and its messages are refused. It never restricts: without InvokeRoles, anyone of the
// tenant may resume. Callbacks are not checked: a callback's token is a capability.
func ResumeRoles(roles ...string) Option {
	return Option{set: func(c *protocol.FunctionConfig) { c.ResumeRoles = new(slices.Clone(roles)) }}
}

// Rate is a throttle's or a rate limit's rate: Limit starts per Period (from 10ms to
// 24h), one each Period/Limit, plus Burst more at once after a quiet spell, counted per
// Key (see the Key expressions below); for a throttle, at most MaxQueue (default 1000)
// starts of one key wait at once. Burst 0 is the default: Limit-1 for a rate limit (a
// quiet key admits Limit starts back to back), 0 for a throttle. Spaced sets it to 0
// for a rate limit too, so that every start comes Period/Limit after the one before;
// Register panics when Spaced is set with a Burst.
type Rate struct {
	Limit    int
	Period   time.Duration
	Burst    int
	Spaced   bool
	Key      string
	MaxQueue int
}

func (r Rate) config() *protocol.RateConfig {
	c := &protocol.RateConfig{Limit: r.Limit, Period: r.Period.String()}
	switch {
	case r.Spaced && r.Burst != 0:
		panic(fmt.Sprintf("functions: a Rate is Spaced or has a Burst (%d), not both", r.Burst))
	case r.Spaced:
		c.Burst = new(0)
	case r.Burst > 0:
		c.Burst = new(r.Burst)
	}
	if r.Key != "" {
		c.Key = new(r.Key)
	}
	if r.MaxQueue > 0 {
		c.MaxQueue = new(r.MaxQueue)
	}
	return c
}

// Key expressions name what a throttle, a rate limit or a debounce counts per: a field
// of the run's input ("input.customer_id", "input.order.region"), or of its identity
// ("identity.subject", "identity.tenant", "identity.claims.<name>"). "" is one count for
// the whole function.
const (
	KeySubject = "identity.subject"
	KeyTenant  = "identity.tenant"
)

// Throttle queues the starts of the function beyond r: a start the rate does not allow
// now creates its run scheduled at the time it does (Inngest's throttle). Past
// r.MaxQueue waiting starts of a key, a start is refused (HTTP 429).
func Throttle(r Rate) Option {
	return Option{set: func(c *protocol.FunctionConfig) { c.Throttle = r.config() }}
}

// RateLimit drops the starts of the function beyond r (Inngest's rateLimit): such a
// start is refused (HTTP 429 with Retry-After), and a run an event or a schedule would
// start is skipped. r.MaxQueue does not apply.
func RateLimit(r Rate) Option {
	return Option{set: func(c *protocol.FunctionConfig) { c.RateLimit = r.config() }}
}

// Debounce collapses the starts of the function with the same key (see the Key expressions below) within
// period into one run with the last start's input, which starts once period has
// passed with no further start, or maxWait after the first (0: 24h); maxWait must be at
// least period (DBOS's Debouncer, Inngest's debounce).
func Debounce(period time.Duration, key string, maxWait time.Duration) Option {
	return Option{set: func(c *protocol.FunctionConfig) {
		d := &protocol.DebounceConfig{Period: period.String()}
		if key != "" {
			d.Key = new(key)
		}
		if maxWait > 0 {
			d.MaxWait = new(maxWait.String())
		}
		c.Debounce = d
	}}
}

// Priority sets the priority of the function's runs in the gateway's queue, from 1
// (first) to 4 (last); 2 by default. Every invocation of a run is queued with it, ahead
// of lower priorities of every function; a start's ?priority= overrides it. It orders
// the queue only: a tenant's fair share of the gateway's workers stays the same. The
// gateway refuses the registration of any other value.
func Priority(p int) Option {
	return Option{set: func(c *protocol.FunctionConfig) { c.Priority = new(p) }}
}

// Concurrency bounds how many runs of the function run at once (a suspended run, asleep
// or waiting, does not count): at most limit in all, or with key at most limit per value
// of key, one of input.<dotted.path>, identity.subject, identity.tenant or
// identity.claims.<name>. The gateway enforces it across all its instances: a run over
// the limit stays queued, with its held reason, until a slot frees, in creation order.
// Give it twice for two limits (a function may have two, with different keys), e.g.
// Concurrency(10, "") and Concurrency(1, "input.customer_id"). limit must be from 1 to
// 100,000 (the gateway refuses the registration otherwise).
func Concurrency(limit int, key string) Option {
	return Option{set: func(c *protocol.FunctionConfig) {
		l := protocol.ConcurrencyLimit{Limit: limit}
		if key != "" {
			l.Key = new(key)
		}
		if c.Concurrency == nil {
			c.Concurrency = &[]protocol.ConcurrencyLimit{}
		}
		*c.Concurrency = append(*c.Concurrency, l)
	}}
}

func retries(c *protocol.FunctionConfig) *protocol.RetryPolicy {
	if c.Retries == nil {
		c.Retries = &protocol.RetryPolicy{}
	}
	return c.Retries
}

// Register adds the function fn called name to app, served at POST /<name>. The run's
// input is decoded from JSON into In (a JSON null or absent input leaves In's zero
// value; an input that does not decode fails the run); fn's output is encoded as JSON.
// Call fn's steps with the ctx it gets, which also carries [IdentityFrom] and [RunFrom].
//
// name must be 1 to 255 letters, digits, '.', '_' or '-', starting with a letter or digit,
// and unique in app; otherwise Register panics, as registering is part of program setup.
//
// Register returns a [client.Ref] to the function, which callers pass to [client.Run] and
// [client.Start]: they then only compile with an In, and return an Out.
func Register[In, Out any](app *App, name string, fn func(ctx context.Context, in In) (Out, error), opts ...Option) client.Ref[In, Out] {
	if !names.ValidFunction(name) {
		panic(fmt.Sprintf("functions: invalid function name %q", name))
	}
	f := &function{name: name}
	for _, o := range opts {
		if o.set != nil {
			o.set(&f.config)
		}
		if o.local != nil {
			o.local(f)
		}
	}
	if d := f.config.MaxInvocationDuration; d != nil {
		f.budget, _ = time.ParseDuration(*d)
	}
	f.call = func(ctx context.Context, input protocol.AnyJSON) (protocol.AnyJSON, error) {
		var in In
		if len(input) > 0 {
			if err := json.Unmarshal(input, &in); err != nil {
				return nil, &codingError{"input", fmt.Errorf("decode input into %T: %w", in, err)}
			}
		}
		out, err := fn(ctx, in)
		if err != nil {
			return nil, err
		}
		raw, err := json.Marshal(out)
		if err != nil {
			return nil, &codingError{"output", fmt.Errorf("encode output: %w", err)}
		}
		return raw, nil
	}

	app.mu.Lock()
	defer app.mu.Unlock()
	old := app.reg.Load()
	if _, ok := old.byName[name]; ok {
		panic(fmt.Sprintf("functions: function %q registered twice", name))
	}
	byName := maps.Clone(old.byName)
	byName[name] = f
	app.reg.Store(&registry{byName: byName, manifest: app.manifest(byName)})
	return client.Ref[In, Out](name)
}

// codingError is an input or output that does not fit the function's types: a new
// invocation would meet it again, so it fails the run.
type codingError struct {
	typ string
	err error
}

func (e *codingError) Error() string { return e.err.Error() }
func (e *codingError) Unwrap() error { return e.err }

// sdkName is this SDK's name and version, as the manifest and its errors say it. The
// version is the release's (internal/helpers/version.Version, in the server's module, which
// the SDK's module does not require); internal/tooling/sdkmodules keeps the two equal, and
// the SDK's manifest tests keep sdkName equal to gatewaytest.SDK.
const sdkName = "stepgate-go/0.1.0"

func (a *App) manifest(byName map[string]*function) []byte {
	// This SDK answers replay-only invocations (see replayAnswer).
	m := protocol.Manifest{Protocol: new(protocol.CurrentVersion().Major), ProtocolVersion: new(protocol.Version), Sdk: new(sdkName),
		Functions: []protocol.ManifestFunction{}, ReplayOnly: new(true)}
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		f := byName[name]
		mf := protocol.ManifestFunction{Name: name, Path: name}
		c := f.config
		c.Modes = a.modes
		mf.Config = &c
		m.Functions = append(m.Functions, mf)
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err) // plain structs of strings and ints always encode
	}
	return b
}

// Identity is who started a run, as the gateway verified it from their token (never the
// token itself): their subject, tenant, roles and the claims the gateway keeps. A run
// started by another run (a child, a schedule, an event) carries its starter's identity.
type Identity = invocation.Identity

// RunInfo describes the run being invoked.
type RunInfo struct {
	ID        string          `json:"id"`
	Function  string          `json:"function"`
	Revision  int             `json:"revision"`
	Attempt   int             `json:"attempt"`             // The invocation attempt, from 1.
	Input     json.RawMessage `json:"input"`               // The run's input, as sent.
	ParentID  string          `json:"parent_id,omitempty"` // The run that invoked this one, for a child run.
	CreatedAt time.Time       `json:"created_at"`
}

// IdentityFrom returns who started the run being invoked with ctx, or the zero Identity
// outside an invocation.
func IdentityFrom(ctx context.Context) Identity {
	st := invocation.From(ctx)
	if st == nil {
		return Identity{}
	}
	id := st.Req.Identity
	return Identity{Subject: id.Subject, Tenant: id.Tenant, Roles: id.Roles, Claims: id.Claims}
}

// RunFrom returns the run being invoked with ctx, or the zero RunInfo outside an
// invocation.
func RunFrom(ctx context.Context) RunInfo {
	st := invocation.From(ctx)
	if st == nil {
		return RunInfo{}
	}
	r := st.Req.Run
	out := RunInfo{ID: r.ID, Function: r.Function, Revision: r.Revision, Attempt: r.Attempt,
		Input: json.RawMessage(r.Input), CreatedAt: r.CreatedAt}
	if r.ParentID != nil {
		out.ParentID = *r.ParentID
	}
	return out
}

// ServeHTTP answers GET / with the manifest and POST /<name> by invoking the function
// name. Errors other than the function's own outcome are JSON bodies {"type", "message"}:
// 401 (type "signature") when the signature does not verify or replays an invocation,
// 400 (type "protocol_version") when the request's Stepgate-Protocol header names a
// gateway this SDK does not serve (another major version) or is not a version, with a
// message naming both versions, 400 (type "malformed") when the body is not a protocol 1
// invocation, 404, 405 and 413. Every answer has the header Stepgate-Protocol:
// [protocol.Version].
// Mount it at the app's URL, under [http.StripPrefix] when that URL has a path.
//
// The W3C trace context the gateway sends with each invocation (traceparent, when the
// gateway's traces are on) is in the function's context as the remote parent span, so
// the spans a function starts with its own OpenTelemetry tracer (go.opentelemetry.io/otel)
// join the run's trace, under the invocation. The SDK itself records no spans.
func (a *App) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/")
	reg := a.reg.Load()
	var f *function
	switch {
	case name == "":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeError(w, http.StatusMethodNotAllowed, "method", "the manifest answers GET")
			return
		}
	case reg.byName[name] == nil:
		writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no function %q", name))
		return
	case r.Method != http.MethodPost:
		w.Header().Set("Allow", "POST")
		writeError(w, http.StatusMethodNotAllowed, "method", "functions answer POST")
		return
	default:
		f = reg.byName[name]
	}

	// A duplex invocation's body is the invocation on its first line, then the gateway's
	// acknowledgements (see serveDuplex).
	duplex := f != nil && ndjson.Is(r.Header.Get("Content-Type"))
	var acks *bufio.Reader
	var body []byte
	var err error
	if duplex {
		// A refusal below closes the connection, rather than read the rest of a body
		// that the gateway holds open; serveDuplex keeps it.
		w.Header().Set("Connection", "close")
		acks = bufio.NewReaderSize(r.Body, 16<<10)
		body, err = invocation.ReadFirstLine(acks, a.maxBody)
	} else {
		body, err = io.ReadAll(http.MaxBytesReader(w, r.Body, a.maxBody))
	}
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			writeError(w, http.StatusRequestEntityTooLarge, "too_large", err.Error())
			return
		}
		writeError(w, http.StatusBadRequest, "malformed", "read body: "+err.Error())
		return
	}
	var tenant string
	if a.verify {
		header := r.Header.Get(signature.Header)
		// The signature binds the method and the path the gateway requested, so a
		// request signed for another function (another path) is refused.
		sr := signature.Request{Method: r.Method, Path: signature.RequestPath(r), Body: body}
		if r.Method == http.MethodHead {
			sr.Method = http.MethodGet // the manifest's signature, checked for a HEAD too
		}
		if f == nil {
			// The manifest changes nothing, so a repeat of its request is harmless.
			tenant, err = a.sigs.Check(r.Context(), header, sr, time.Now())
		} else {
			tenant, err = a.sigs.Verify(r.Context(), header, sr, time.Now())
		}
		if err == nil && a.tenant != "" && tenant != a.tenant {
			err = fmt.Errorf("signature: the request is for tenant %q; this app serves %q", tenant, a.tenant)
		}
		if err != nil {
			writeError(w, http.StatusUnauthorized, "signature", err.Error())
			return
		}
	}
	if f == nil {
		writeJSON(w, http.StatusOK, reg.manifest)
		return
	}
	// Before the body is decoded: another major's body may not read as this one's.
	if v := r.Header.Get(protocol.VersionHeader); v != "" {
		if err := protocol.CheckGatewayVersion(sdkName, v); err != nil {
			writeError(w, http.StatusBadRequest, "protocol_version", err.Error())
			return
		}
	}

	var req protocol.InvocationRequest
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "malformed", "decode invocation: "+err.Error())
		return
	}
	if msg := invalid(&req); msg != "" {
		writeError(w, http.StatusBadRequest, "malformed", "invalid invocation: "+msg)
		return
	}
	if a.verify && req.Identity.Tenant != tenant {
		writeError(w, http.StatusUnauthorized, "signature", fmt.Sprintf(
			"signature: the request is signed for tenant %q, but its run's identity is of tenant %q", tenant, req.Identity.Tenant))
		return
	}
	if a.verify && req.Run.Function != f.name {
		// The signed body names the function: another function's request is refused,
		// even at a path the signature covers.
		writeError(w, http.StatusUnauthorized, "signature", fmt.Sprintf(
			"signature: the request is for function %q; this path serves %q (register it under the name it is served as: stepgate apps sync does)", req.Run.Function, f.name))
		return
	}
	if asked := req.Mode != nil && *req.Mode == protocol.InvocationRequestModeDuplex; asked != duplex {
		// The mode is signed, its transport is not: a copy of a duplex invocation sent
		// whole would otherwise run with no claim the gateway answers.
		mode, came := "request", "whole"
		if req.Mode != nil {
			mode = string(*req.Mode)
		}
		if duplex {
			came = "as frames (application/x-ndjson)"
		}
		writeError(w, http.StatusBadRequest, "malformed", fmt.Sprintf("invalid invocation: its mode is %s but it came %s", mode, came))
		return
	}
	ctx := r.Context()
	if r.Header.Get("traceparent") != "" {
		ctx = propagation.TraceContext{}.Extract(ctx, propagation.HeaderCarrier(r.Header))
	}
	if duplex {
		a.serveDuplex(ctx, w, r, f, &req, acks)
		return
	}
	code, answer := a.invoke(ctx, f, &req, nil)
	b, err := json.Marshal(answer)
	if err != nil {
		// Only an output that is not valid JSON can get here; json.Marshal checks it.
		code, b = http.StatusInternalServerError, errorBody("output", err.Error())
	}
	writeJSON(w, code, b)
}

func invalid(req *protocol.InvocationRequest) string {
	switch {
	case req.Protocol != protocol.InvocationRequestProtocolN1:
		return fmt.Sprintf("protocol %d is not supported (want 1)", req.Protocol)
	case req.Run.ID == "":
		return "run.id is missing"
	case req.Checkpoint.URL == "" || req.Checkpoint.Token == "":
		return "checkpoint.url or checkpoint.token is missing"
	}
	return ""
}

// invoke runs f for req and returns the HTTP status and body to answer. Its requests to
// the gateway go as frames of d, when not nil (the duplex mode).
func (a *App) invoke(ctx context.Context, f *function, req *protocol.InvocationRequest, d *invocation.Duplex) (code int, body any) {
	uctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	st := invocation.New(ctx, req, a.client, cancel)
	if d != nil {
		st.UseDuplex(d)
	}
	defer func() { code, body = withPending(st, code, body) }()
	if st.ReplayOnly() {
		defer func() { code, body = replayAnswer(st, code, body) }()
	}
	st.SetBudget(f.budget)
	st.SetSleepInProcess(f.sleepMax)
	st.SetLazy(f.lazy)
	uctx = invocation.With(uctx, st)

	var out protocol.AnyJSON
	var err error
	stop, panicked, stack := st.Call(func() { out, err = f.call(uctx, req.Run.Input) })
	// Steps still running in parallel finish (and are journaled) before the answer; one
	// of them may have stopped the invocation after the function returned.
	st.Drain()
	if stop == nil {
		stop = st.Stopped()
	}
	if stop != nil && stop.Answer != nil && stop.Answer.Await != nil {
		if w := st.Window(stop.Answer.Await.Seq); w > 1 {
			stop.Answer.Await.Window = &w
		}
	}
	switch {
	case stop != nil && stop.Error != nil:
		a.log.WarnContext(ctx, "invocation failed", logAttrs(req, stop.Error.Type, stop.Error.Message)...)
		return http.StatusInternalServerError, stop.Error
	case stop != nil:
		return http.StatusOK, stop.Answer
	case panicked != nil:
		msg := fmt.Sprint(panicked)
		a.log.WarnContext(ctx, "invocation failed", append(logAttrs(req, "panic", msg), slog.String("stack", string(stack)))...)
		return http.StatusInternalServerError, &protocol.ErrorInfo{Type: "panic", Message: msg}
	case err != nil:
		if info := failure(err); info != nil {
			// The run fails for good: undo what it did first (step.Compensate).
			var cerr error
			stop, panicked, stack = st.Call(func() { cerr = step.RunCompensations(uctx) })
			var incomplete *step.IncompleteCompensation
			switch {
			case stop != nil && stop.Error != nil:
				return http.StatusInternalServerError, stop.Error
			case stop != nil:
				return http.StatusOK, stop.Answer
			case panicked != nil:
				a.log.WarnContext(ctx, "compensation panicked", append(logAttrs(req, "panic", fmt.Sprint(panicked)), slog.String("stack", string(stack)))...)
				return http.StatusInternalServerError, &protocol.ErrorInfo{Type: "panic", Message: fmt.Sprint(panicked)}
			case errors.As(cerr, &incomplete):
				info.Message += " (" + incomplete.Error() + ")"
			}
			return http.StatusOK, &protocol.InvocationAnswer{Status: protocol.AnswerStatusFailed, Error: info}
		}
		a.log.WarnContext(ctx, "invocation failed", logAttrs(req, "error", err.Error())...)
		return http.StatusInternalServerError, &protocol.ErrorInfo{Type: "error", Message: err.Error()}
	}
	return http.StatusOK, &protocol.InvocationAnswer{Status: protocol.AnswerStatusCompleted, Output: &out}
}

// replayAnswer is the answer to a replay-only invocation (InvocationRequest replay_only)
// that ended with code and body: the State answers status replayed where the code asks
// for an entry past the journal or another than the journal holds (before anything of it
// runs); a function that returns here would end the run, so it answers next {seq, "end",
// "completed"} or {seq, "end", "failed"} (a failure for good, once the compensations it
// would run are journaled), at the seq after those the code took, or a divergence when
// the journal goes on past them. An HTTP 500 (a retryable error, a panic, a journaled
// output this code cannot read) stays one: replaying says nothing there. Such an
// invocation never answers completed, failed or suspended, which the gateway would apply.
func replayAnswer(st *invocation.State, code int, body any) (int, any) {
	ans, ok := body.(*protocol.InvocationAnswer)
	if code != http.StatusOK || !ok || ans.Status == protocol.AnswerStatusReplayed {
		return code, body
	}
	switch ans.Status {
	case protocol.AnswerStatusCompleted:
		return code, st.End(invocation.EndCompleted).Answer
	case protocol.AnswerStatusFailed:
		return code, st.End(invocation.EndFailed).Answer
	}
	return http.StatusInternalServerError, &protocol.ErrorInfo{Type: "replay",
		Message: fmt.Sprintf("a replay-only invocation ended %s, not past its journal", ans.Status)}
}

// withPending journals the step the function finished last without a checkpoint (see
// invocation.State.Defer) with the answer: in its steps, journaled in the transaction that
// applies it. An HTTP 500 answer journals nothing, so the step is checkpointed first, and
// the retried invocation replays it rather than running it again.
func withPending(st *invocation.State, code int, body any) (int, any) {
	e := st.TakePending()
	if e == nil {
		return code, body
	}
	if ans, ok := body.(*protocol.InvocationAnswer); ok && code == http.StatusOK {
		steps := []protocol.JournalEntry{*e}
		if ans.Steps != nil {
			steps = append(steps, *ans.Steps...)
		}
		ans.Steps = &steps
		return code, body
	}
	_ = st.Checkpoint(e) // when it fails too, the retry runs the step again
	return code, body
}

// failure returns the failure that err fails the run with, or nil when err is retryable.
func failure(err error) *protocol.ErrorInfo {
	typ := ""
	if se, ok := errors.AsType[*step.Error](err); ok {
		typ = se.Type
	} else if ce, ok := errors.AsType[*codingError](err); ok {
		typ = ce.typ
	} else if step.IsNonRetryable(err) {
		typ = step.ErrorTypeNonRetryable
	} else {
		return nil
	}
	return &protocol.ErrorInfo{Type: typ, Message: err.Error(), Retryable: new(false)}
}

func logAttrs(req *protocol.InvocationRequest, typ, msg string) []any {
	return []any{
		slog.String("run_id", req.Run.ID), slog.String("function", req.Run.Function),
		slog.Int("attempt", req.Run.Attempt), slog.String("error_type", typ), slog.String("error", msg),
	}
}

func writeError(w http.ResponseWriter, code int, typ, msg string) {
	writeJSON(w, code, errorBody(typ, msg))
}

func errorBody(typ, msg string) []byte {
	b, _ := json.Marshal(protocol.ErrorInfo{Type: typ, Message: msg}) // strings always encode
	return b
}

func writeJSON(w http.ResponseWriter, code int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(protocol.VersionHeader, protocol.Version)
	w.WriteHeader(code)
	_, _ = w.Write(body) // the gateway is gone; nobody to tell
}

// serveDuplex answers the duplex invocation req of f (see protocol.InvocationRequest
// mode): the response's headers at once, then the invocation's requests to the gateway
// as frames, its answer last; acks is the request's body past its first line, the
// gateway's acknowledgements. A step body runs only once the claim's proof verifies with
// the tenant's keys (unless Config.InsecureSkipVerify).
func (a *App) serveDuplex(ctx context.Context, w http.ResponseWriter, r *http.Request, f *function, req *protocol.InvocationRequest, acks *bufio.Reader) {
	rc := http.NewResponseController(w)
	if err := rc.EnableFullDuplex(); err != nil && r.ProtoMajor < 2 {
		// HTTP/2 is full duplex by itself; an HTTP/1 server that cannot be (a
		// ResponseWriter wrapped by middleware, such as http.TimeoutHandler's) cannot
		// serve the mode: 415 has the gateway call again in request/response mode.
		writeError(w, http.StatusUnsupportedMediaType, "duplex", "this server cannot read the request while it writes the response ("+err.Error()+
			"): serve the app's handler unwrapped, or set functions.Config.RequestResponseOnly")
		return
	}
	w.Header().Del("Connection")
	w.Header().Set("Content-Type", ndjson.ContentType)
	w.Header().Set(protocol.VersionHeader, protocol.Version)
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return // the gateway is gone
	}
	var verify invocation.ProofFunc
	if a.verify {
		verify = func(nonce, proof string) error {
			tenant, err := a.sigs.Check(ctx, proof, signature.ClaimRequest(req.Run.ID, req.Run.Attempt, nonce), time.Now())
			if err == nil && tenant != req.Identity.Tenant {
				err = fmt.Errorf("signed for tenant %q, not %q", tenant, req.Identity.Tenant)
			}
			return err
		}
	}
	d := invocation.NewDuplex(w, acks, verify)
	code, answer := a.invoke(ctx, f, req, d)
	b, err := json.Marshal(answer)
	if err != nil {
		code, b = http.StatusInternalServerError, errorBody("output", err.Error())
	}
	_ = d.Answer(code, b) // the gateway is gone; nobody to tell
	d.End()
}
