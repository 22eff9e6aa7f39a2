package stack_test

import (
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/stack"
)

func TestMain(m *testing.M) { stack.Main(m) }

// recordingTB is a testing.TB whose Log and Cleanup are recorded, so that a test can
// end it and see what is logged afterwards. Any other method panics.
type recordingTB struct {
	testing.TB
	mu       sync.Mutex
	lines    []string
	cleanups []func()
}

func (r *recordingTB) Helper() {}

func (r *recordingTB) Log(args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, fmt.Sprint(args...))
}

func (r *recordingTB) Cleanup(fn func()) { r.cleanups = append(r.cleanups, fn) }

// end runs the cleanups, last first, as testing does.
func (r *recordingTB) end() {
	for _, fn := range slices.Backward(r.cleanups) {
		fn()
	}
}

func (r *recordingTB) logged() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.lines)
}

// TestLoggerStopsWhenTheTestEnds: the stack's logger, and every logger derived from it
// (the invoker's and River's With loggers), write to the test until its cleanups reach
// the logger, then drop what goroutines outliving the test log: testing.T panics on
// a Log after its test.
func TestLoggerStopsWhenTheTestEnds(t *testing.T) {
	t.Parallel()
	tb := &recordingTB{}
	log := stack.TestLogger(tb)
	derived := log.With(slog.String("run_id", "r1"))
	tb.Cleanup(func() { derived.Info("stopping", slog.Int("invocations", 1)) }) // the stack's own cleanup
	log.Info("started")
	derived.Debug("below the level")
	derived.Info("invoked")
	tb.end()
	log.Info("late")
	derived.Info("late")
	derived.With(slog.String("function", "f")).Warn("late")
	log.WithGroup("g").Error("late")
	require.Equal(t, []string{"INFO started", "INFO invoked run_id=r1", "INFO stopping run_id=r1 invocations=1"}, tb.logged())
}

// TestLoggerIsSafeForConcurrentUse: records logged while the test ends are either
// written before it ends or dropped, never written after.
func TestLoggerIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	tb := &recordingTB{}
	log := stack.TestLogger(tb)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			l := log.With(slog.Int("goroutine", i))
			for range 200 {
				l.Info("tick")
			}
		})
	}
	tb.end()
	n := len(tb.logged())
	wg.Wait()
	require.Equal(t, n, len(tb.logged()), "nothing was written once the test ended")
}
