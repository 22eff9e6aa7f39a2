// Package call sends one invocation to a function: it signs the request with its
// tenant's keys, posts it to the function's URL over the tenant's egress client within
// the function's timeout, and returns the function's raw answer, or the failure of the
// call described for the people reading the run.
//
// It guarantees:
//   - the request is a POST of the body as given, with Content-Type application/json,
//     a [signature.Header] that binds the tenant, the method and the URL's path
//     (so that no other function accepts it), and the [protocol.VersionHeader]
//     [protocol.Version];
//   - an answer whose [protocol.VersionHeader] names a version this gateway does not
//     serve, or is not a version, fails as ErrorTypeProtocolVersion, whatever its HTTP
//     status, before its body is judged; an answer without the header is served;
//   - it goes out over the tenant's own client ([egress.Clients.For]), which dials only
//     what the egress policy allows and never follows a redirect;
//   - sending the request and reading its answer take at most the target's timeout;
//   - an answer is read up to MaxAnswer bytes and one more, never further;
//   - the answer reaches the caller's decoder only when it is an HTTP 200 within
//     MaxAnswer bytes, read whole;
//   - when the function is outside the public internet ([egress.Policy.Hide]), every
//     failure, the decoder's included, shows its HTTP status and size only, or that
//     nothing answered; the whole failure goes to the log. A refusal by the egress
//     policy is shown as it is.
//
// It calls none of the journal's writes: what the answer does to the run is the
// invoker's.
package call

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"syscall"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/stepgate/stepgate/internal/helpers/egress"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/signature"
)

// Error types of the failures Call returns.
const (
	// ErrorTypeRequest: the request could not be made (its URL, its signature; the
	// invoker's own: its encoding, its callbacks' tokens).
	ErrorTypeRequest = "request"
	// ErrorTypeTimeout: the function did not answer, or finish its answer, within its
	// timeout.
	ErrorTypeTimeout = "timeout"
	// ErrorTypeConnection: no answer came (refused, reset, closed, not resolved), or it
	// was cut off.
	ErrorTypeConnection = "connection"
	// ErrorTypeHTTPStatus: the function answered another HTTP status than 200.
	ErrorTypeHTTPStatus = "http_status"
	// ErrorTypeLimit: the answer is larger than MaxAnswer bytes.
	ErrorTypeLimit = "limit_exceeded"
	// ErrorTypeProtocolVersion: the answer's protocol version header names a version
	// this gateway does not serve (protocol.CheckSDKVersion), or is not a version.
	ErrorTypeProtocolVersion = "protocol_version"
)

// versionHeader is the value of every request's protocol.VersionHeader, shared so that
// setting it allocates nothing: no one writes to a request's header once it is sent.
var versionHeader = []string{protocol.Version}

// Signer signs a request of tenant at now (auth.SigningKeys).
type Signer interface {
	Sign(ctx context.Context, tenant string, r signature.Request, now time.Time) (string, error)
}

// Caller sends invocations. Its fields are read only; one Caller serves every call at
// once.
type Caller struct {
	Clients   *egress.Clients // the tenants' clients (egress.Policy.Clients of Egress). Required.
	Egress    egress.Policy   // what is hidden of failures outside the public internet
	Keys      Signer          // signs each request with its tenant's keys. Required.
	MaxAnswer int64           // the bound of an answer's body, in bytes. Required.
	// Tracing sends the span in the call's context to the function as its traceparent,
	// and records the function's HTTP status on it.
	Tracing bool
	Log     *slog.Logger // where the whole of a hidden failure goes. Required.
}

// Target is where one invocation goes.
type Target struct {
	URL     string        // the function's registered URL
	Tenant  string        // whose keys sign the request, and whose client sends it
	Timeout time.Duration // the function's timeout: the bound of the whole call
	// LogAttrs name the invocation in the log line of a hidden failure.
	LogAttrs []slog.Attr
}

// DecodeFunc judges an answer that arrived whole as an HTTP 200 within the bound: a
// failure it returns is the invocation's, and is hidden like any other when the function
// is outside the public internet.
type DecodeFunc func(raw []byte) *journal.ErrorInfo

// Call posts body, an invocation signed with t.Tenant's keys, to t.URL within
// t.Timeout, and hands the answer's body to decode when it is an HTTP 200 within
// c.MaxAnswer bytes. It returns the failure of the call, or decode's, described for the
// people reading the run (see the package doc for what it hides), or nil. Call never
// calls decode after a failure of its own.
func (c *Caller) Call(ctx context.Context, t Target, body []byte, decode DecodeFunc) *journal.ErrorInfo {
	return c.call(ctx, t, body, func(ctx context.Context, hreq *http.Request) (*journal.ErrorInfo, reply) {
		return c.send(ctx, t, hreq, decode)
	})
}

