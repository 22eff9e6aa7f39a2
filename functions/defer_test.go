package functions_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/internal/gatewaytest"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol"
)

// A step's entry is journaled before the next step starts, or with the answer when the
// function answers first (issue 13, move 2): the last step costs no checkpoint of its own.
// TestLazyCheckpoints tests the opt-in of functions.LazyCheckpoints: a step's entry waits
// for what follows it (the next entry, or the answer), so the last step rides with the
// answer.
func TestLazyCheckpoints(t *testing.T) {
	t.Parallel()

	// checkpoints counts the checkpoint requests of a run, by step name.
	checkpoints := func(g *gatewaytest.Gateway) *atomic.Value {
		var names atomic.Value
		names.Store("")
		g.OnCheckpoint(func(_ string, e protocol.JournalEntry) (int, string) {
			names.Store(names.Load().(string) + e.Name + ",")
			return 0, ""
		})
		return &names
	}

	t.Run("EachStepBeforeTheNextTheLastWithTheAnswer", func(t *testing.T) {
		t.Parallel()
		var journaledBeforeC atomic.Int32
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "three", func(ctx context.Context, _ empty) (int, error) {
				for _, name := range []string{"a", "b", "c"} {
					if _, err := step.Run(ctx, name, func(ctx context.Context) (int, error) { return len(name), nil }); err != nil {
						return 0, err
					}
				}
				return 3, nil
			}, functions.LazyCheckpoints())
		})
		var names atomic.Value
		names.Store("")
		g.OnCheckpoint(func(_ string, e protocol.JournalEntry) (int, string) {
			names.Store(names.Load().(string) + e.Name + ",")
			if e.Name == "b" {
				journaledBeforeC.Store(int32(len(g.Journal("run-1"))))
			}
			return 0, ""
		})

		r := g.Invoke(url+"/three", g.Request("run-1", "three", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.Equal(t, "a,b,", names.Load(), "c is not checkpointed on its own")
		require.EqualValues(t, 1, journaledBeforeC.Load(), "b's checkpoint came after a was journaled")
		require.NotNil(t, r.Answer.Steps)
		require.Len(t, *r.Answer.Steps, 1)
		c := (*r.Answer.Steps)[0]
		require.Equal(t, 3, c.Seq)
		require.Equal(t, "c", c.Name)
		require.JSONEq(t, `1`, string(*c.Output))
		require.Len(t, g.Journal("run-1"), 3)
	})

	t.Run("ARetriedInvocationReplaysTheStep", func(t *testing.T) {
		t.Parallel()
		// The function fails after its step, with an error or a panic: the answer is an
		// HTTP 500 that journals nothing, so the step is checkpointed first and the retry
		// replays it instead of running it again.
		for _, fail := range []string{"error", "panic"} {
			t.Run(fail, func(t *testing.T) {
				t.Parallel()
				var charges, calls atomic.Int32
				g, url := serve(t, func(app *functions.App) {
					functions.Register(app, "charge", func(ctx context.Context, _ empty) (string, error) {
						if _, err := step.Run(ctx, "charge", func(ctx context.Context) (int, error) { return int(charges.Add(1)), nil }); err != nil {
							return "", err
						}
						if calls.Add(1) == 1 {
							if fail == "panic" {
								panic("after the charge")
							}
							return "", errors.New("after the charge")
						}
						return "done", nil
					}, functions.LazyCheckpoints())
				})
				r, invocations := g.Run(url+"/charge", "run-1", "charge", `{}`, 3)
				require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
				require.Equal(t, 2, invocations)
				require.EqualValues(t, 1, charges.Load(), "the step ran once")
				require.Len(t, g.Journal("run-1"), 1)
			})
		}
	})

	t.Run("ASuspensionCarriesTheStep", func(t *testing.T) {
		t.Parallel()
		// Each await that suspends the run at once: the step before it rides in the
		// suspended answer (journaled before the await's entry, seq 1 below seq 2), with
		// no checkpoint of its own; the run then ends having charged once.
		awaits := map[string]func(ctx context.Context) error{
			"sleep": func(ctx context.Context) error { return step.Sleep(ctx, "nap", time.Hour) },
			"wait_event": func(ctx context.Context) error {
				_, err := step.WaitForEvent[any](ctx, "paid", "payment", step.Timeout(time.Hour)).Get()
				if errors.Is(err, step.ErrTimedOut) {
					return nil // the fake gateway times every wait out
				}
				return err
			},
			"wait_any": func(ctx context.Context) error {
				_, err := step.WaitFirst(ctx, "either", step.WaitForEvent[any](ctx, "paid", "payment"), step.Receive[any](ctx, "cancel"), step.After(ctx, "hour", time.Hour))
				return err
			},
			"receive": func(ctx context.Context) error {
				_, err := step.Receive[any](ctx, "inbox", step.Timeout(time.Hour)).Get()
				if errors.Is(err, step.ErrTimedOut) {
					return nil // the fake gateway times every wait out
				}
				return err
			},
			"invoke": func(ctx context.Context) error {
				_, err := step.Invoke[int](ctx, "child", "one", nil).Get()
				return err
			},
			"invoke_all": func(ctx context.Context) error {
				return step.WaitAll(ctx, step.Invoke[int](ctx, "children", "one", nil), step.Invoke[int](ctx, "children", "one", nil))
			},
		}
		for kind, await := range awaits {
			t.Run(kind, func(t *testing.T) {
				t.Parallel()
				var charges atomic.Int32
				g, url := serve(t, func(app *functions.App) {
					functions.Register(app, "one", func(context.Context, empty) (int, error) { return 1, nil })
					functions.Register(app, "nap", func(ctx context.Context, _ empty) (int, error) {
						if _, err := step.Run(ctx, "charge", func(ctx context.Context) (int, error) { return int(charges.Add(1)), nil }); err != nil {
							return 0, err
						}
						if err := await(ctx); err != nil {
							return 0, err
						}
						return 1, nil
					}, functions.LazyCheckpoints())
				})
				names := checkpoints(g)
				r := g.Invoke(url+"/nap", g.Request("run-1", "nap", `{}`))
				require.Equal(t, protocol.AnswerStatusSuspended, r.Answer.Status, string(r.Body))
				require.Equal(t, 2, r.Answer.Await.Seq)
				require.NotNil(t, r.Answer.Steps)
				require.Len(t, *r.Answer.Steps, 1)
				require.Equal(t, "charge", (*r.Answer.Steps)[0].Name)
				require.Equal(t, 1, (*r.Answer.Steps)[0].Seq)
				require.Equal(t, "", names.Load(), "no checkpoint before the suspension")
				if kind == "invoke_all" {
					return // gatewaytest does not run children of an invoke_all
				}
				r, _ = g.Run(url+"/nap", "run-1", "nap", `{}`, 1)
				require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
				require.EqualValues(t, 1, charges.Load())
			})
		}
	})

	t.Run("ASleepInTheProcessJournalsTheStepFirst", func(t *testing.T) {
		t.Parallel()
		// Waited out in the process, the sleep is checkpointed: the step before it is
		// checkpointed first, in order.
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "nap", func(ctx context.Context, _ empty) (int, error) {
				if _, err := step.Run(ctx, "charge", func(ctx context.Context) (int, error) { return 1, nil }); err != nil {
					return 0, err
				}
				if err := step.Sleep(ctx, "nap", time.Millisecond); err != nil {
					return 0, err
				}
				return 1, nil
			}, functions.SleepInProcess(time.Second))
		})
		names := checkpoints(g)
		req := g.Request("run-1", "nap", `{}`)
		deadline := time.Now().Add(time.Minute)
		req.Deadline = &deadline
		r := g.Invoke(url+"/nap", req)
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.Nil(t, r.Answer.Steps)
		require.Equal(t, "charge,nap,", names.Load())
		require.Len(t, g.Journal("run-1"), 2)
	})

	t.Run("AJournaledAwaitKeepsTheStepForTheNextCheckpoint", func(t *testing.T) {
		t.Parallel()
		// Replayed, an await takes its seq without a checkpoint and the function goes
		// on: the steps after it are journaled as usual, each before the next (a), the
		// last with the answer (b).
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "nap", func(ctx context.Context, _ empty) (int, error) {
				if err := step.Sleep(ctx, "nap", time.Hour); err != nil {
					return 0, err
				}
				if _, err := step.Run(ctx, "a", func(ctx context.Context) (int, error) { return 1, nil }); err != nil {
					return 0, err
				}
				if _, err := step.Run(ctx, "b", func(ctx context.Context) (int, error) { return 2, nil }); err != nil {
					return 0, err
				}
				return 1, nil
			}, functions.LazyCheckpoints())
		})
		names := checkpoints(g)
		r, invocations := g.Run(url+"/nap", "run-1", "nap", `{}`, 1)
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.Equal(t, 2, invocations)
		require.Equal(t, "a,", names.Load())
		require.Len(t, g.Journal("run-1"), 3)
	})

	t.Run("ALargeOutputIsCheckpointedAtOnce", func(t *testing.T) {
		t.Parallel()
		big := strings.Repeat("x", 70<<10) // over the 64 KiB an answer carries
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "big", func(ctx context.Context, _ empty) (int, error) {
				s, err := step.Run(ctx, "big", func(ctx context.Context) (string, error) { return big, nil })
				return len(s), err
			}, functions.LazyCheckpoints())
		})
		names := checkpoints(g)
		r := g.Invoke(url+"/big", g.Request("run-1", "big", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.Nil(t, r.Answer.Steps)
		require.Equal(t, "big,", names.Load())
	})

	t.Run("AFailedCheckpointBeforeTheNextStepStopsIt", func(t *testing.T) {
		t.Parallel()
		var second atomic.Bool
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "two", func(ctx context.Context, _ empty) (int, error) {
				if _, err := step.Run(ctx, "a", func(ctx context.Context) (int, error) { return 1, nil }); err != nil {
					return 0, err
				}
				return step.Run(ctx, "b", func(ctx context.Context) (int, error) { second.Store(true); return 2, nil })
			}, functions.LazyCheckpoints())
		})
		g.OnCheckpoint(func(string, protocol.JournalEntry) (int, string) {
			return http.StatusConflict, `{"type":"superseded","detail":"run cancelled"}`
		})
		r := g.Invoke(url+"/two", g.Request("run-1", "two", `{}`))
		require.Equal(t, protocol.AnswerStatusFailed, r.Answer.Status, string(r.Body))
		require.Equal(t, "superseded", r.Answer.Error.Type)
		require.Nil(t, r.Answer.Steps)
		require.False(t, second.Load(), "b never starts before a is journaled")
	})
}
