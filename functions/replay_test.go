package functions_test

import (
	"context"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol"
)

// seen records what a function's code saw on each of its invocations.
type seen[T any] struct {
	mu   sync.Mutex
	each []T
}

func (s *seen[T]) add(v T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.each = append(s.each, v)
}

func (s *seen[T]) all() []T {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]T(nil), s.each...)
}

func TestDeterministicHelpers(t *testing.T) {
	t.Parallel()
	type values struct {
		Now    time.Time
		UUID   string
		Random float64
	}
	var got seen[values]
	g, url := serve(t, func(app *functions.App) {
		functions.Register(app, "stamp", func(ctx context.Context, _ empty) (values, error) {
			var v values
			var err error
			if v.Now, err = step.Now(ctx, "started"); err != nil {
				return v, err
			}
			if v.UUID, err = step.UUID(ctx, "order-id"); err != nil {
				return v, err
			}
			if v.Random, err = step.Random(ctx, "sample"); err != nil {
				return v, err
			}
			got.add(v) // before the sleep: once per invocation
			return v, step.Sleep(ctx, "pause", time.Millisecond)
		})
	})
	before := time.Now().UTC()
	r, invocations := g.Run(url+"/stamp", "run-1", "stamp", `{}`, 1)
	require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
	require.Equal(t, 2, invocations, "the sleep makes a second invocation, which replays")

	each := got.all()
	require.Len(t, each, 2)
	require.Equal(t, each[0].UUID, each[1].UUID, "the replay returns the journaled UUID")
	require.Equal(t, each[0].Random, each[1].Random, "the replay returns the journaled number")
	require.True(t, each[0].Now.Equal(each[1].Now), "the replay returns the journaled time: %v, then %v", each[0].Now, each[1].Now)
	require.False(t, each[0].Now.Before(before.Truncate(time.Microsecond)))
	require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`), each[0].UUID)
	require.GreaterOrEqual(t, each[0].Random, 0.0)
	require.Less(t, each[0].Random, 1.0)

	j := g.Journal("run-1")
	require.Len(t, j, 4)
	for i, name := range []string{"started", "order-id", "sample"} {
		require.Equal(t, protocol.EntryKindStep, j[i].Kind)
		require.Equal(t, name, j[i].Name)
	}
}

func TestPatched(t *testing.T) {
	t.Parallel()
	// The function's code after the patch "fix-rounding": the old code ran step "total"
	// then slept; the new code runs step "total-v2" instead.
	newCode := func(patched *seen[bool]) func(app *functions.App) {
		return func(app *functions.App) {
			functions.Register(app, "checkout", func(ctx context.Context, _ empty) (string, error) {
				p, err := step.Patched(ctx, "fix-rounding")
				if err != nil {
					return "", err
				}
				patched.add(p)
				name := "total"
				if p {
					name = "total-v2"
				}
				total, err := step.Run(ctx, name, func(context.Context) (string, error) { return name, nil })
				if err != nil {
					return "", err
				}
				if err := step.Sleep(ctx, "pause", time.Millisecond); err != nil {
					return "", err
				}
				return total, nil
			})
		}
	}

	t.Run("NewRunJournalsTheMarkerAndReplaysIt", func(t *testing.T) {
		t.Parallel()
		var patched seen[bool]
		g, url := serve(t, newCode(&patched))
		r, invocations := g.Run(url+"/checkout", "run-1", "checkout", `{}`, 1)
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.JSONEq(t, `"total-v2"`, string(*r.Answer.Output))
		require.Equal(t, 2, invocations)
		require.Equal(t, []bool{true, true}, patched.all(), "first reached, then replayed from its marker")
		j := g.Journal("run-1")
		require.Len(t, j, 3)
		require.Equal(t, protocol.EntryKindPatch, j[0].Kind)
		require.Equal(t, "fix-rounding", j[0].Name)
		require.Nil(t, j[0].Output)
		require.Equal(t, "total-v2", j[1].Name)
	})

	t.Run("RunOfTheOldCodeTakesTheOldPath", func(t *testing.T) {
		t.Parallel()
		var patched seen[bool]
		g, url := serve(t, newCode(&patched))
		// The old code journaled its step and slept; the new code deploys meanwhile.
		code, msg := g.Append("run-2", entry(1, "total", `"total"`))
		require.Equal(t, 200, code, msg)
		r, _ := g.Run(url+"/checkout", "run-2", "checkout", `{}`, 1)
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.JSONEq(t, `"total"`, string(*r.Answer.Output))
		require.Equal(t, []bool{false, false}, patched.all())
		j := g.Journal("run-2")
		require.Len(t, j, 2, "no marker: the patch took no seq")
		require.Equal(t, "total", j[0].Name)
		require.Equal(t, protocol.EntryKindSleep, j[1].Kind)
	})

	t.Run("RunSuspendedBeforeThePatchTakesTheNewPath", func(t *testing.T) {
		t.Parallel()
		var patched seen[bool]
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "late", func(ctx context.Context, _ empty) (bool, error) {
				if err := step.Sleep(ctx, "first", time.Millisecond); err != nil {
					return false, err
				}
				p, err := step.Patched(ctx, "fix-rounding")
				patched.add(p)
				return p, err
			})
		})
		// The old code slept at seq 1; the journal ends there, before the patch.
		code, msg := g.Append("run-3", protocol.JournalEntry{Seq: 1, Kind: protocol.EntryKindSleep, Name: "first"})
		require.Equal(t, 200, code, msg)
		r, _ := g.Run(url+"/late", "run-3", "late", `{}`, 1)
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.JSONEq(t, `true`, string(*r.Answer.Output))
		require.Equal(t, []bool{true}, patched.all())
		j := g.Journal("run-3")
		require.Len(t, j, 2)
		require.Equal(t, protocol.EntryKindPatch, j[1].Kind)
	})

	t.Run("DeprecatePatchConsumesAMarkerIfAny", func(t *testing.T) {
		t.Parallel()
		// The code once the old branch is gone.
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "checkout", func(ctx context.Context, _ empty) (string, error) {
				if err := step.DeprecatePatch(ctx, "fix-rounding"); err != nil {
					return "", err
				}
				return step.Run(ctx, "total-v2", func(context.Context) (string, error) { return "total-v2", nil })
			})
		})
		code, msg := g.Append("with-marker", protocol.JournalEntry{Seq: 1, Kind: protocol.EntryKindPatch, Name: "fix-rounding"})
		require.Equal(t, 200, code, msg)
		r, _ := g.Run(url+"/checkout", "with-marker", "checkout", `{}`, 1)
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.Len(t, g.Journal("with-marker"), 2)
		require.Equal(t, 2, g.Journal("with-marker")[1].Seq)

		r, _ = g.Run(url+"/checkout", "new", "checkout", `{}`, 1)
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		j := g.Journal("new")
		require.Len(t, j, 1, "a new run journals no marker")
		require.Equal(t, "total-v2", j[0].Name)
	})

	t.Run("AnUnpatchedChangeIsStillNondeterminism", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "checkout", func(ctx context.Context, _ empty) (string, error) {
				return step.Run(ctx, "total-v2", func(context.Context) (string, error) { return "total-v2", nil })
			})
		})
		code, msg := g.Append("run-4", entry(1, "total", `"total"`))
		require.Equal(t, 200, code, msg)
		r, _ := g.Run(url+"/checkout", "run-4", "checkout", `{}`, 1)
		require.Equal(t, protocol.AnswerStatusFailed, r.Answer.Status, string(r.Body))
		require.Equal(t, "nondeterminism", r.Answer.Error.Type)
		require.Contains(t, r.Answer.Error.Message, `"total-v2"`)
		require.Contains(t, r.Answer.Error.Message, `"total"`)
	})
}
