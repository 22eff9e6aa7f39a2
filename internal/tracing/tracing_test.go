package tracing_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/stepgate/stepgate/internal/tracing"
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
