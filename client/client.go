// Package client calls stepgate functions from Go code: start a run (or start one with a
// message in its mailbox, [StartWithMessage]), wait for its output, attach to it, cancel
// it, send events, messages and requests, read its values and streams, through the
// gateway's HTTP API.
//
// A call is typed by the function it targets: [functions.Register] returns a [Ref] that
// carries the function's input and output types, and a caller without the function's
// code makes one by conversion, client.Ref[Order, Receipt]("orders.checkout"). So
// [Run](ctx, c, checkout, order) only compiles with an Order, and returns a Receipt.
//
// Every request is retried after a network error, a 429 and a 503 (after Retry-After), a
// bounded number of times ([WithRetries]). Starts carry an idempotency key, and events,
// messages and requests a deduplication id, made before the first try and kept by its
// retries, so a retry never starts two runs nor sends anything twice.
package client

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"iter"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Ref names a function and carries its input and output types. [functions.Register]
// returns one; a caller without the function's code converts its name:
// client.Ref[Order, Receipt]("orders.checkout"). The types are the caller's promise: the
// gateway checks none of them.
type Ref[In, Out any] string

// Name returns the function's name.
func (r Ref[In, Out]) Name() string { return string(r) }

// Client calls one gateway with one token. It is safe for concurrent use.
type Client struct {
	base     string
	token    string
	hc       *http.Client
	attempts int // retries after the first try
	initial  time.Duration
	maxDelay time.Duration
}

// Option configures a [Client].
type Option func(*Client)

// WithHTTPClient sets the HTTP client; it should have no Timeout shorter than a minute,
// as results are long-polled. Defaults to a client of its own without a timeout.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithRetries sets how many times a request is tried again after a network error, a 429
// or a 503; 0 for none. Defaults to 3.
func WithRetries(n int) Option { return func(c *Client) { c.attempts = max(0, n) } }

// WithBackoff sets the wait before the first retry, doubled before each next one with
// jitter, and the longest wait between tries. A Retry-After longer than maxDelay is not
// waited for: the error is returned at once. Defaults to 200ms and 10s.
func WithBackoff(initial, maxDelay time.Duration) Option {
	return func(c *Client) { c.initial, c.maxDelay = initial, maxDelay }
}

// New returns a client of the gateway at baseURL (http://127.0.0.1:8080) that sends token
// as its bearer token (none when empty).
func New(baseURL, token string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("client: gateway url %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: gateway url %q: want http://host:port or https://host", baseURL)
	}
	c := &Client{base: strings.TrimRight(baseURL, "/"), token: token, attempts: 3, initial: 200 * time.Millisecond, maxDelay: 10 * time.Second}
	for _, o := range opts {
		o(c)
	}
	c.hc = cmp.Or(c.hc, &http.Client{})
	return c, nil
}

// Status is a run's status.
type Status string

// The statuses of a run; the last three are final.
const (
	StatusScheduled Status = "scheduled"
	StatusQueued    Status = "queued"
	StatusRunning   Status = "running"
	StatusSuspended Status = "suspended"
	StatusCompleted Status = "completed"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
)

// Final reports whether s is a status a run never leaves.
func (s Status) Final() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// Started is a run just started: its id, and its status when the gateway answered. Out is
// its output's type.
type Started[Out any] struct {
	ID     string
	Status Status
}

// Attach waits for the run's output, as [Attach] does.
func (s Started[Out]) Attach(ctx context.Context, c *Client) (Out, error) {
	return Attach[Out](ctx, c, s.ID)
}

// StartOption sets an option of a start.
type StartOption func(*startConfig)

type startConfig struct {
	key     string
	query   url.Values
	delayed bool
}

// IdempotencyKey sets the run's idempotency key (per tenant and function): a start with a
// key already used answers that run, and with another input is a 409. Without it the
// client makes a random key for the start, kept by its retries.
func IdempotencyKey(key string) StartOption { return func(s *startConfig) { s.key = key } }

// Delay starts the run after d instead of at once.
func Delay(d time.Duration) StartOption {
	return func(s *startConfig) { s.query.Set("delay", d.String()); s.delayed = true }
}

// StartAt starts the run at t instead of at once.
func StartAt(t time.Time) StartOption {
	return func(s *startConfig) { s.query.Set("start_at", t.Format(time.RFC3339Nano)); s.delayed = true }
}

