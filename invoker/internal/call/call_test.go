package call_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/stepgate/stepgate/internal/helpers/egress"
	"github.com/stepgate/stepgate/invoker/internal/call"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol/signature"
)

// loopback opens the test servers' addresses, as an operator opens a network.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// keys signs with one static ed25519 key, whatever the tenant.
type keys struct{ key ed25519.PrivateKey }

func (k keys) Sign(_ context.Context, tenant string, r signature.Request, now time.Time) (string, error) {
	return signature.Sign(now, tenant, r, signature.SigningKey{Ed25519: k.key}), nil
}

// newCaller returns a Caller of policy, with a 1 KiB bound on answers, its signing
// key's public half, and the buffer its log writes to.
func newCaller(t *testing.T, policy egress.Policy) (*call.Caller, ed25519.PublicKey, *bytes.Buffer) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	var log bytes.Buffer
	return &call.Caller{
		Clients: policy.Clients(), Egress: policy, Keys: keys{priv}, MaxAnswer: 1024,
		Log: slog.New(slog.NewTextHandler(&syncWriter{w: &log}, nil)),
	}, pub, &log
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

// detailed is a policy that opens loopback and shows the whole failure of a call there.
var detailed = egress.Policy{AllowedNetworks: loopback, PrivateErrorDetail: true}

// hidden is a policy that opens loopback and hides the detail of a failed call there.
var hidden = egress.Policy{AllowedNetworks: loopback}

func target(url string) call.Target {
	return call.Target{URL: url, Tenant: "acme", Timeout: time.Minute, LogAttrs: []slog.Attr{slog.String("run_id", "run-1")}}
}

// accept is a decoder that accepts every answer and keeps the last.
func accept(got *[]byte) call.DecodeFunc {
	return func(raw []byte) *journal.ErrorInfo { *got = raw; return nil }
}

// refuse is a decoder that must not be called.
func refuse(t *testing.T) call.DecodeFunc {
	return func(raw []byte) *journal.ErrorInfo {
		t.Errorf("decode was called with %q after a failure", raw)
		return nil
	}
}

func server(t *testing.T, h http.HandlerFunc) *httptest.Server {
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// closedURL returns the URL of a loopback port nothing listens at.
func closedURL(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	url := "http://" + l.Addr().String() + "/"
	require.NoError(t, l.Close())
	return url
}

// hijack returns a server whose handler writes raw on the bare connection and then ends
// it with end.
func hijack(t *testing.T, raw string, end func(net.Conn)) *httptest.Server {
	return server(t, func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		_, _ = buf.WriteString(raw)
		_ = buf.Flush()
		end(conn)
	})
}

// TestValidAnswerIsReturnedRaw: a 200 within the bound reaches the decoder byte for
// byte, and the call succeeds; at exactly the bound too.
func TestValidAnswerIsReturnedRaw(t *testing.T) {
	t.Parallel()
	for _, body := range []string{`{"status":"completed","output":  1}`, strings.Repeat("x", 1024)} {
		s := server(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, body) })
		c, _, _ := newCaller(t, detailed)
		var got []byte
		require.Nil(t, c.Call(t.Context(), target(s.URL), []byte(`{}`), accept(&got)))
		require.Equal(t, body, string(got))
	}
}

// TestDecodeFailureIsTheCalls: what the decoder refuses is the call's failure.
func TestDecodeFailureIsTheCalls(t *testing.T) {
	t.Parallel()
	s := server(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "nope") })
	c, _, _ := newCaller(t, detailed)
	bad := &journal.ErrorInfo{Type: "bad_answer", Message: "no"}
	got := c.Call(t.Context(), target(s.URL), nil, func([]byte) *journal.ErrorInfo { return bad })
	require.Equal(t, bad, got)
}

// TestSignatureVerifies: the request is a JSON POST of the body as given, whose
// signature verifies with the tenant's public key for its method and path, and for no
// other path.
func TestSignatureVerifies(t *testing.T) {
	t.Parallel()
	type seen struct {
		method, path, header, contentType string
		body                              []byte
	}
	got := make(chan seen, 1)
	s := server(t, func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- seen{r.Method, signature.RequestPath(r), r.Header.Get(signature.Header), r.Header.Get("Content-Type"), body}
		_, _ = io.WriteString(w, "{}")
	})
	c, pub, _ := newCaller(t, detailed)
	body := []byte(`{"protocol":1}`)
	var raw []byte
	require.Nil(t, c.Call(t.Context(), target(s.URL+"/fns/a%20b?x=1"), body, accept(&raw)))
	r := <-got
	require.Equal(t, http.MethodPost, r.method)
	require.Equal(t, "/fns/a%20b", r.path)
	require.Equal(t, "application/json", r.contentType)
	require.Equal(t, body, r.body)
	k := signature.Keys{Public: []ed25519.PublicKey{pub}}
	tenant, err := signature.Verify(r.header, signature.Request{Method: r.method, Path: r.path, Body: r.body}, time.Now(), 0, k)
	require.NoError(t, err)
	require.Equal(t, "acme", tenant)
	_, err = signature.Verify(r.header, signature.Request{Method: r.method, Path: "/fns/other", Body: r.body}, time.Now(), 0, k)
	require.ErrorIs(t, err, signature.ErrMismatch)
}

