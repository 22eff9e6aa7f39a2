package stack

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// testLogger writes the gateway's logs to t.Log, and nowhere once the test has ended.
func testLogger(tb testing.TB) *slog.Logger {
	h := &tbHandler{tb: tb, mu: &sync.Mutex{}}
	tb.Cleanup(func() { h.mu.Lock(); h.done = true; h.mu.Unlock() })
	return slog.New(h)
}

type tbHandler struct {
	tb    testing.TB
	mu    *sync.Mutex
	done  bool
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
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.done {
		h.tb.Log(b.String())
	}
	return nil
}

func (h *tbHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	n.attrs = append(append([]slog.Attr{}, h.attrs...), as...)
	return &n
}

func (h *tbHandler) WithGroup(string) slog.Handler { return h }