// Deadline fails the run (deadline_exceeded) if it has not ended by t.
func Deadline(t time.Time) StartOption {
	return func(s *startConfig) { s.query.Set("deadline", t.Format(time.RFC3339Nano)) }
}

// Timeout fails the run (deadline_exceeded) if it has not ended d after its start.
func Timeout(d time.Duration) StartOption {
	return func(s *startConfig) { s.query.Set("timeout", d.String()) }
}

// Priority sets the run's priority, 1 (first) to 4 (last), over its function's.
func Priority(p int) StartOption {
	return func(s *startConfig) { s.query.Set("priority", strconv.Itoa(p)) }
}

// result is the gateway's RunResult.
type result struct {
	ID     string          `json:"id"`
	Status Status          `json:"status"`
	Output json.RawMessage `json:"output"`
	Error  *ErrorInfo      `json:"error"`
}

// ErrorInfo is a run's error: its type (timeout, step_failed, deadline_exceeded, ...) and
// message.
type ErrorInfo struct {
	Type      string `json:"type"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable,omitempty"`
}

// Start starts a run of fn with input and returns at once with its id and status.
func Start[In, Out any](ctx context.Context, c *Client, fn Ref[In, Out], input In, opts ...StartOption) (Started[Out], error) {
	r, err := c.start(ctx, string(fn), input, false, opts)
	if err != nil {
		return Started[Out]{}, err
	}
	return Started[Out]{ID: r.ID, Status: r.Status}, nil
}

// Run starts a run of fn with input and waits for its output, until ctx is done. A run
// that fails or is cancelled returns a *[RunError]; a ctx done first returns its error
// (the run goes on: [Attach] to it).
func Run[In, Out any](ctx context.Context, c *Client, fn Ref[In, Out], input In, opts ...StartOption) (Out, error) {
	r, err := c.start(ctx, string(fn), input, true, opts)
	if err != nil {
		var zero Out
		return zero, err
	}
	if !r.Status.Final() {
		return Attach[Out](ctx, c, r.ID)
	}
	return outcome[Out](r)
}

// Attach waits for the output of run runID (long-polling its result) until ctx is done. A
// run that fails or is cancelled returns a *[RunError]; a ctx done first returns its
// error.
func Attach[Out any](ctx context.Context, c *Client, runID string) (Out, error) {
	for {
		q := url.Values{"wait": {longPoll(ctx)}}
		var r result
		if err := c.do(ctx, http.MethodGet, "", "/v1/runs/"+url.PathEscape(runID)+"/result", q, nil, &r); err != nil {
			var zero Out
			return zero, err
		}
		if r.Status.Final() {
			return outcome[Out](&r)
		}
		if err := ctx.Err(); err != nil {
			var zero Out
			return zero, fmt.Errorf("run %s is %s: %w", runID, r.Status, err)
		}
	}
}

func outcome[Out any](r *result) (Out, error) {
	var out Out
	switch r.Status {
	case StatusCompleted:
		if len(r.Output) > 0 {
			if err := json.Unmarshal(r.Output, &out); err != nil {
				return out, fmt.Errorf("run %s: decode output into %T: %w", r.ID, out, err)
			}
		}
		return out, nil
	default:
		e := &RunError{RunID: r.ID, Status: r.Status, Type: string(r.Status), Message: "run " + string(r.Status)}
		if r.Error != nil {
			e.Type, e.Message = r.Error.Type, r.Error.Message
		}
		return out, e
	}
}

// RunError is a run that failed or was cancelled.
type RunError struct {
	RunID   string
	Status  Status // StatusFailed or StatusCancelled.
	Type    string // The run's error type.
	Message string
}

func (e *RunError) Error() string {
	return fmt.Sprintf("run %s %s: %s: %s", e.RunID, e.Status, e.Type, e.Message)
}

// Is reports whether e is a cancelled run's error for [ErrCancelled].
func (e *RunError) Is(target error) bool {
	return target == ErrCancelled && e.Status == StatusCancelled
}

// ErrCancelled matches (errors.Is) the *[RunError] of a cancelled run.
var ErrCancelled = errors.New("client: run cancelled")

