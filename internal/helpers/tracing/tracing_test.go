package tracing_test

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/stepgate/stepgate/internal/helpers/tracing"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// TestFromEnv: traces are on only when an OTLP endpoint is set (and not disabled);
// off, there is no provider at all.
func TestFromEnv(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		env  map[string]string
		on   bool
	}{
		{"Unset", nil, false},
		{"Endpoint", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, true},
		{"TracesEndpoint", map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, true},
		{"Disabled", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_SDK_DISABLED": "true"}, false},
		{"ExporterNone", map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318", "OTEL_TRACES_EXPORTER": "none"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.on, tracing.Enabled(env(c.env)))
			tp, shutdown, err := tracing.FromEnv(t.Context(), env(c.env))
			require.NoError(t, err)
			require.Equal(t, c.on, tp != nil)
			require.NoError(t, shutdown(context.Background()))
		})
	}
	t.Run("GRPCIsRefused", func(t *testing.T) {
		t.Parallel()
		_, _, err := tracing.FromEnv(t.Context(), env(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}))
		require.ErrorContains(t, err, "http/protobuf")
	})
}

// TestRunSpan: a run's trace id is its UUID, and its root span, started anywhere, has
// the span id every child was given as parent.
func TestRunSpan(t *testing.T) {
	t.Parallel()
	runID := uuid.Must(uuid.NewV7()).String()
	require.Equal(t, [16]byte(uuid.MustParse(runID)), [16]byte(tracing.RunTraceID(runID)))
	require.False(t, tracing.RunTraceID("not-a-uuid").IsValid())
	sc := tracing.RunSpanContext(runID)
	require.True(t, sc.IsValid())
	require.Equal(t, sc, tracing.RunSpanContext(runID), "the same on every gateway")
	require.NotEqual(t, sc.SpanID(), tracing.RunSpanContext(uuid.NewString()).SpanID())

	rec := tracetest.NewSpanRecorder()
	tracer := tracing.NewProvider(sdktrace.WithSpanProcessor(rec)).Tracer("test")
	_, child := tracer.Start(tracing.WithRunParent(t.Context(), runID), "child")
	child.End()
	_, root := tracing.StartRunSpan(t.Context(), tracer, runID, "run")
	root.End()
	_, other := tracer.Start(t.Context(), "unrelated")
	other.End()
	ended := rec.Ended()
	require.Len(t, ended, 3)
	require.Equal(t, sc.TraceID(), ended[0].SpanContext().TraceID())
	require.Equal(t, sc.SpanID(), ended[0].Parent().SpanID())
	require.Equal(t, sc.TraceID(), ended[1].SpanContext().TraceID())
	require.Equal(t, sc.SpanID(), ended[1].SpanContext().SpanID())
	require.False(t, ended[1].Parent().IsValid())
	require.NotEqual(t, sc.TraceID(), ended[2].SpanContext().TraceID(), "other roots get random ids")
	require.Equal(t, trace.FlagsSampled, ended[2].SpanContext().TraceFlags())
}

// TestExportCuts: what a provider from Export exports holds no status description and
// no attribute value longer than MaxMessageBytes, whoever set them (River's job spans
// describe a job's error with its whole text).
func TestExportCuts(t *testing.T) {
	t.Parallel()
	exp := tracetest.NewInMemoryExporter()
	tp := tracing.Export(exp)
	long := strings.Repeat("é", 5000) // 10000 bytes
	_, span := tp.Tracer("test").Start(t.Context(), "long")
	span.SetAttributes(attribute.String("long", long))
	span.SetStatus(codes.Error, long)
	span.End()
	require.NoError(t, tp.ForceFlush(t.Context()))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	spans := exp.GetSpans()
	require.Len(t, spans, 1)
	desc := spans[0].Status.Description
	require.LessOrEqual(t, len(desc), tracing.MaxMessageBytes)
	require.True(t, strings.HasSuffix(desc, "…") && utf8.ValidString(desc), desc)
	require.Len(t, spans[0].Attributes, 1)
	require.Equal(t, tracing.MaxMessageBytes, utf8.RuneCountInString(spans[0].Attributes[0].Value.AsString()), "the SDK counts characters")
	require.Equal(t, "short", tracing.Cut("short"))
}