// call makes the request of body, signed, to t within t.Timeout, has exchange send it
// and read its answer, and hides the failure as the package doc says.
func (c *Caller) call(ctx context.Context, t Target, body []byte, exchange func(context.Context, *http.Request) (*journal.ErrorInfo, reply)) *journal.ErrorInfo {
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	ctx, route := c.Egress.Trace(ctx, t.URL)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(body))
	if err != nil {
		// Not the URL itself: it may hold credentials, and runs are read more widely.
		return &journal.ErrorInfo{Type: ErrorTypeRequest, Message: "the function's registered URL cannot be requested"}
	}
	// The signature binds the method and path too, so that no other function accepts it.
	sig, err := c.Keys.Sign(ctx, t.Tenant, signature.Request{Method: http.MethodPost, Path: signature.PathOf(hreq.URL), Body: body}, time.Now())
	if err != nil {
		return &journal.ErrorInfo{Type: ErrorTypeRequest, Message: "sign invocation: " + err.Error()}
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set(signature.Header, sig)
	hreq.Header[protocol.VersionHeader] = versionHeader
	if c.Tracing {
		// The function's own spans join the run's trace, under this invocation.
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(hreq.Header))
	}
	failure, got := exchange(ctx, hreq)
	if failure != nil && c.Egress.Hide(route) {
		failure = c.hide(ctx, t, failure, got)
	}
	return failure
}

// reply is what a function's answer showed of itself before it failed: its HTTP status
// (0: no answer) and the bytes of its body read (more than MaxAnswer: cut there).
type reply struct {
	status  int
	size    int
	refused bool // the egress policy refused the address; no connection was made
}

// do sends hreq, the invocation t, over the tenant's client, and returns the response
// (its status traced), or the failure of a request that got none.
func (c *Caller) do(ctx context.Context, t Target, hreq *http.Request) (*http.Response, *journal.ErrorInfo, reply) {
	resp, err := c.Clients.For(t.Tenant).Do(hreq)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, &journal.ErrorInfo{Type: ErrorTypeTimeout, Message: fmt.Sprintf("function did not answer within its timeout of %s", t.Timeout)}, reply{}
		}
		return nil, &journal.ErrorInfo{Type: ErrorTypeConnection, Message: connectionError(err)}, reply{refused: egress.IsRefused(err)}
	}
	if c.Tracing {
		traceHTTPStatus(ctx, resp.StatusCode)
	}
	return resp, nil, reply{}
}

// send sends hreq, the invocation t, reads the answer and hands it to decode.
func (c *Caller) send(ctx context.Context, t Target, hreq *http.Request, decode DecodeFunc) (*journal.ErrorInfo, reply) {
	resp, failure, got := c.do(ctx, t, hreq)
	if failure != nil {
		return failure, got
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, c.MaxAnswer+1))
	failure = checkVersion(resp.Header)
	if failure == nil {
		failure = c.answer(ctx, t, resp, raw, err)
	}
	if failure == nil {
		failure = decode(raw)
	}
	return failure, reply{status: resp.StatusCode, size: len(raw)}
}

// answer returns the failure of the answer resp, whose body is raw (err: reading it
// failed there), or nil when it is an HTTP 200 within the bound.
func (c *Caller) answer(ctx context.Context, t Target, resp *http.Response, raw []byte, err error) *journal.ErrorInfo {
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return &journal.ErrorInfo{Type: ErrorTypeTimeout, Message: fmt.Sprintf("function did not finish its answer within its timeout of %s", t.Timeout)}
		}
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
			// (A reset: the function closed its side with the gateway's bytes unread, as
			// a duplex request's body may still be going out.)
			return &journal.ErrorInfo{Type: ErrorTypeConnection, Message: fmt.Sprintf(
				"the function closed the connection in the middle of its answer (HTTP %d, after %d bytes of its body)", resp.StatusCode, len(raw))}
		}
		return &journal.ErrorInfo{Type: ErrorTypeConnection, Message: "reading the function's answer: " + trimErr(err)}
	}
	if resp.StatusCode != http.StatusOK {
		if loc := resp.Header.Get("Location"); loc != "" && resp.StatusCode >= 300 && resp.StatusCode < 400 {
			return &journal.ErrorInfo{Type: ErrorTypeHTTPStatus, Message: fmt.Sprintf(
				"function answered HTTP %d, a redirect to %s, which the gateway does not follow: register the URL it redirects to", resp.StatusCode, Snippet([]byte(loc)))}
		}
		return &journal.ErrorInfo{Type: ErrorTypeHTTPStatus, Message: fmt.Sprintf("function answered HTTP %d: %s", resp.StatusCode, Snippet(raw))}
	}
	if int64(len(raw)) > c.MaxAnswer {
		return &journal.ErrorInfo{Type: ErrorTypeLimit, Message: fmt.Sprintf("function's answer is larger than the gateway's limit of %d bytes", c.MaxAnswer)}
	}
	return nil
}

// checkVersion returns the failure of an answer whose header h says a protocol version
// this gateway does not serve, or nil: one header read and, unless it says this
// gateway's own version or none, a parse that allocates nothing unless it fails.
func checkVersion(h http.Header) *journal.ErrorInfo {
	v := h.Get(protocol.VersionHeader)
	if v == "" {
		return nil
	}
	if err := protocol.CheckSDKVersion("the function's SDK", v); err != nil {
		return &journal.ErrorInfo{Type: ErrorTypeProtocolVersion, Message: err.Error()}
	}
	return nil
}

// attrHTTPStatus is the invocation span's attribute of the function's HTTP status.
const attrHTTPStatus = attribute.Key("http.response.status_code")

// traceHTTPStatus records the function's HTTP status on the invocation's span in ctx.
func traceHTTPStatus(ctx context.Context, status int) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attrHTTPStatus.Int(status))
	}
}
