// Package tracing gives a gateway its OpenTelemetry traces: one trace per run, whose
// trace id is the run's id (a UUID's 16 bytes), so that every gateway that invokes the
// run, at any time, adds its spans to the same trace without storing anything.
//
// The trace's root span, "run <function>", has a span id derived from the run id too
// ([RunSpanContext]); it is exported once, by the gateway that ends the run, starting at
// the run's creation. Until then a viewer shows the run's spans under a parent it has not
// received yet.
//
// Traces are off unless an OTLP endpoint is configured ([FromEnv]); off, the gateway
// holds a nil provider and its hot path does no tracing work at all.
package tracing

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// Name is the instrumentation scope of stepgate's spans.
const Name = "github.com/stepgate/stepgate"

// Enabled reports whether getenv configures trace export: OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, OTEL_SDK_DISABLED is not "true", and
// OTEL_TRACES_EXPORTER is unset or "otlp".
func Enabled(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	if e := getenv("OTEL_TRACES_EXPORTER"); e != "" && e != "otlp" {
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// FromEnv returns the tracer provider the standard OpenTelemetry environment variables
// configure, exporting with OTLP over HTTP (protobuf) in batches, and its shutdown, which
// flushes what is buffered. The SDK reads the variables itself:
// OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT, _HEADERS, _TIMEOUT, _COMPRESSION and the TLS
// ones; OTEL_SERVICE_NAME (defaults to "stepgate") and OTEL_RESOURCE_ATTRIBUTES;
// OTEL_TRACES_SAMPLER and its _ARG; OTEL_BSP_*. When [Enabled] is false it returns a nil
// provider and a no-op shutdown: traces are off.
func FromEnv(ctx context.Context, getenv func(string) string) (*sdktrace.TracerProvider, func(context.Context) error, error) {
	if !Enabled(getenv) {
		return nil, func(context.Context) error { return nil }, nil
	}
	if p := getenv("OTEL_EXPORTER_OTLP_PROTOCOL"); p != "" && p != "http/protobuf" {
		return nil, nil, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL=%s: stepgate exports traces with http/protobuf only", p)
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "stepgate")),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, nil, fmt.Errorf("trace resource: %w", err)
	}
	tp := Export(exp, sdktrace.WithResource(res))
	return tp, tp.Shutdown, nil
}

// Export returns the provider [NewProvider] makes, with opts, exporting with exp in
// batches; status descriptions longer than MaxMessageBytes, which the SDK does not
// bound, are cut before exp sees them.
func Export(exp sdktrace.SpanExporter, opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	return NewProvider(append([]sdktrace.TracerProviderOption{sdktrace.WithBatcher(cutExporter{exp})}, opts...)...)
}

// MaxMessageBytes bounds in bytes the error messages spans export (see [Cut]), and in
// characters (as the SDK counts them), unless OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT sets a
// lower bound, every attribute value of the providers [NewProvider] makes.
const MaxMessageBytes = 2048

// Cut returns msg cut to at most MaxMessageBytes bytes of valid UTF-8, ending in "…"
// when it was cut.
func Cut(msg string) string {
	if len(msg) <= MaxMessageBytes {
		return msg
	}
	return strings.ToValidUTF8(msg[:MaxMessageBytes-len("…")], "") + "…"
}

// cutExporter cuts, before it exports them, the status descriptions longer than
// MaxMessageBytes that others' instrumentation (River's job spans, which describe a
// job's error) sets; the SDK bounds attributes but not those.
type cutExporter struct{ sdktrace.SpanExporter }

func (e cutExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	cloned := false
	for i, s := range spans {
		if len(s.Status().Description) > MaxMessageBytes {
			if !cloned {
				spans, cloned = slices.Clone(spans), true // the batch is the SDK's
			}
			stub := tracetest.SpanStubFromReadOnlySpan(s)
			stub.Status.Description = Cut(stub.Status.Description)
			spans[i] = stub.Snapshot()
		}
	}
	return e.SpanExporter.ExportSpans(ctx, spans)
}

// NewProvider returns an SDK tracer provider with opts that can export runs' root spans
// with the ids [RunSpanContext] gives them, and whose attribute values are at most
// MaxMessageBytes characters long (or OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT, when lower). Tests pass a
// span recorder or an in-memory exporter.
func NewProvider(opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	limits := sdktrace.NewSpanLimits() // the OTEL_*_LIMIT variables
	if limits.AttributeValueLengthLimit < 0 || limits.AttributeValueLengthLimit > MaxMessageBytes {
		limits.AttributeValueLengthLimit = MaxMessageBytes
	}
	return sdktrace.NewTracerProvider(append([]sdktrace.TracerProviderOption{
		sdktrace.WithIDGenerator(idGenerator{}), sdktrace.WithRawSpanLimits(limits),
	}, opts...)...)
}

// RunTraceID returns the trace id of a run: its UUID's bytes. The zero (invalid) id for
// a run id that is not a UUID.
func RunTraceID(runID string) trace.TraceID {
	id, err := uuid.Parse(runID)
	if err != nil {
		return trace.TraceID{}
	}
	return trace.TraceID(id)
}

// RunSpanContext returns the span context of a run's root span, as a remote parent for
// the spans of its start, invocations, steps, sleeps and waits: the run's trace id, and a
// span id made from a hash of the run id. It is sampled, so the gateway's sampler decides:
// the default (parentbased_always_on) records every run, and "traceidratio" records a
// fraction of the runs, each whole, since its decision depends on the trace id alone.
func RunSpanContext(runID string) trace.SpanContext {
	h := sha256.Sum256([]byte("stepgate run span " + runID))
	var sid trace.SpanID
	copy(sid[:], h[:8])
	return trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: RunTraceID(runID), SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true,
	})
}

// WithRunParent returns ctx with the run's root span as the parent of the spans started
// from it.
func WithRunParent(ctx context.Context, runID string) context.Context {
	return trace.ContextWithRemoteSpanContext(ctx, RunSpanContext(runID))
}

// StartRunSpan starts the root span of a run with the ids of [RunSpanContext], at start
// (the run's creation), when the tracer comes from [NewProvider]. The caller ends it.
func StartRunSpan(ctx context.Context, tracer trace.Tracer, runID, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	sc := RunSpanContext(runID)
	ctx = context.WithValue(ctx, forcedIDs{}, sc)
	return tracer.Start(ctx, name, append(opts, trace.WithNewRoot())...)
}

// forcedIDs is the context key of the ids idGenerator gives a new root span.
type forcedIDs struct{}

// idGenerator makes random ids, except for a root span started by StartRunSpan.
type idGenerator struct{}

func (idGenerator) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	if sc, ok := ctx.Value(forcedIDs{}).(trace.SpanContext); ok && sc.IsValid() {
		return sc.TraceID(), sc.SpanID()
	}
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.NativeEndian.PutUint64(tid[:8], rand.Uint64())
		binary.NativeEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, randomSpanID()
}

func (idGenerator) NewSpanID(context.Context, trace.TraceID) trace.SpanID { return randomSpanID() }

func randomSpanID() trace.SpanID {
	for {
		var sid trace.SpanID
		binary.NativeEndian.PutUint64(sid[:], rand.Uint64())
		if sid.IsValid() {
			return sid
		}
	}
}
