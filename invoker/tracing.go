package invoker

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/stepgate/stepgate/internal/helpers/redact"
	"github.com/stepgate/stepgate/internal/helpers/tracing"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// The spans of a run, in the run's trace (see package tracing), when Config.TracerProvider
// is set. Without it inv.tracer is nil and none of this runs.
//
//	run <function>         the root, from the run's creation to its end, exported when it ends
//	├ start <function>     the start request (gateway package)
//	├ invoke <function>    each invocation: URL (masked: redact.URL), attempt, outcome,
//	│                      HTTP status (package call)
//	│ ├ <kind> <name>      each journaled entry (step, sleep, ...), from the function's
//	│ │                    started_at to its journaling
//	│ └ <await> <name>     the await the run suspended on: a sleep or a retry's backoff
//	│                      until its wake time; a wait (event, message, callback, child) as
//	│                      a mark at its start, with the wait's timeout
//
// Attribute keys.
const (
	attrRunID      = attribute.Key("stepgate.run.id")
	attrFunction   = attribute.Key("stepgate.function")
	attrTenant     = attribute.Key("stepgate.tenant")
	attrRevision   = attribute.Key("stepgate.revision")
	attrAttempt    = attribute.Key("stepgate.attempt")
	attrInvocation = attribute.Key("stepgate.invocation")
	attrOutcome    = attribute.Key("stepgate.outcome")
	attrStatus     = attribute.Key("stepgate.run.status")
	attrSeq        = attribute.Key("stepgate.entry.seq")
	attrKind       = attribute.Key("stepgate.entry.kind")
	attrStepTry    = attribute.Key("stepgate.entry.attempt")
	attrAwaitKind  = attribute.Key("stepgate.await.kind")
	attrWakeAt     = attribute.Key("stepgate.await.wake_at")
	attrTimeout    = attribute.Key("stepgate.await.timeout")
	attrURL        = attribute.Key("url.full")
	attrErrorType  = attribute.Key("error.type")
)

// startInvocation starts the span of one invocation of run, a child of the run's root,
// and returns the context that carries it (to the function, as its traceparent). A nil
// span when traces are off.
func (inv *Invoker) startInvocation(ctx context.Context, rev *revision, run *journal.Run) (context.Context, trace.Span) {
	if inv.tracer == nil {
		return ctx, nil
	}
	ctx, span := inv.tracer.Start(tracing.WithRunParent(ctx, run.ID), "invoke "+run.Function,
		trace.WithSpanKind(trace.SpanKindClient),
		// The run's id (the trace's), tenant and revision are the root span's.
		trace.WithAttributes(
			attrFunction.String(run.Function), attrAttempt.Int(run.Invocations), attrInvocation.Int(run.Invocation),
			attrURL.String(redact.URL(rev.url)),
		))
	return ctx, span
}

// endInvocation ends an invocation's span with its outcome (see package metrics'
// outcomes) and its failure, if any.
func (inv *Invoker) endInvocation(span trace.Span, outcome string, failure *journal.ErrorInfo) {
	if span == nil {
		return
	}
	span.SetAttributes(attrOutcome.String(outcome))
	inv.traceError(span, failure)
	span.End()
}

// traceError marks span as failed with e, when e is not nil: its type as the error.type
// attribute, and as the status description its type, or with Config.TraceErrorMessages
// its message cut to tracing.MaxMessageBytes.
func (inv *Invoker) traceError(span trace.Span, e *journal.ErrorInfo) {
	if e == nil {
		return
	}
	span.SetAttributes(attrErrorType.String(e.Type))
	desc := e.Type
	if inv.traceMessages {
		desc = tracing.Cut(e.Message)
	}
	span.SetStatus(codes.Error, desc)
}

// traceEntries records a span for each of entries, journaled now by the invocation
// whose span context is parent, or under the run's root when parent is not valid (a
// checkpoint that reached another gateway than its invocation's).
func (inv *Invoker) traceEntries(ctx context.Context, parent trace.SpanContext, runID string, entries []journal.Entry) {
	if inv.tracer == nil || len(entries) == 0 {
		return
	}
	if parent.IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, parent)
	} else {
		ctx = tracing.WithRunParent(ctx, runID)
	}
	now := time.Now()
	for _, e := range entries {
		start := now
		if e.StartedAt != nil && e.StartedAt.Before(now) {
			start = *e.StartedAt
		}
		// The span's name holds the entry's kind and name; the trace is the run's.
		_, span := inv.tracer.Start(ctx, e.Kind+" "+e.Name, trace.WithTimestamp(start), trace.WithAttributes(
			attrSeq.Int(e.Seq), attrKind.String(e.Kind), attrStepTry.Int(e.Attempt),
		))
		inv.traceError(span, e.Error)
		span.End(trace.WithTimestamp(now))
	}
}

// traceAwait records the span of the await run suspended on, under the invocation's
// span in ctx: a sleep or a retry's backoff lasts until its wake time; a wait is a mark
// at its start, with its timeout.
func (inv *Invoker) traceAwait(ctx context.Context, runID string, w *protocol.Await) {
	if inv.tracer == nil || w == nil {
		return
	}
	now := time.Now()
	_, span := inv.tracer.Start(ctx, string(w.Type)+" "+w.Name, trace.WithTimestamp(now), trace.WithAttributes(
		attrAwaitKind.String(string(w.Type)), attrSeq.Int(w.Seq),
	))
	end := now
	switch {
	case w.Until != nil:
		end = *w.Until
	case w.Duration != nil:
		if d, err := time.ParseDuration(*w.Duration); err == nil {
			end = now.Add(d)
		}
	}
	if w.Timeout != nil {
		span.SetAttributes(attrTimeout.String(*w.Timeout))
	}
	if end.After(now) {
		span.SetAttributes(attrWakeAt.String(end.UTC().Format(time.RFC3339Nano)))
	} else {
		end = now
	}
	span.End(trace.WithTimestamp(end))
}

// traceRunEnd exports the run's root span, from its creation to now, when it ended with
// status.
func (inv *Invoker) traceRunEnd(ctx context.Context, run *journal.Run, status journal.Status, runErr *journal.ErrorInfo) {
	if inv.tracer == nil {
		return
	}
	_, span := tracing.StartRunSpan(context.WithoutCancel(ctx), inv.tracer, run.ID, "run "+run.Function,
		trace.WithTimestamp(run.CreatedAt), trace.WithAttributes(
			attrRunID.String(run.ID), attrFunction.String(run.Function), attrTenant.String(run.Tenant),
			attrRevision.Int(run.Revision), attrStatus.String(string(status)),
		))
	inv.traceError(span, runErr)
	span.End()
}
