package gateway_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/helpers/tracing"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// tracedApp serves a function "traced" (a step, a step that fails once and is retried,
// a sleep) and records, for each invocation, the traceparent header it got and the span
// context its code saw.
type tracedApp struct {
	mu          sync.Mutex
	headers     []string
	contexts    []trace.SpanContext
	flakyCalled atomic.Int32
}

func (a *tracedApp) serve(t *testing.T, s *stack.Stack) {
	app := s.NewApp()
	functions.Register(app, "traced", func(ctx context.Context, _ struct{}) (string, error) {
		a.mu.Lock()
		a.contexts = append(a.contexts, trace.SpanContextFromContext(ctx))
		a.mu.Unlock()
		if _, err := step.Run(ctx, "first", func(context.Context) (int, error) { return 1, nil }); err != nil {
			return "", err
		}
		if _, err := step.Run(ctx, "flaky", func(context.Context) (int, error) {
			if a.flakyCalled.Add(1) == 1 {
				return 0, errors.New("not yet")
			}
			return 2, nil
		}, step.MaxAttempts(3), step.Backoff(time.Millisecond, time.Millisecond)); err != nil {
			return "", err
		}
		if err := step.Sleep(ctx, "nap", time.Millisecond); err != nil {
			return "", err
		}
		return "done", nil
	})
	s.Sync(t, s.ServeApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			a.mu.Lock()
			a.headers = append(a.headers, r.Header.Get("traceparent"))
			a.mu.Unlock()
		}
		app.ServeHTTP(w, r)
	})))
}

// spansOf returns the ended spans of trace id, by name.
func spansOf(exp *tracetest.InMemoryExporter, id trace.TraceID) map[string][]tracetest.SpanStub {
	out := map[string][]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		if s.SpanContext.TraceID() == id {
			out[s.Name] = append(out[s.Name], s)
		}
	}
	return out
}