// TestTimeout: a function that does not answer, or does not finish its answer, within
// its timeout fails the call as a timeout naming it.
func TestTimeout(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	silent := server(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	halfway := server(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		_, _ = io.WriteString(w, "{")
		http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	c, _, _ := newCaller(t, detailed)
	for url, msg := range map[string]string{
		silent.URL:  "function did not answer within its timeout of 50ms",
		halfway.URL: "function did not finish its answer within its timeout of 50ms",
	} {
		tg := target(url)
		tg.Timeout = 50 * time.Millisecond
		require.Equal(t, &journal.ErrorInfo{Type: call.ErrorTypeTimeout, Message: msg}, c.Call(t.Context(), tg, nil, refuse(t)))
	}
}

// TestConnectionRefused: nothing listening at the URL is a connection failure that
// says so.
func TestConnectionRefused(t *testing.T) {
	t.Parallel()
	c, _, _ := newCaller(t, detailed)
	require.Equal(t, &journal.ErrorInfo{Type: call.ErrorTypeConnection,
		Message: "could not connect to the function: connection refused (nothing listens at its registered URL)"},
		c.Call(t.Context(), target(closedURL(t)), nil, refuse(t)))
}

// TestCutMidBody: a function that closes or resets the connection in the middle of its
// answer fails the call as a connection failure.
func TestCutMidBody(t *testing.T) {
	t.Parallel()
	const head = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n0123456789"
	closed := hijack(t, head, func(conn net.Conn) { _ = conn.Close() })
	c, _, _ := newCaller(t, detailed)
	require.Equal(t, &journal.ErrorInfo{Type: call.ErrorTypeConnection,
		Message: "the function closed the connection in the middle of its answer (HTTP 200, after 10 bytes of its body)"},
		c.Call(t.Context(), target(closed.URL), nil, refuse(t)))

	// A reset (RST) after the headers: the body's read fails, however much of it came.
	reset := hijack(t, head, func(conn net.Conn) {
		_ = conn.(*net.TCPConn).SetLinger(0)
		_ = conn.Close()
	})
	got := c.Call(t.Context(), target(reset.URL), nil, refuse(t))
	require.Equal(t, call.ErrorTypeConnection, got.Type)
	require.Contains(t, []string{
		"the function closed the connection in the middle of its answer (HTTP 200, after 10 bytes of its body)",
		"reading the function's answer: read: connection reset by peer",
	}, got.Message)

	// A reset before any answer.
	early := server(t, func(w http.ResponseWriter, r *http.Request) {
		conn, _, _ := http.NewResponseController(w).Hijack()
		_ = conn.(*net.TCPConn).SetLinger(0)
		_ = conn.Close()
	})
	got = c.Call(t.Context(), target(early.URL), nil, refuse(t))
	require.Equal(t, call.ErrorTypeConnection, got.Type)
	require.Contains(t, []string{
		"the function reset the connection before answering",
		"the function closed the connection after accepting the request, without answering",
	}, got.Message)
}

// TestNon200ShowsSnippet: another status than 200 fails the call with the status and
// the start of the body, as storable text.
func TestNon200ShowsSnippet(t *testing.T) {
	t.Parallel()
	for body, shown := range map[string]string{
		"  upstream\x00 down \xff ":  "upstream\uFFFD down \uFFFD",
		"":                           "(empty body)",
		strings.Repeat("a", 400):     strings.Repeat("a", 300) + "…",
		strings.Repeat("é", 600)[1:]: strings.ToValidUTF8(strings.Repeat("é", 600)[1:301], "\uFFFD") + "…",
	} {
		s := server(t, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, body)
		})
		c, _, _ := newCaller(t, detailed)
		require.Equal(t, &journal.ErrorInfo{Type: call.ErrorTypeHTTPStatus, Message: "function answered HTTP 502: " + shown},
			c.Call(t.Context(), target(s.URL), nil, refuse(t)))
	}
}

// TestRedirectIsNotFollowed: a redirect fails the call, naming where it leads; nothing
// is requested there.
func TestRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	followed := make(chan struct{}, 1)
	s := server(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			followed <- struct{}{}
		}
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	})
	c, _, _ := newCaller(t, detailed)
	require.Equal(t, &journal.ErrorInfo{Type: call.ErrorTypeHTTPStatus, Message: "function answered HTTP 307, a redirect to /elsewhere, " +
		"which the gateway does not follow: register the URL it redirects to"}, c.Call(t.Context(), target(s.URL), nil, refuse(t)))
	require.Empty(t, followed)
}