// RunInfo is a run as [Client.Get] returns it.
type RunInfo struct {
	ID         string          `json:"id"`
	Function   string          `json:"function"`
	Revision   int             `json:"revision"`
	Status     Status          `json:"status"`
	Input      json.RawMessage `json:"input,omitempty"`
	Output     json.RawMessage `json:"output,omitempty"`
	Error      *ErrorInfo      `json:"error,omitempty"`
	CreatedAt  time.Time       `json:"created_at"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
}

// Get returns run runID.
func (c *Client) Get(ctx context.Context, runID string) (*RunInfo, error) {
	var r RunInfo
	if err := c.do(ctx, http.MethodGet, "", "/v1/runs/"+url.PathEscape(runID), url.Values{"journal_limit": {"1"}}, nil, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Cancel cancels run runID, which has not finished. A finished run is a 409 (an
// *[APIError] matching [ErrConflict]); so is a retry of a cancel whose first try reached
// the gateway.
func (c *Client) Cancel(ctx context.Context, runID string) error {
	return c.do(ctx, http.MethodPost, "", "/v1/runs/"+url.PathEscape(runID)+"/cancel", nil, nil, nil)
}

// SendOption sets an option of an event, a message or a request.
type SendOption func(*sendConfig)

type sendConfig struct{ id string }

// ID sets the deduplication id of an event (per tenant), a message or a request (per
// run). Without it the client makes a random one, kept by the send's retries.
func ID(id string) SendOption { return func(s *sendConfig) { s.id = id } }

func sendID(opts []SendOption) string {
	var s sendConfig
	for _, o := range opts {
		o(&s)
	}
	return cmp.Or(s.id, rand.Text())
}

// EventReceipt is the gateway's answer to an event.
type EventReceipt struct {
	ID        string   `json:"id"`
	Runs      []string `json:"runs"`              // The runs the event started.
	Resumed   []string `json:"resumed,omitempty"` // The waiting runs it resumed.
	Duplicate bool     `json:"duplicate,omitempty"`
}

// SendEvent sends an event named name with data: it starts the functions it triggers
// and resumes the runs waiting for it.
func (c *Client) SendEvent(ctx context.Context, name string, data any, opts ...SendOption) (EventReceipt, error) {
	body := map[string]any{"name": name, "data": data, "id": sendID(opts)}
	var r EventReceipt
	err := c.do(ctx, http.MethodPost, "", "/v1/events", nil, body, &r)
	return r, err
}

// MessageReceipt is the gateway's answer to a message.
type MessageReceipt struct {
	ID        string    `json:"id"`
	RunID     string    `json:"run_id"`
	Topic     string    `json:"topic"`
	Consumed  bool      `json:"consumed"` // A receive of the run took it at once.
	Duplicate bool      `json:"duplicate,omitempty"`
	SentAt    time.Time `json:"sent_at"`
}

// Send puts a message with data in run runID's mailbox, taken by a receive of topic.
func (c *Client) Send(ctx context.Context, runID, topic string, data any, opts ...SendOption) (MessageReceipt, error) {
	body := map[string]any{"topic": topic, "data": data, "id": sendID(opts)}
	var r MessageReceipt
	err := c.do(ctx, http.MethodPost, "", "/v1/runs/"+url.PathEscape(runID)+"/messages", nil, body, &r)
	return r, err
}

// StartedWithMessage is the answer to [StartWithMessage]: the run, whether this call
// created it, and the message in its mailbox. Out is the run's output's type.
type StartedWithMessage[Out any] struct {
	Started[Out]
	Created bool // This call created the run; false when key named it already.
	Message MessageReceipt
}

// StartWithMessage starts the run of fn whose idempotency key is key with input, unless
// the key names one already, and puts a message with data in its mailbox, taken by a
// receive of topic: both or neither, in one transaction of the gateway (signal-with-start).
// key (1 to 255 bytes) is also the message's id, so a retry with the same key, input and
// message starts nothing and sends nothing again (Message.Duplicate). It returns at once;
// attach to the run for its output ([Started.Attach]).
//
// The caller needs runs:invoke and events:send. The same key with another input or
// another message, or a key whose run has finished without this message, is a 409 (an
// *[APIError] matching [ErrConflict]); a debounced function is a 400.
func StartWithMessage[In, Out any](ctx context.Context, c *Client, fn Ref[In, Out], key string, input In, topic string, data any) (StartedWithMessage[Out], error) {
	if fn == "" {
		return StartedWithMessage[Out]{}, errEmptyRef("start with a message")
	}
	if key == "" {
		return StartedWithMessage[Out]{}, fmt.Errorf("client: start %s with a message: the idempotency key is empty: it names the run the message goes to (and is the message's id)", fn)
	}
	body := map[string]any{"input": input, "message": map[string]any{"topic": topic, "data": data}}
	var r struct {
		ID      string         `json:"id"`
		Status  Status         `json:"status"`
		Created bool           `json:"created"`
		Message MessageReceipt `json:"message"`
	}
	if err := c.do(ctx, http.MethodPost, key, "/v1/functions/"+url.PathEscape(string(fn))+"/runs/with-message", nil, body, &r); err != nil {
		return StartedWithMessage[Out]{}, fmt.Errorf("start %s with a message: %w", fn, err)
	}
	return StartedWithMessage[Out]{Started: Started[Out]{ID: r.ID, Status: r.Status}, Created: r.Created, Message: r.Message}, nil
}

// RequestError is a request the run replied to with an error, or ended without replying
// to (Type no_reply).
type RequestError struct {
	RunID, RequestID, Type, Message string
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("request %s to run %s: %s: %s", e.RequestID, e.RunID, e.Type, e.Message)
}

type runRequest struct {
	ID     string          `json:"id"`
	Status string          `json:"status"`
	Reply  json.RawMessage `json:"reply"`
	Error  *ErrorInfo      `json:"error"`
}

// Request sends run runID a request named name with data (taken by its
// step.ReceiveRequest) and waits for the reply until ctx is done. A run that replies with
// an error, or ends without replying, returns a *[RequestError].
func Request[Reply any](ctx context.Context, c *Client, runID, name string, data any, opts ...SendOption) (Reply, error) {
	var reply Reply
	id := sendID(opts)
	var r runRequest
	q := url.Values{"wait": {longPoll(ctx)}}
	err := c.do(ctx, http.MethodPost, "", "/v1/runs/"+url.PathEscape(runID)+"/requests", q, map[string]any{"name": name, "data": data, "id": id}, &r)
	for err == nil && r.Status == "pending" {
		if ctx.Err() != nil {
			return reply, fmt.Errorf("request %s to run %s is pending: %w", id, runID, ctx.Err())
		}
		err = c.do(ctx, http.MethodGet, "", "/v1/runs/"+url.PathEscape(runID)+"/requests/"+url.PathEscape(id), url.Values{"wait": {longPoll(ctx)}}, nil, &r)
	}
	if err != nil {
		return reply, err
	}
	if r.Status != "replied" || r.Error != nil {
		e := &RequestError{RunID: runID, RequestID: id, Type: r.Status, Message: "request " + r.Status}
		if r.Error != nil {
			e.Type, e.Message = r.Error.Type, r.Error.Message
		}
		return reply, e
	}
	if len(r.Reply) > 0 {
		if err := json.Unmarshal(r.Reply, &reply); err != nil {
			return reply, fmt.Errorf("request %s to run %s: decode reply into %T: %w", id, runID, reply, err)
		}
	}
	return reply, nil
}

// Value is a value a run published (step.SetValue): the latest of its key.
type Value struct {
	Key     string          `json:"key"`
	Value   json.RawMessage `json:"value"`
	Version int64           `json:"version"` // A later value of the key has a greater one.
	SetAt   time.Time       `json:"set_at"`
}

// Values returns the values run runID published, the latest of each key.
func (c *Client) Values(ctx context.Context, runID string) ([]Value, error) {
	var r struct {
		Values []Value `json:"values"`
	}
	err := c.do(ctx, http.MethodGet, "", "/v1/runs/"+url.PathEscape(runID)+"/values", nil, nil, &r)
	return r.Values, err
}

// APIError is an error answer of the gateway.
type APIError struct {
	Status int    // The HTTP status.
	Code   string // The problem's type when the gateway names one, else the status's code (not_found, conflict, ...).
	Detail string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("stepgate: %d %s: %s", e.Status, e.Code, e.Detail)
}

// Is matches e with the sentinel of its status: [ErrBadRequest], [ErrUnauthorized],
// [ErrForbidden], [ErrNotFound], [ErrConflict], [ErrTooLarge], [ErrTooManyRequests],
// [ErrUnavailable].
func (e *APIError) Is(target error) bool {
	s, ok := statusErrs[e.Status]
	return ok && s.err == target
}

// Sentinels an *[APIError] matches (errors.Is) by its status.
var (
	ErrBadRequest      = errors.New("stepgate: bad request")
	ErrUnauthorized    = errors.New("stepgate: unauthorized")
	ErrForbidden       = errors.New("stepgate: forbidden")
	ErrNotFound        = errors.New("stepgate: not found")
	ErrConflict        = errors.New("stepgate: conflict")
	ErrTooLarge        = errors.New("stepgate: too large")
	ErrTooManyRequests = errors.New("stepgate: too many requests")
	ErrUnavailable     = errors.New("stepgate: unavailable")
)

var statusErrs = map[int]struct {
	code string
	err  error
}{
	400: {"bad_request", ErrBadRequest},
	401: {"unauthorized", ErrUnauthorized},
	403: {"forbidden", ErrForbidden},
	404: {"not_found", ErrNotFound},
	409: {"conflict", ErrConflict},
	413: {"too_large", ErrTooLarge},
	429: {"too_many_requests", ErrTooManyRequests},
	503: {"unavailable", ErrUnavailable},
}

func apiError(status int, body []byte) *APIError {
	var p struct {
		Type   string `json:"type"`
		Detail string `json:"detail"`
	}
	e := &APIError{Status: status, Code: "http_" + strconv.Itoa(status), Detail: strings.TrimSpace(string(body))}
	if s, ok := statusErrs[status]; ok {
		e.Code = s.code
	}
	if json.Unmarshal(body, &p) == nil {
		if p.Type != "" && p.Type != "about:blank" {
			e.Code = p.Type
		}
		if p.Detail != "" {
			e.Detail = p.Detail
		}
	}
	return e
}

// longPollMax is the longest single long-poll: below common proxies' idle timeouts, and
// within the gateway's bounds (15m for a result, 1m for a request's reply).
const longPollMax = 55 * time.Second

// longPoll is the wait of the next long-poll: longPollMax, or less when ctx's deadline is
// nearer.
func longPoll(ctx context.Context) string {
	d := longPollMax
	if dl, ok := ctx.Deadline(); ok {
		d = min(d, time.Until(dl))
	}
	return max(d, 0).Round(time.Millisecond).String()
}

// errEmptyRef is the error of a call through a Ref that names no function.
func errEmptyRef(call string) error {
	return fmt.Errorf("client: %s: the function's Ref is empty (its zero value): a Ref that functions.Register "+
		"returns is set only once Register has run, so one used before (a package variable read before the app "+
		"registers its functions, or in an init that runs first) names no function; register the app's functions "+
		"before calling them, or name the function: client.Ref[In, Out](\"orders.checkout\")", call)
}

func (c *Client) start(ctx context.Context, name string, input any, wait bool, opts []StartOption) (*result, error) {
	if name == "" {
		return nil, errEmptyRef("start")
	}
	s := startConfig{query: url.Values{}}
	for _, o := range opts {
		o(&s)
	}
	// The gateway takes no wait with a delayed start: the caller attaches after.
	if wait && !s.delayed {
		s.query.Set("wait", longPoll(ctx))
	}
	key := cmp.Or(s.key, rand.Text())
	var r result
	if err := c.do(ctx, http.MethodPost, key, "/v1/functions/"+url.PathEscape(name)+"/runs", s.query, input, &r); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return &r, nil
}

// backoff is the wait before retry n (from 0): exponential from c.initial, capped at
// c.maxDelay, with jitter.
func (c *Client) backoff(n int) time.Duration {
	d := min(c.maxDelay, c.initial<<min(n, 30))
	return d/2 + mrand.N(d/2+1)
}

// do sends a request as send does and decodes its 2xx answer's body into out (when not
// nil).
func (c *Client) do(ctx context.Context, method, key, path string, query url.Values, in any, out any) error {
	var body []byte
	if in != nil {
		var err error
		if body, err = json.Marshal(in); err != nil {
			return fmt.Errorf("%s %s: encode body: %w", method, path, err)
		}
	} else if method == http.MethodPost {
		body = []byte("null")
	}
	_, data, err := c.send(ctx, method, key, path, query, body, true)
	if err != nil {
		return err
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

// send sends a request, retrying it after a network error (a body cut off included, when
// read), a 429 or a 503 up to c.attempts times, and returns a 2xx answer: with its body
// read and closed when read, else open for the caller. Any other answer is an
// *[APIError]. A non-empty key is sent as the Idempotency-Key.
func (c *Client) send(ctx context.Context, method, key, path string, query url.Values, body []byte, read bool) (*http.Response, []byte, error) {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	for n := 0; ; n++ {
		req, err := http.NewRequestWithContext(ctx, method, u, bytes.NewReader(body))
		if err != nil {
			return nil, nil, err
		}
		req.Header.Set("Accept", "application/json")
		if !read {
			req.Header.Set("Accept", "text/event-stream")
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := c.hc.Do(req)
		var data []byte
		if err == nil && (read || resp.StatusCode/100 != 2) {
			data, err = io.ReadAll(resp.Body)
			resp.Body.Close()
		}
		if err != nil {
			if ctx.Err() != nil || n >= c.attempts {
				return nil, nil, fmt.Errorf("%s %s: %w", method, path, err)
			}
			if err := sleep(ctx, c.backoff(n)); err != nil {
				return nil, nil, err
			}
			continue
		}
		if resp.StatusCode/100 == 2 {
			return resp, data, nil
		}
		if (resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable) && n < c.attempts {
			d, ok := retryAfter(resp.Header.Get("Retry-After"))
			if !ok {
				d = c.backoff(n)
			}
			if d <= c.maxDelay {
				if err := sleep(ctx, d); err != nil {
					return nil, nil, err
				}
				continue
			}
		}
		return nil, nil, apiError(resp.StatusCode, data)
	}
}

// retryAfter reads a Retry-After header: seconds, or an HTTP date.
func retryAfter(h string) (time.Duration, bool) {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0, false
	}
	if s, err := strconv.Atoi(h); err == nil && s >= 0 {
		return time.Duration(s) * time.Second, true
	}
	if t, err := http.ParseTime(h); err == nil {
		return max(time.Until(t), 0), true
	}
	return 0, false
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Stream reads run runID's stream key live, from offset: it yields each chunk (a JSON
// value) in order as the run writes it, and ends when the run closes the stream or
// finishes. A connection dropped before the end is opened again after the last chunk
// yielded, nothing missed or repeated, up to the client's retries in a row; then, or
// when ctx is done or the gateway refuses, it yields the error and ends.
func (c *Client) Stream(ctx context.Context, runID, key string, offset int) iter.Seq2[json.RawMessage, error] {
	return func(yield func(json.RawMessage, error) bool) {
		path := "/v1/runs/" + url.PathEscape(runID) + "/streams/" + url.PathEscape(key)
		drops := 0
		for {
			resp, _, err := c.send(ctx, http.MethodGet, "", path, url.Values{"offset": {strconv.Itoa(offset)}}, nil, false)
			if err != nil {
				yield(nil, err)
				return
			}
			end, err := readEvents(resp.Body, func(event, id, data string) bool {
				if event != "chunk" {
					return true
				}
				drops = 0
				if n, err := strconv.Atoi(id); err == nil {
					offset = n + 1
				}
				return yield(json.RawMessage(data), nil)
			})
			resp.Body.Close()
			switch {
			case end == "stop", end == "end":
				return
			case end == "expired":
				yield(nil, &APIError{Status: http.StatusUnauthorized, Code: "expired", Detail: "stream " + key + " of run " + runID + ": the token expired"})
				return
			case ctx.Err() != nil:
				yield(nil, ctx.Err())
				return
			case drops >= c.attempts:
				yield(nil, fmt.Errorf("stream %s of run %s: the connection closed before the stream's end: %v", key, runID, err))
				return
			}
			if err := sleep(ctx, c.backoff(drops)); err != nil {
				yield(nil, err)
				return
			}
			drops++
		}
	}
}

// readEvents reads server-sent events from r, calling fn with each until it returns
// false ("stop"), an end or expired event comes ("end", "expired"), or r ends ("", with
// the read error).
func readEvents(r io.Reader, fn func(event, id, data string) bool) (string, error) {
	br := bufio.NewReader(r)
	event, id, data := "message", "", []string(nil)
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return "", err
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			switch event {
			case "end", "expired":
				return event, nil
			}
			if len(data) > 0 && !fn(event, id, strings.Join(data, "\n")) {
				return "stop", nil
			}
			event, id, data = "message", "", nil
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "event":
			event = value
		case "id":
			id = value
		case "data":
			data = append(data, value)
		}
	}
}