func attr(s tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

// TestTraces runs a function with steps, a step retry and a sleep, with traces on, and
// reads its trace from the OTel SDK's in-memory exporter: one trace whose id is the
// run's, the run's root span, the start request's span (linked to the caller's
// traceparent), three invocations under the root with their URL (masked), attempt and
// outcome, each entry and await under the invocation that made it; and the function
// got, on every invocation, a traceparent of its invocation's span, in its code's
// context too.
func TestTraces(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := tracing.NewProvider(sdktrace.WithSyncer(exp))
	s := stack.Start(t, stack.Options{TracerProvider: tp})
	a := &tracedApp{}
	a.serve(t, s)

	caller := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:  trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, TraceFlags: trace.FlagsSampled,
	})
	withCaller := func(ctx context.Context, r *http.Request) error {
		propagation.TraceContext{}.Inject(trace.ContextWithRemoteSpanContext(ctx, caller), propagation.HeaderCarrier(r.Header))
		return nil
	}
	resp, err := s.Client(t, s.Token).StartRunWithBodyWithResponse(t.Context(), "traced", &protocol.StartRunParams{Wait: ptr("30s")},
		"application/json", strings.NewReader(`{}`), withCaller)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	require.Equal(t, protocol.RunStatusCompleted, resp.JSON200.Status)
	runID := resp.JSON200.ID
	traceID := tracing.RunTraceID(runID)
	require.True(t, traceID.IsValid())
	root := tracing.RunSpanContext(runID)

	// The run's end is told before its last spans end: wait for them.
	var spans map[string][]tracetest.SpanStub
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		spans = spansOf(exp, traceID)
		assert.Len(ct, spans["run traced"], 1)
		assert.Len(ct, spans["invoke traced"], 3)
		assert.Len(ct, spans["start traced"], 1)
	}, 10*time.Second, 10*time.Millisecond)

	run := spans["run traced"][0]
	require.Equal(t, root.SpanID(), run.SpanContext.SpanID(), "the root's id is derived from the run id")
	require.False(t, run.Parent.IsValid(), "the root has no parent")
	require.Equal(t, "completed", attr(run, "stepgate.run.status").AsString())
	require.Equal(t, runID, attr(run, "stepgate.run.id").AsString())

	start := spans["start traced"][0]
	require.Equal(t, root.SpanID(), start.Parent.SpanID())
	require.Equal(t, trace.SpanKindServer, start.SpanKind)
	require.Len(t, start.Links, 1, "the caller's traceparent is linked")
	require.Equal(t, caller.TraceID(), start.Links[0].SpanContext.TraceID())
	require.Equal(t, caller.SpanID(), start.Links[0].SpanContext.SpanID())

	// The invocations, by invocation number.
	invokes := map[int64]tracetest.SpanStub{}
	for _, inv := range spans["invoke traced"] {
		require.Equal(t, root.SpanID(), inv.Parent.SpanID(), "an invocation is a child of the run")
		require.Equal(t, trace.SpanKindClient, inv.SpanKind)
		require.True(t, strings.HasSuffix(attr(inv, "url.full").AsString(), "/xxxxx"), "its path masked: %s", attr(inv, "url.full").AsString())
		require.Equal(t, int64(200), attr(inv, "http.response.status_code").AsInt64())
		require.Positive(t, attr(inv, "stepgate.attempt").AsInt64())
		invokes[attr(inv, "stepgate.invocation").AsInt64()] = inv
	}
	require.Len(t, invokes, 3)
	require.Equal(t, "suspended", attr(invokes[1], "stepgate.outcome").AsString())
	require.Equal(t, "suspended", attr(invokes[2], "stepgate.outcome").AsString())
	require.Equal(t, "completed", attr(invokes[3], "stepgate.outcome").AsString())

	child := func(name string, parent tracetest.SpanStub) tracetest.SpanStub {
		t.Helper()
		require.Len(t, spans[name], 1, name)
		s := spans[name][0]
		require.Equal(t, parent.SpanContext.SpanID(), s.Parent.SpanID(), "%s is a child of its invocation", name)
		require.False(t, s.EndTime.Before(s.StartTime), name)
		return s
	}
	first := child("step first", invokes[1])
	require.Equal(t, int64(1), attr(first, "stepgate.entry.seq").AsInt64())
	require.Equal(t, "step", attr(first, "stepgate.entry.kind").AsString())
	retry := child("retry flaky", invokes[1])
	require.Equal(t, int64(2), attr(retry, "stepgate.entry.seq").AsInt64())
	flaky := child("step flaky", invokes[2])
	require.Equal(t, int64(2), attr(flaky, "stepgate.entry.attempt").AsInt64(), "journaled by its second attempt")
	nap := child("sleep nap", invokes[2])
	require.Equal(t, "sleep", attr(nap, "stepgate.await.kind").AsString())
	require.True(t, nap.EndTime.After(nap.StartTime), "a sleep lasts until its wake time")

	// The function got its invocation's traceparent, and saw it in its context.
	a.mu.Lock()
	defer a.mu.Unlock()
	require.Len(t, a.headers, 3)
	for i, h := range a.headers {
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(t.Context(), propagation.MapCarrier{"traceparent": h}))
		require.True(t, sc.IsValid(), "traceparent %q", h)
		require.Equal(t, traceID, sc.TraceID(), "invocation %d is in the run's trace", i+1)
		require.Equal(t, invokes[int64(i+1)].SpanContext.SpanID(), sc.SpanID(), "its parent is invocation %d's span", i+1)
		require.True(t, sc.IsSampled())
		require.Equal(t, sc.TraceID(), a.contexts[i].TraceID(), "the function's context carries it")
		require.Equal(t, sc.SpanID(), a.contexts[i].SpanID())
		require.True(t, a.contexts[i].IsRemote())
	}
}

