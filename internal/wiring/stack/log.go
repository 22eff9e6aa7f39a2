package stack

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// testLogger writes the gateway's logs to tb.Log until the test's cleanups reach it,
// and drops them from then on: goroutines that outlive a stack (River's, timers, a
// leaked loop) must not call tb.Log once the test has ended, which panics. Call it
// before the stack registers its own cleanup, so that the stack's stopping is logged.
func testLogger(tb testing.TB) *slog.Logger {
	out := &tbOutput{tb: tb}
	tb.Cleanup(out.close)
	return slog.New(&tbHandler{out: out})
}

// tbOutput is the test's log, shared by a tbHandler and those it derives.
type tbOutput struct {
	tb     testing.TB
	mu     sync.Mutex // held across tb.Log, so that none runs once closed is set
	closed bool
}

func (o *tbOutput) log(line string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.closed {
		o.tb.Log(line)
	}
}

func (o *tbOutput) close() {
	o.mu.Lock()
	o.closed = true
	o.mu.Unlock()
}

type tbHandler struct {
	out   *tbOutput
	attrs []slog.Attr
}

func (h *tbHandler) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }

func (h *tbHandler) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	for _, a := range h.attrs {
		b.WriteString(" " + a.String())
	}
	r.Attrs(func(a slog.Attr) bool { b.WriteString(" " + a.String()); return true })
	h.out.log(b.String())
	return nil
}

func (h *tbHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &tbHandler{out: h.out, attrs: append(append([]slog.Attr{}, h.attrs...), as...)}
}

func (h *tbHandler) WithGroup(string) slog.Handler { return h }
