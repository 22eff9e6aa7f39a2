package gateway

import (
	"context"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/stepgate/stepgate/internal/helpers/tracing"
)

// acceptTraceparent puts a request's W3C trace context (traceparent, tracestate) in its
// context, when traces are on, for the start request's span to link to.
func acceptTraceparent(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		if req.Header.Get("traceparent") != "" {
			ctx := propagation.TraceContext{}.Extract(req.Context(), propagation.HeaderCarrier(req.Header))
			c.SetRequest(req.WithContext(ctx))
		}
		return next(c)
	}
}

// startSpan starts the span of a start request for the run runID of function, in the
// run's trace, under its root. A caller's trace context (a traceparent on the request)
// becomes a link: the run's trace is the run's own, whatever its caller, so that every
// gateway joins it from the run id alone. The span's context is returned with it, so the
// River job the start inserts links to it. A nil span when traces are off.
func (s *Server) startSpan(ctx context.Context, function, runID string) (context.Context, trace.Span) {
	tracer := s.tracer
	if tracer == nil {
		return ctx, nil
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(
		attribute.String("stepgate.function", function), attribute.String("stepgate.run.id", runID),
		attribute.String("http.route", "/v1/functions/{name}/runs"),
	)}
	if caller := trace.SpanContextFromContext(ctx); caller.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: caller,
			Attributes: []attribute.KeyValue{attribute.String("stepgate.link", "caller")}}))
	}
	return tracer.Start(tracing.WithRunParent(ctx, runID), "start "+function, opts...)
}