// TestTracesFailedInvocation: an invocation answered HTTP 500 is an "error" span with
// the status and the error's type, and the next attempt joins the same trace.
func TestTracesFailedInvocation(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	s := stack.Start(t, stack.Options{TracerProvider: tracing.NewProvider(sdktrace.WithSyncer(exp))})
	var calls atomic.Int32
	url := s.ServeApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			http.Error(w, "down for a moment", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"status":"completed","output":1}`))
	}))
	c := s.Client(t, s.Token)
	reg, err := c.RegisterFunctionWithResponse(t.Context(), "bumpy", protocol.FunctionRegistration{URL: url,
		Config: &protocol.FunctionConfig{Retries: &protocol.RetryPolicy{InitialInterval: ptr("1ms"), MaxInterval: ptr("1ms")}}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, reg.StatusCode(), string(reg.Body))
	res := startWaiting(t, c, "bumpy", `{}`)
	require.Equal(t, protocol.RunStatusCompleted, res.Status)

	var spans map[string][]tracetest.SpanStub
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		spans = spansOf(exp, tracing.RunTraceID(res.ID))
		assert.Len(ct, spans["invoke bumpy"], 2)
		assert.Len(ct, spans["run bumpy"], 1)
	}, 10*time.Second, 10*time.Millisecond)
	byOutcome := map[string]tracetest.SpanStub{}
	for _, inv := range spans["invoke bumpy"] {
		byOutcome[attr(inv, "stepgate.outcome").AsString()] = inv
	}
	failed, ok := byOutcome["error"]
	require.True(t, ok, "the failed invocation's outcome is error")
	require.Equal(t, int64(500), attr(failed, "http.response.status_code").AsInt64())
	require.Equal(t, "http_status", attr(failed, "error.type").AsString())
	require.Equal(t, codes.Error, failed.Status.Code)
	require.Equal(t, "http_status", failed.Status.Description, "the error's type: no message by default")
	done, ok := byOutcome["completed"]
	require.True(t, ok)
	require.Equal(t, codes.Unset, done.Status.Code)
	require.Equal(t, failed.Parent.SpanID(), done.Parent.SpanID(), "both under the run's root")
}

// TestTracesOff: without a tracer provider, functions get no traceparent and see no
// span context.
func TestTracesOff(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	a := &tracedApp{}
	a.serve(t, s)
	caller := "00-0102030405060708090a0b0c0d0e0f10-0102030405060708-01"
	resp, err := s.Client(t, s.Token).StartRunWithBodyWithResponse(t.Context(), "traced", &protocol.StartRunParams{Wait: ptr("30s")},
		"application/json", strings.NewReader(`{}`), func(_ context.Context, r *http.Request) error {
			r.Header.Set("traceparent", caller)
			return nil
		})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	require.Equal(t, protocol.RunStatusCompleted, resp.JSON200.Status)
	a.mu.Lock()
	defer a.mu.Unlock()
	require.Len(t, a.headers, 3)
	for i := range a.headers {
		require.Empty(t, a.headers[i])
		require.False(t, a.contexts[i].IsValid())
	}
}

// otlpReceiver is an OTLP/HTTP trace receiver (protobuf, uncompressed): it keeps the
// spans it is sent, and the raw bodies they came in.
type otlpReceiver struct {
	URL    string
	mu     sync.Mutex
	spans  []*tracepb.Span
	bodies [][]byte
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, err := io.ReadAll(req.Body)
		if err != nil || req.URL.Path != "/v1/traces" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		var export collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &export); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.bodies = append(r.bodies, body)
		for _, rs := range export.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

// span returns the spans received named name.
func (r *otlpReceiver) named(name string) []*tracepb.Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range r.spans {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// received reports whether any body received holds s.
func (r *otlpReceiver) received(s string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.bodies {
		if bytes.Contains(b, []byte(s)) {
			return true
		}
	}
	return false
}

// TestTracesExportNoSecrets exports a failing run's trace over OTLP/HTTP to a receiver:
// by default no error message, input or answer body reaches it (the status
// descriptions are the errors' types); with STEPGATE_TRACE_ERROR_MESSAGES the messages
// do, cut to tracing.MaxMessageBytes. Inputs and outputs never do.
func TestTracesExportNoSecrets(t *testing.T) {
	t.Parallel()
	const inputSecret, bodySecret, messageSecret = "input-secret-4111", "body-secret-hunter2", "message-secret-0xdead"
	for _, messages := range []bool{false, true} {
		t.Run(fmt.Sprintf("Messages=%v", messages), func(t *testing.T) {
			t.Parallel()
			recv := newOTLPReceiver(t)
			exp, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpointURL(recv.URL+"/v1/traces"))
			require.NoError(t, err)
			tp := tracing.Export(exp)
			t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
			s := stack.Start(t, stack.Options{TracerProvider: tp, TraceErrorMessages: messages})
			c := s.Client(t, s.Token)
			var calls atomic.Int32
			long := messageSecret + strings.Repeat("é", 3000) // 6000 bytes, cut in a rune
			register(t, s, c, "secretive", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if calls.Add(1) == 1 {
					http.Error(w, bodySecret, http.StatusInternalServerError)
					return
				}
				_, _ = fmt.Fprintf(w, `{"status":"failed","error":{"type":"declined","message":%q}}`, long)
			}), fastRetries)
			res := startWaiting(t, c, "secretive", `{"card":"`+inputSecret+`"}`)
			require.Equal(t, protocol.RunStatusFailed, res.Status)

			var run, invocations []*tracepb.Span
			require.EventuallyWithT(t, func(ct *assert.CollectT) {
				assert.NoError(ct, tp.ForceFlush(t.Context()))
				run, invocations = recv.named("run secretive"), recv.named("invoke secretive")
				assert.Len(ct, run, 1)
				assert.Len(ct, invocations, 2)
			}, 10*time.Second, 10*time.Millisecond)
			require.Equal(t, tracepb.Status_STATUS_CODE_ERROR, run[0].Status.Code)
			require.False(t, recv.received(inputSecret), "inputs are never exported")
			descriptions := map[string]bool{}
			for _, inv := range invocations {
				descriptions[inv.Status.Message] = true
			}
			if !messages {
				require.Equal(t, "declined", run[0].Status.Message)
				require.Equal(t, map[string]bool{"http_status": true, "": true}, descriptions, "the answer that failed the run is a valid answer")
				require.False(t, recv.received(bodySecret), "no answer body is exported")
				require.False(t, recv.received(messageSecret), "no error message is exported")
				return
			}
			msg := run[0].Status.Message
			require.True(t, strings.HasPrefix(msg, messageSecret), msg)
			require.LessOrEqual(t, len(msg), tracing.MaxMessageBytes)
			require.True(t, strings.HasSuffix(msg, "…"))
			require.True(t, utf8.ValidString(msg))
			require.True(t, recv.received(bodySecret), "the failed invocation's message, opted in")
		})
	}
}

// TestTracesMaskTheFunctionURL exports the trace of a run of a function whose URL holds
// secrets, as a webhook-style URL does (in its user information, its path and its query
// values), over OTLP/HTTP to a receiver: the invocations' url.full is the URL masked as
// the API shows it to readers (redact.URL), and no span's name or attribute,
// nor any byte exported, holds a secret, error messages included.
func TestTracesMaskTheFunctionURL(t *testing.T) {
	t.Parallel()
	const userSecret, pathSecret, querySecret = "user-secret-5a1c", "path-secret-7f3a", "query-secret-9c2e"
	recv := newOTLPReceiver(t)
	exp, err := otlptracehttp.New(t.Context(), otlptracehttp.WithEndpointURL(recv.URL+"/v1/traces"))
	require.NoError(t, err)
	tp := tracing.Export(exp)
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	s := stack.Start(t, stack.Options{TracerProvider: tp, TraceErrorMessages: true})
	c := s.Client(t, s.Token)
	var calls atomic.Int32
	appURL := s.ServeApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.NotFound(w, r) // the registration's look for a manifest
			return
		}
		if calls.Add(1) == 1 {
			http.Error(w, "not yet", http.StatusInternalServerError)
			return
		}
		_, _ = io.WriteString(w, `{"status":"completed","output":"ok"}`)
	}))
	host := strings.TrimSuffix(strings.TrimPrefix(appURL, "http://"), "/")
	fnURL := "http://" + userSecret + ":" + userSecret + "@" + host + "/hooks/" + pathSecret + "?key=" + querySecret
	resp, err := c.RegisterFunctionWithResponse(t.Context(), "hooked", protocol.FunctionRegistration{URL: fnURL, Config: fastRetries})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	res := startWaiting(t, c, "hooked", `{}`)
	require.Equal(t, protocol.RunStatusCompleted, res.Status)

	var run, invocations []*tracepb.Span
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.NoError(ct, tp.ForceFlush(t.Context()))
		run, invocations = recv.named("run hooked"), recv.named("invoke hooked")
		assert.Len(ct, run, 1)
		assert.Len(ct, invocations, 2)
	}, 10*time.Second, 10*time.Millisecond)
	masked := "http://xxxxx:xxxxx@" + host + "/xxxxx?key=xxxxx"
	for _, inv := range invocations {
		var got string
		for _, kv := range inv.Attributes {
			if kv.Key == "url.full" {
				got = kv.Value.GetStringValue()
			}
		}
		require.Equal(t, masked, got, "the invocation's URL, masked as the API's readers see it")
	}
	recv.mu.Lock()
	for _, sp := range recv.spans {
		for _, secret := range []string{userSecret, pathSecret, querySecret} {
			require.NotContains(t, sp.Name, secret)
			require.NotContains(t, sp.Status.GetMessage(), secret, "span %s", sp.Name)
			for _, kv := range sp.Attributes {
				require.NotContains(t, kv.Value.String(), secret, "span %s, attribute %s", sp.Name, kv.Key)
			}
		}
	}
	recv.mu.Unlock()
	for _, secret := range []string{userSecret, pathSecret, querySecret} {
		require.False(t, recv.received(secret), "%s is exported", secret)
	}
}