// TestAnswerOverTheBound: a 200 larger than MaxAnswer fails the call as a limit naming
// it, and is read no further than one byte past it.
func TestAnswerOverTheBound(t *testing.T) {
	t.Parallel()
	wrote := make(chan error, 1)
	s := server(t, func(w http.ResponseWriter, r *http.Request) {
		_, err := io.WriteString(w, strings.Repeat("x", 1025))
		wrote <- err
	})
	c, _, _ := newCaller(t, detailed)
	require.Equal(t, &journal.ErrorInfo{Type: call.ErrorTypeLimit, Message: "function's answer is larger than the gateway's limit of 1024 bytes"},
		c.Call(t.Context(), target(s.URL), nil, refuse(t)))
	require.NoError(t, <-wrote)
}

// TestPrivateFailuresAreHidden: the failure of a call to a function outside the public
// internet shows its HTTP status and size only, or that nothing answered, the decoder's
// failure included; the log has the whole failure.
func TestPrivateFailuresAreHidden(t *testing.T) {
	t.Parallel()
	const why = " (the function is not on the public internet, so its run does not show more; the gateway's log does)"
	secret := server(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, "secret-internal-host")
	})
	big := server(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, strings.Repeat("x", 5000)) })
	fine := server(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "{}") })
	c, _, log := newCaller(t, hidden)
	require.Equal(t, &journal.ErrorInfo{Type: call.ErrorTypeHTTPStatus, Message: "function answered HTTP 500 with 20 bytes" + why},
		c.Call(t.Context(), target(secret.URL), nil, refuse(t)))
	require.Contains(t, log.String(), "secret-internal-host")
	require.Contains(t, log.String(), "run_id=run-1")
	require.Contains(t, log.String(), "error_type=http_status")

	require.Equal(t, &journal.ErrorInfo{Type: call.ErrorTypeLimit, Message: "function answered HTTP 200 with more than 1024 bytes, which failed as limit_exceeded" + why},
		c.Call(t.Context(), target(big.URL), nil, refuse(t)))
	require.Equal(t, &journal.ErrorInfo{Type: "bad_answer", Message: "function answered HTTP 200 with 2 bytes, which failed as bad_answer" + why},
		c.Call(t.Context(), target(fine.URL), nil, func([]byte) *journal.ErrorInfo {
			return &journal.ErrorInfo{Type: "bad_answer", Message: "await of kind secret-kind"}
		}))
	require.Contains(t, log.String(), "secret-kind")

	// Closed and open-but-silent ports look alike.
	nothing := &journal.ErrorInfo{Type: call.ErrorTypeConnection, Message: "function could not be reached or did not answer" + why}
	require.Equal(t, nothing, c.Call(t.Context(), target(closedURL(t)), nil, refuse(t)))
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	silent := server(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	})
	tg := target(silent.URL)
	tg.Timeout = 50 * time.Millisecond
	require.Equal(t, nothing, c.Call(t.Context(), tg, nil, refuse(t)))
}

// TestRefusalIsShown: a refusal by the egress policy is shown as it is, naming the
// address and the rule, even when the policy hides private failures: no connection was
// made. Another tenant's networks are refused so.
func TestRefusalIsShown(t *testing.T) {
	t.Parallel()
	s := server(t, func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "{}") })
	policy := egress.Policy{TenantNetworks: map[string][]netip.Prefix{"acme": loopback}}
	c, _, log := newCaller(t, policy)
	var got []byte
	require.Nil(t, c.Call(t.Context(), target(s.URL), nil, accept(&got)), "acme's own network")
	other := target(s.URL)
	other.Tenant = "globex"
	failure := c.Call(t.Context(), other, nil, refuse(t))
	require.Equal(t, call.ErrorTypeConnection, failure.Type)
	require.Contains(t, failure.Message, "127.0.0.1 is a loopback address")
	require.Empty(t, log.String(), "a refusal is not a hidden failure")
}

// TestTracing: with Tracing, the function gets the call's span as its traceparent, and
// the span records the HTTP status; without, no traceparent is sent.
func TestTracing(t *testing.T) {
	t.Parallel()
	parents := make(chan string, 2)
	s := server(t, func(w http.ResponseWriter, r *http.Request) {
		parents <- r.Header.Get("traceparent")
		w.WriteHeader(http.StatusTeapot)
	})
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	for _, tracing := range []bool{true, false} {
		c, _, _ := newCaller(t, detailed)
		c.Tracing = tracing
		ctx, span := tp.Tracer("test").Start(t.Context(), "invoke")
		require.Equal(t, call.ErrorTypeHTTPStatus, c.Call(ctx, target(s.URL), nil, refuse(t)).Type)
		span.End()
		parent := <-parents
		if !tracing {
			require.Empty(t, parent)
			continue
		}
		require.Contains(t, parent, span.SpanContext().TraceID().String())
		require.Contains(t, parent, span.SpanContext().SpanID().String())
	}
	ended := rec.Ended()
	require.Len(t, ended, 2)
	var status []int64
	for _, sp := range ended {
		for _, a := range sp.Attributes() {
			if a.Key == "http.response.status_code" {
				status = append(status, a.Value.AsInt64())
			}
		}
	}
	require.Equal(t, []int64{http.StatusTeapot}, status, "the traced call's span only")
}
