package functions_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/internal/gatewaytest"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/signature"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// signingKey returns a key pair of the gateway, made from seed.
func signingKey(seed byte) *signature.SigningKey {
	return &signature.SigningKey{Ed25519: ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, 32)), HMAC: bytes.Repeat([]byte{seed}, 32)}
}

func pub(k *signature.SigningKey) ed25519.PublicKey { return k.Ed25519.Public().(ed25519.PublicKey) }

var (
	oldKey = signingKey(1)
	newKey = signingKey(2)
)

// serve starts an App that holds the public keys of both rotation keys and the functions
// register adds, and a fake gateway signing with newKey.
func serve(t *testing.T, register func(app *functions.App)) (*gatewaytest.Gateway, string) {
	t.Helper()
	app := functions.New(functions.Config{PublicKeys: []ed25519.PublicKey{pub(oldKey), pub(newKey)}, Logger: testLogger(t)})
	register(app)
	srv := httptest.NewServer(app)
	t.Cleanup(srv.Close)
	return gatewaytest.New(t, newKey), srv.URL
}

type empty struct{}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), nil))
}

// entry is a journaled step with output.
func entry(seq int, name, output string) protocol.JournalEntry {
	return protocol.JournalEntry{Seq: seq, Kind: protocol.EntryKindStep, Name: name, Output: new(protocol.AnyJSON(output))}
}

func TestInvoke(t *testing.T) {
	t.Parallel()

	t.Run("CompletedWithoutSteps", func(t *testing.T) {
		t.Parallel()
		type in struct{ Name string }
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "hello", func(ctx context.Context, in in) (map[string]string, error) {
				return map[string]string{"greeting": "Hello, " + in.Name + "!"}, nil
			})
		})

		r := g.Invoke(url+"/hello", g.Request("run-1", "hello", `{"Name":"Ada"}`))
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status)
		require.JSONEq(t, `{"greeting":"Hello, Ada!"}`, string(*r.Answer.Output))
		require.Empty(t, g.Journal("run-1"))
	})

	t.Run("NullInputIsZeroValue", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "echo", func(ctx context.Context, in struct{ N int }) (int, error) { return in.N, nil })
		})

		r := g.Invoke(url+"/echo", g.Request("run-1", "echo", `null`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.JSONEq(t, `0`, string(*r.Answer.Output))
	})

	t.Run("InputThatDoesNotDecodeFails", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "echo", func(ctx context.Context, in struct{ N int }) (int, error) { return in.N, nil })
		})

		r := g.Invoke(url+"/echo", g.Request("run-1", "echo", `{"N":"x"}`))
		require.Equal(t, protocol.AnswerStatusFailed, r.Answer.Status, string(r.Body))
		require.Equal(t, "input", r.Answer.Error.Type)
		require.False(t, *r.Answer.Error.Retryable)
	})

	t.Run("StepsCheckpointInOrderBeforeTheNextStarts", func(t *testing.T) {
		t.Parallel()
		var g *gatewaytest.Gateway
		var seen []int // journal length as each step starts
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "three", func(ctx context.Context, _ empty) (int, error) {
				sum := 0
				for i, name := range []string{"a", "b", "c"} {
					n, err := step.Run(ctx, name, func(ctx context.Context) (int, error) {
						seen = append(seen, len(g.Journal("run-1")))
						return i + 1, nil
					})
					if err != nil {
						return 0, err
					}
					sum += n
				}
				return sum, nil
			})
		})

		r := g.Invoke(url+"/three", g.Request("run-1", "three", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.JSONEq(t, `6`, string(*r.Answer.Output))
		require.Equal(t, []int{0, 1, 2}, seen, "each step starts after the previous one is journaled")
		j := g.Journal("run-1")
		require.Len(t, j, 3)
		for i, e := range j {
			require.Equal(t, i+1, e.Seq)
			require.Equal(t, protocol.EntryKindStep, e.Kind)
			require.Equal(t, []string{"a", "b", "c"}[i], e.Name)
			require.JSONEq(t, []string{"1", "2", "3"}[i], string(*e.Output))
			require.Equal(t, 1, *e.Attempt)
			require.False(t, e.FinishedAt.Before(*e.StartedAt))
			require.Nil(t, e.Error)
		}
	})

	t.Run("ReplaySkipsJournaledSteps", func(t *testing.T) {
		t.Parallel()
		type charge struct {
			ID     string `json:"id"`
			Amount int    `json:"amount"`
		}
		var calls atomic.Int32
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "checkout", func(ctx context.Context, _ empty) ([]any, error) {
				c, err := step.Run(ctx, "charge", func(ctx context.Context) (charge, error) {
					calls.Add(1)
					return charge{ID: "new"}, nil
				})
				if err != nil {
					return nil, err
				}
				s, err := step.Run(ctx, "ship", func(ctx context.Context) (string, error) {
					calls.Add(1)
					return "shipped " + c.ID, nil
				})
				return []any{c, s}, err
			})
		})
		_, _ = g.Append("run-1", entry(1, "charge", `{"id":"ch_1","amount":42}`))

		r := g.Invoke(url+"/checkout", g.Request("run-1", "checkout", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.JSONEq(t, `[{"id":"ch_1","amount":42},"shipped ch_1"]`, string(*r.Answer.Output))
		require.Equal(t, int32(1), calls.Load(), "only ship runs")
		require.Len(t, g.Journal("run-1"), 2)
	})

	t.Run("NondeterminismNamesBoth", func(t *testing.T) {
		t.Parallel()
		var ran atomic.Bool
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "pay", func(ctx context.Context, _ empty) (empty, error) {
				if _, err := step.Run(ctx, "reserve", func(ctx context.Context) (int, error) { return 1, nil }); err != nil {
					return empty{}, err
				}
				_, err := step.Run(ctx, "charge", func(ctx context.Context) (int, error) {
					ran.Store(true)
					return 2, nil
				})
				return empty{}, err
			})
		})
		_, _ = g.Append("run-1", entry(1, "reserve", `1`))
		_, _ = g.Append("run-1", entry(2, "refund", `2`))

		r := g.Invoke(url+"/pay", g.Request("run-1", "pay", `{}`))
		require.Equal(t, protocol.AnswerStatusFailed, r.Answer.Status, string(r.Body))
		require.Equal(t, protocol.ErrorInfo{
			Type:      "nondeterminism",
			Message:   `step 2: code asks for step "charge" but the journal holds step "refund"`,
			Retryable: new(false),
		}, *r.Answer.Error)
		require.False(t, ran.Load())
	})

	t.Run("NondeterminismNamesKinds", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "nap", func(ctx context.Context, _ empty) (empty, error) {
				return empty{}, step.Sleep(ctx, "nap", time.Second)
			})
		})
		_, _ = g.Append("run-1", entry(1, "nap", `1`))

		r := g.Invoke(url+"/nap", g.Request("run-1", "nap", `{}`))
		require.Equal(t, `step 1: code asks for sleep "nap" but the journal holds step "nap"`, r.Answer.Error.Message, string(r.Body))
	})

	t.Run("FailedStepWithAttemptsLeftSuspends", func(t *testing.T) {
		t.Parallel()
		var after atomic.Bool
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "flaky", func(ctx context.Context, _ empty) (empty, error) {
				_, err := step.Run(ctx, "call", func(ctx context.Context) (int, error) {
					return 0, errors.New("upstream 503")
				}, step.MaxAttempts(5), step.Backoff(10*time.Millisecond, time.Second))
				after.Store(true)
				return empty{}, err
			})
		})
		req := g.Request("run-1", "flaky", `{}`)
		req.StepAttempts = &map[string]int{"1": 2}

		r := g.Invoke(url+"/flaky", req)
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
		require.Equal(t, protocol.InvocationAnswer{
			Status: protocol.AnswerStatusSuspended,
			Await: &protocol.Await{
				Type: protocol.AwaitTypeRetry, Seq: 1, Name: "call", Attempt: new(2),
				Error: &protocol.ErrorInfo{Type: "step_failed", Message: "upstream 503", Retryable: new(true)},
				Retry: &protocol.RetryPolicy{MaxAttempts: new(5), InitialInterval: new("10ms"), MaxInterval: new("1s")},
			},
		}, r.Answer)
		require.False(t, after.Load(), "the step did not return")
		require.Empty(t, g.Journal("run-1"))
	})

	t.Run("PanickingStepIsAFailedAttempt", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "boom", func(ctx context.Context, _ empty) (int, error) {
				return step.Run(ctx, "boom", func(ctx context.Context) (int, error) { panic("kaboom") })
			})
		})

		r := g.Invoke(url+"/boom", g.Request("run-1", "boom", `{}`))
		require.Equal(t, protocol.AwaitTypeRetry, r.Answer.Await.Type, string(r.Body))
		require.Equal(t, "panic: kaboom", r.Answer.Await.Error.Message)
		require.Equal(t, 3, *r.Answer.Await.Retry.MaxAttempts)
	})

	t.Run("FinalFailureIsCheckpointedAndReturned", func(t *testing.T) {
		t.Parallel()
		var got error
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "pay", func(ctx context.Context, _ empty) (string, error) {
				_, err := step.Run(ctx, "charge", func(ctx context.Context) (int, error) {
					return 0, errors.New("card declined")
				})
				got = err
				// The function handles the failure and goes on.
				return step.Run(ctx, "notify", func(ctx context.Context) (string, error) { return "told: " + err.Error(), nil })
			})
		})
		req := g.Request("run-1", "pay", `{}`)
		req.StepAttempts = &map[string]int{"1": 3}

		r := g.Invoke(url+"/pay", req)
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.JSONEq(t, `"told: card declined"`, string(*r.Answer.Output))
		require.Equal(t, &step.Error{Seq: 1, Name: "charge", Type: "step_failed", Message: "card declined"}, got)
		require.True(t, step.IsNonRetryable(got))
		j := g.Journal("run-1")
		require.Len(t, j, 2)
		require.Nil(t, j[0].Output)
		require.Equal(t, 3, *j[0].Attempt)
		require.Equal(t, protocol.ErrorInfo{Type: "step_failed", Message: "card declined", Retryable: new(false)}, *j[0].Error)
	})

	t.Run("NonRetryableStepFailsAtOnceAndFailsTheRun", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "pay", func(ctx context.Context, _ empty) (int, error) {
				return step.Run(ctx, "charge", func(ctx context.Context) (int, error) {
					return 0, step.NonRetryable(errors.New("card stolen"))
				})
			})
		})

		r := g.Invoke(url+"/pay", g.Request("run-1", "pay", `{}`))
		require.Equal(t, protocol.InvocationAnswer{
			Status: protocol.AnswerStatusFailed,
			Error:  &protocol.ErrorInfo{Type: "non_retryable", Message: "card stolen", Retryable: new(false)},
		}, r.Answer, string(r.Body))
		j := g.Journal("run-1")
		require.Len(t, j, 1)
		require.Equal(t, "non_retryable", j[0].Error.Type)
		require.Equal(t, 1, *j[0].Attempt)
	})

	t.Run("ReplayedFinalErrorFailsTheRun", func(t *testing.T) {
		t.Parallel()
		var ran atomic.Bool
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "pay", func(ctx context.Context, _ empty) (int, error) {
				n, err := step.Run(ctx, "charge", func(ctx context.Context) (int, error) {
					ran.Store(true)
					return 1, nil
				})
				if err != nil {
					return 0, errors.Join(errors.New("checkout"), err)
				}
				return n, nil
			})
		})
		_, _ = g.Append("run-1", protocol.JournalEntry{Seq: 1, Kind: protocol.EntryKindStep, Name: "charge",
			Error: &protocol.ErrorInfo{Type: "step_failed", Message: "card declined"}})

		r := g.Invoke(url+"/pay", g.Request("run-1", "pay", `{}`))
		require.Equal(t, protocol.InvocationAnswer{
			Status: protocol.AnswerStatusFailed,
			Error:  &protocol.ErrorInfo{Type: "step_failed", Message: "checkout\ncard declined", Retryable: new(false)},
		}, r.Answer, string(r.Body))
		require.False(t, ran.Load())
	})

	t.Run("SleepSuspends", func(t *testing.T) {
		t.Parallel()
		until := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "nap", func(ctx context.Context, _ empty) (empty, error) {
				return empty{}, step.Sleep(ctx, "nap", 1500*time.Millisecond)
			})
			functions.Register(app, "wait", func(ctx context.Context, _ empty) (empty, error) {
				return empty{}, step.SleepUntil(ctx, "wait", until.In(time.FixedZone("X", 3600)))
			})
		})

		r := g.Invoke(url+"/nap", g.Request("run-1", "nap", `{}`))
		require.Equal(t, protocol.InvocationAnswer{
			Status: protocol.AnswerStatusSuspended,
			Await:  &protocol.Await{Type: protocol.AwaitTypeSleep, Seq: 1, Name: "nap", Duration: new("1.5s")},
		}, r.Answer, string(r.Body))
		require.Contains(t, string(r.Body), `"duration":"1.5s"`)

		r = g.Invoke(url+"/wait", g.Request("run-2", "wait", `{}`))
		require.Equal(t, until, *r.Answer.Await.Until, string(r.Body))
		require.Nil(t, r.Answer.Await.Duration)
	})

	t.Run("JournaledSleepContinues", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "nap", func(ctx context.Context, _ empty) (string, error) {
				if err := step.Sleep(ctx, "nap", time.Hour); err != nil {
					return "", err
				}
				return step.Run(ctx, "after", func(ctx context.Context) (string, error) { return "awake", nil })
			})
		})
		_, _ = g.Append("run-1", protocol.JournalEntry{Seq: 1, Kind: protocol.EntryKindSleep, Name: "nap", Until: new(time.Now())})

		r := g.Invoke(url+"/nap", g.Request("run-1", "nap", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.JSONEq(t, `"awake"`, string(*r.Answer.Output))
		require.Equal(t, 2, g.Journal("run-1")[1].Seq)
	})

	t.Run("InvokeSuspends", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "parent", func(ctx context.Context, _ empty) (int, error) {
				return step.Invoke[int](ctx, "call", "orders.checkout", map[string]int{"amount": 500}).Get()
			})
		})
		r := g.Invoke(url+"/parent", g.Request("run-1", "parent", `{}`))
		require.Equal(t, protocol.AnswerStatusSuspended, r.Answer.Status, string(r.Body))
		require.Equal(t, protocol.AwaitTypeInvoke, r.Answer.Await.Type)
		require.Equal(t, 1, r.Answer.Await.Seq)
		require.Equal(t, "call", r.Answer.Await.Name)
		require.Equal(t, "orders.checkout", *r.Answer.Await.Function)
		require.JSONEq(t, `{"amount":500}`, string(*r.Answer.Await.Input))
		require.Empty(t, g.Journal("run-1"), "nothing is checkpointed: the gateway journals the child's outcome")
	})

	t.Run("JournaledInvokeReplaysTheChildsOutcome", func(t *testing.T) {
		t.Parallel()
		type shipment struct {
			Tracking string `json:"tracking"`
		}
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "parent", func(ctx context.Context, _ empty) (string, error) {
				s, err := step.Invoke[shipment](ctx, "call", "ship", nil).Get()
				if err != nil {
					return "", err
				}
				_, err = step.Invoke[int](ctx, "again", "ship", nil).Get()
				var se *step.Error
				if !errors.As(err, &se) {
					return "", fmt.Errorf("want a *step.Error, got %v", err)
				}
				if !step.IsNonRetryable(err) {
					return "", errors.New("a child's error must be non-retryable")
				}
				return fmt.Sprintf("%s %d %s %s: %s", s.Tracking, se.Seq, se.Name, se.Type, se.Message), nil
			})
		})
		_, _ = g.Append("run-1", protocol.JournalEntry{Seq: 1, Kind: protocol.EntryKindInvoke, Name: "call", Output: new(protocol.AnyJSON(`{"tracking":"trk_1"}`))})
		_, _ = g.Append("run-1", protocol.JournalEntry{Seq: 2, Kind: protocol.EntryKindInvoke, Name: "again",
			Error: &protocol.ErrorInfo{Type: step.ErrorTypeNotFound, Message: "function ship is not registered"}})

		r := g.Invoke(url+"/parent", g.Request("run-1", "parent", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.JSONEq(t, `"trk_1 2 again not_found: function ship is not registered"`, string(*r.Answer.Output))
	})

	t.Run("InvokeNondeterminismNamesKinds", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "parent", func(ctx context.Context, _ empty) (int, error) {
				return step.Invoke[int](ctx, "call", "child", nil).Get()
			})
		})
		_, _ = g.Append("run-1", entry(1, "call", `1`))
		r := g.Invoke(url+"/parent", g.Request("run-1", "parent", `{}`))
		require.Equal(t, protocol.AnswerStatusFailed, r.Answer.Status, string(r.Body))
		require.Equal(t, "nondeterminism", r.Answer.Error.Type)
		require.Contains(t, r.Answer.Error.Message, `invoke "call"`)
		require.Contains(t, r.Answer.Error.Message, `step "call"`)
	})

	t.Run("InvokeRefusesBadArguments", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "parent", func(ctx context.Context, _ empty) (string, error) {
				var errs []string
				for _, call := range []func() error{
					func() error { _, err := step.Invoke[int](ctx, "call", "", nil).Get(); return err },
					func() error { _, err := step.Invoke[int](ctx, "call", "a/b", nil).Get(); return err },
					func() error { _, err := step.Invoke[int](ctx, "call", "ok", func() {}).Get(); return err },
					func() error { _, err := step.Invoke[int](ctx, "", "ok", nil).Get(); return err },
				} {
					err := call()
					if !step.IsNonRetryable(err) {
						return "", fmt.Errorf("want a non-retryable error, got %v", err)
					}
					errs = append(errs, err.Error())
				}
				// No seq was taken: this step is seq 1.
				_, err := step.Run(ctx, "after", func(ctx context.Context) (int, error) { return 1, nil })
				return strings.Join(errs, "\n"), err
			})
		})
		r := g.Invoke(url+"/parent", g.Request("run-1", "parent", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		journal := g.Journal("run-1")
		require.Len(t, journal, 1, "the step was checkpointed")
		require.Equal(t, 1, journal[0].Seq)
	})

	t.Run("TheRunIsClaimedBeforeTheFirstStepBodyEvenAfterACheckpoint", func(t *testing.T) {
		// A checkpoint the gateway took proves nothing about this process: a copy of the
		// invocation request checkpoints under the same token. So a value checkpointed
		// first does not spare the question, and when another process claimed the
		// invocation (the fake answers 409 to the question, and takes checkpoints), the
		// step body does not run.
		t.Parallel()
		var ran atomic.Int32
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "valued", func(ctx context.Context, _ empty) (int, error) {
				if err := step.SetValue(ctx, "phase", "charging"); err != nil {
					return 0, err
				}
				return step.Run(ctx, "charge", func(context.Context) (int, error) { return int(ran.Add(1)), nil })
			})
		})
		g.Supersede("run-1")
		r := g.Invoke(url+"/valued", g.Request("run-1", "valued", `{}`))
		require.Equal(t, protocol.AnswerStatusFailed, r.Answer.Status, string(r.Body))
		require.Equal(t, "superseded", r.Answer.Error.Type, string(r.Body))
		require.Len(t, g.Journal("run-1"), 1, "the value was checkpointed")
		require.Equal(t, 1, g.CurrentChecks("run-1"), "the question was asked after the checkpoint")
		require.Zero(t, ran.Load(), "the step body did not run")
	})

	t.Run("CheckpointConflictStops", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct {
			name, body string
			want       protocol.ErrorInfo
		}{
			{"Superseded", `{"type":"superseded","status":409,"title":"Conflict","detail":"run cancelled"}`,
				protocol.ErrorInfo{Type: "superseded", Message: `checkpoint step 1 "a": run cancelled`, Retryable: new(false)}},
			{"NoBody", ``,
				protocol.ErrorInfo{Type: "superseded", Message: `checkpoint step 1 "a": Conflict`, Retryable: new(false)}},
			{"Nondeterminism", `{"type":"https://stepgate.dev/problems/nondeterminism","status":409,"title":"Conflict","detail":"seq 1 holds step \"b\", not step \"a\""}`,
				protocol.ErrorInfo{Type: "nondeterminism", Message: `step 1 "a": seq 1 holds step "b", not step "a"`, Retryable: new(false)}},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				var second atomic.Bool
				g, url := serve(t, func(app *functions.App) {
					functions.Register(app, "two", func(ctx context.Context, _ empty) (empty, error) {
						if _, err := step.Run(ctx, "a", func(ctx context.Context) (int, error) { return 1, nil }); err != nil {
							return empty{}, err
						}
						_, err := step.Run(ctx, "b", func(ctx context.Context) (int, error) {
							second.Store(true)
							return 2, nil
						})
						return empty{}, err
					})
				})
				g.OnCheckpoint(func(string, protocol.JournalEntry) (int, string) { return http.StatusConflict, tt.body })

				r := g.Invoke(url+"/two", g.Request("run-1", "two", `{}`))
				require.Equal(t, protocol.InvocationAnswer{Status: protocol.AnswerStatusFailed, Error: &tt.want}, r.Answer, string(r.Body))
				require.False(t, second.Load(), "no step after a 409")
			})
		}
	})

	t.Run("CheckpointRetriedThroughAnOutage", func(t *testing.T) {
		t.Parallel()
		var tries atomic.Int32
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "one", aThenB)
		})
		g.OnCheckpoint(func(string, protocol.JournalEntry) (int, string) {
			if tries.Add(1) <= 8 {
				return http.StatusServiceUnavailable, `{"detail":"the database is unreachable; retry shortly"}`
			}
			return 0, ""
		})

		r := g.Invoke(url+"/one", g.Request("run-1", "one", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.Equal(t, int32(10), tries.Load(), "tried until the gateway took a, then b at once")
		require.Len(t, g.Journal("run-1"), 2, "a and b checkpointed")
	})

	t.Run("CheckpointGivesUpWithItsInvocation", func(t *testing.T) {
		t.Parallel()
		// The invocation's request ends (the gateway gave up on it, or died) while its
		// checkpoint is unavailable: the SDK stops trying and the invocation ends.
		var tries atomic.Int32
		var cancelRequest atomic.Pointer[context.CancelFunc]
		app := functions.New(functions.Config{PublicKeys: []ed25519.PublicKey{pub(newKey)}, Logger: testLogger(t)})
		functions.Register(app, "one", aThenB)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx, cancel := context.WithCancel(r.Context())
			defer cancel()
			cancelRequest.Store(&cancel)
			app.ServeHTTP(w, r.WithContext(ctx))
		}))
		t.Cleanup(srv.Close)
		g := gatewaytest.New(t, newKey)
		g.OnCheckpoint(func(string, protocol.JournalEntry) (int, string) {
			if tries.Add(1) == 3 {
				(*cancelRequest.Load())()
			}
			return http.StatusServiceUnavailable, `{"detail":"database down"}`
		})

		r := g.Invoke(srv.URL+"/one", g.Request("run-1", "one", `{}`))
		require.Equal(t, http.StatusInternalServerError, r.Code, string(r.Body))
		require.Equal(t, "checkpoint", r.Error.Type)
		require.Contains(t, r.Error.Message, "context canceled")
		require.Equal(t, int32(3), tries.Load(), "no try after the request ended")
	})

	t.Run("CheckpointRetriedUntilItSucceeds", func(t *testing.T) {
		t.Parallel()
		var tries atomic.Int32
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "one", aThenB)
		})
		g.OnCheckpoint(func(string, protocol.JournalEntry) (int, string) {
			if tries.Add(1) == 1 {
				return http.StatusBadGateway, ``
			}
			return 0, ""
		})

		r := g.Invoke(url+"/one", g.Request("run-1", "one", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.Len(t, g.Journal("run-1"), 2, "a checkpointed, b with the answer")
	})

	t.Run("ErrorAndPanicAnswer500", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "err", func(ctx context.Context, _ empty) (int, error) { return 0, errors.New("db down") })
			functions.Register(app, "panic", func(ctx context.Context, _ empty) (int, error) { panic("oops") })
		})

		r := g.Invoke(url+"/err", g.Request("run-1", "err", `{}`))
		require.Equal(t, http.StatusInternalServerError, r.Code)
		require.Equal(t, protocol.ErrorInfo{Type: "error", Message: "db down"}, r.Error)

		r = g.Invoke(url+"/panic", g.Request("run-2", "panic", `{}`))
		require.Equal(t, http.StatusInternalServerError, r.Code)
		require.Equal(t, protocol.ErrorInfo{Type: "panic", Message: "oops"}, r.Error)
	})

	t.Run("NonRetryableFunctionErrorFails", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "bad", func(ctx context.Context, _ empty) (int, error) {
				return 0, step.NonRetryable(errors.New("order not found"))
			})
		})

		r := g.Invoke(url+"/bad", g.Request("run-1", "bad", `{}`))
		require.Equal(t, protocol.InvocationAnswer{
			Status: protocol.AnswerStatusFailed,
			Error:  &protocol.ErrorInfo{Type: "non_retryable", Message: "order not found", Retryable: new(false)},
		}, r.Answer, string(r.Body))
	})

	t.Run("RecoveringUserCodeCannotSwallowASuspension", func(t *testing.T) {
		t.Parallel()
		var later atomic.Bool
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "sneaky", func(ctx context.Context, _ empty) (string, error) {
				func() {
					defer func() { _ = recover() }()
					_ = step.Sleep(ctx, "nap", time.Minute)
				}()
				// Later steps halt at once and the return value is ignored.
				_, _ = step.Run(ctx, "later", func(ctx context.Context) (int, error) {
					later.Store(true)
					return 1, nil
				})
				return "ignored", nil
			})
			functions.Register(app, "swallow", func(ctx context.Context, _ empty) (string, error) {
				defer func() { _ = recover() }()
				_ = step.Sleep(ctx, "nap", time.Minute)
				return "unreachable", nil
			})
		})

		r := g.Invoke(url+"/sneaky", g.Request("run-1", "sneaky", `{}`))
		require.Equal(t, protocol.AnswerStatusSuspended, r.Answer.Status, string(r.Body))
		require.Equal(t, "nap", r.Answer.Await.Name)
		require.False(t, later.Load())
		require.Empty(t, g.Journal("run-1"))

		r = g.Invoke(url+"/swallow", g.Request("run-2", "swallow", `{}`))
		require.Equal(t, protocol.AnswerStatusSuspended, r.Answer.Status, string(r.Body))
		require.Equal(t, "nap", r.Answer.Await.Name)
	})

	t.Run("StepInAnotherGoroutineDoesNotCrash", func(t *testing.T) {
		t.Parallel()
		var got, ctxErr error
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "async", func(ctx context.Context, _ empty) (empty, error) {
				done := make(chan error)
				go func() { done <- step.Sleep(ctx, "nap", time.Minute) }()
				got = <-done
				ctxErr = ctx.Err()
				return empty{}, got
			})
		})

		r := g.Invoke(url+"/async", g.Request("run-1", "async", `{}`))
		require.Equal(t, protocol.AnswerStatusSuspended, r.Answer.Status, string(r.Body))
		require.Equal(t, protocol.AwaitTypeSleep, r.Answer.Await.Type)
		require.ErrorIs(t, got, step.ErrStopped)
		require.ErrorIs(t, ctxErr, context.Canceled, "the function's context is cancelled")
	})

	t.Run("NestedStepFails", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "nest", func(ctx context.Context, _ empty) (int, error) {
				return step.Run(ctx, "outer", func(ctx context.Context) (int, error) {
					return step.Run(ctx, "inner", func(ctx context.Context) (int, error) { return 1, nil })
				})
			})
		})

		r := g.Invoke(url+"/nest", g.Request("run-1", "nest", `{}`))
		require.Equal(t, protocol.AnswerStatusFailed, r.Answer.Status, string(r.Body))
		require.Equal(t, step.ErrNested.Error(), r.Answer.Error.Message)
		require.Len(t, g.Journal("run-1"), 1)
	})

	t.Run("ReplayOfUnreadableOutputRetries", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "typed", func(ctx context.Context, _ empty) (int, error) {
				return step.Run(ctx, "n", func(ctx context.Context) (int, error) { return 1, nil })
			})
		})
		_, _ = g.Append("run-1", entry(1, "n", `"not a number"`))

		r := g.Invoke(url+"/typed", g.Request("run-1", "typed", `{}`))
		require.Equal(t, http.StatusInternalServerError, r.Code, string(r.Body))
		require.Equal(t, "replay", r.Error.Type)
	})

	t.Run("IdentityAndRun", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "who", func(ctx context.Context, _ empty) ([]any, error) {
				return []any{functions.IdentityFrom(ctx), functions.RunFrom(ctx).ID, functions.RunFrom(ctx).Attempt}, nil
			})
		})

		r := g.Invoke(url+"/who", g.Request("run-7", "who", `{}`))
		require.JSONEq(t, `[{"subject":"user-1","tenant":"acme","roles":["admin"]},"run-7",1]`, string(*r.Answer.Output), string(r.Body))
		require.Equal(t, functions.Identity{}, functions.IdentityFrom(t.Context()))
		require.Equal(t, functions.RunInfo{}, functions.RunFrom(t.Context()))
	})
}

func TestRequests(t *testing.T) {
	t.Parallel()

	hello := func(app *functions.App) {
		functions.Register(app, "hello", func(ctx context.Context, _ empty) (string, error) { return "hi", nil })
		functions.Register(app, "orders.checkout", func(ctx context.Context, _ empty) (string, error) { return "ok", nil },
			functions.InvocationTimeout(30*time.Second), functions.InvocationAttempts(5), functions.InvocationBackoff(time.Second, time.Minute))
	}

	t.Run("Signature", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, hello)
		now := time.Now()
		sign := func(at time.Time, tenant string, b []byte, keys ...*signature.SigningKey) string {
			var ks []signature.SigningKey
			for _, k := range keys {
				ks = append(ks, *k)
			}
			return signature.Sign(at, tenant, signature.Request{Method: "POST", Path: "/hello", Body: b}, ks...)
		}
		const acme = gatewaytest.Tenant
		unknown := signingKey(9)
		for _, tt := range []struct {
			name string
			sign func(body []byte) string
			code int
		}{
			{"NewKey", func(b []byte) string { return sign(now, acme, b, newKey) }, http.StatusOK},
			{"OldKey", func(b []byte) string { return sign(now, acme, b, oldKey) }, http.StatusOK},
			{"BothKeys", func(b []byte) string { return sign(now, acme, b, unknown, oldKey) }, http.StatusOK},
			{"ClockSkewWithinTheWindow", func(b []byte) string { return sign(now.Add(4*time.Minute), acme, b, newKey) }, http.StatusOK},
			{"Unsigned", func([]byte) string { return "" }, http.StatusUnauthorized},
			{"Malformed", func([]byte) string { return "t=abc,v1=zz" }, http.StatusUnauthorized},
			{"Forged", func(b []byte) string { return sign(now, acme, b, unknown) }, http.StatusUnauthorized},
			// A function author holds the tenant's HMAC secret; an app that verifies the
			// public keys ignores an HMAC signature, however right.
			{"HMACOnly", func(b []byte) string {
				return "v=2,t=" + fmt.Sprint(now.Unix()) + ",tenant=acme," + strings.Split(sign(now, acme, b, newKey), ",")[4]
			}, http.StatusUnauthorized},
			{"OtherBody", func([]byte) string { return sign(now, acme, []byte(`{}`), newKey) }, http.StatusUnauthorized},
			// The gateway's key signing for another tenant than the run's identity.
			{"OtherTenant", func(b []byte) string { return sign(now, "globex", b, newKey) }, http.StatusUnauthorized},
			{"Expired", func(b []byte) string { return sign(now.Add(-10*time.Minute), acme, b, newKey) }, http.StatusUnauthorized},
			{"FromTheFuture", func(b []byte) string { return sign(now.Add(10*time.Minute), acme, b, newKey) }, http.StatusUnauthorized},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				body, err := json.Marshal(g.Request("run-"+tt.name, "hello", `{}`))
				require.NoError(t, err)
				r := g.Post(url+"/hello", body, tt.sign(body))
				require.Equal(t, tt.code, r.Code, string(r.Body))
				if tt.code == http.StatusUnauthorized {
					require.Equal(t, "signature", r.Error.Type)
					require.True(t, strings.HasPrefix(r.Error.Message, "signature: "), r.Error.Message)
				}
			})
		}
	})

	t.Run("ReplayIsRefused", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, hello)
		body, err := json.Marshal(g.Request("run-1", "hello", `{}`))
		require.NoError(t, err)
		at := time.Now()
		hello := gatewaytest.Request(http.MethodPost, url+"/hello", body)
		sig := signature.Sign(at, gatewaytest.Tenant, hello, *newKey, *oldKey)

		r := g.Post(url+"/hello", body, sig)
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
		for _, replay := range []string{
			sig,
			signature.Sign(at, gatewaytest.Tenant, hello, *oldKey, *newKey), // the same signatures, reordered
			signature.Sign(at, gatewaytest.Tenant, hello, *oldKey),          // one of them
			reversed(sig),
		} {
			r = g.Post(url+"/hello", body, replay)
			require.Equal(t, http.StatusUnauthorized, r.Code, string(r.Body))
			require.Equal(t, "signature", r.Error.Type)
			require.Equal(t, signature.ErrReplayed.Error(), r.Error.Message)
		}

		// A new signature of the same invocation (a new timestamp) is a new request.
		r = g.Post(url+"/hello", body, signature.Sign(at.Add(time.Second), gatewaytest.Tenant, hello, *newKey))
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))

		// The manifest changes nothing and may be fetched with one signature again.
		for range 2 {
			require.Equal(t, http.StatusOK, g.Get(url+"/").Code)
		}
	})

	t.Run("Manifest", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, hello)

		r := g.Get(url + "/")
		require.Equal(t, http.StatusOK, r.Code, string(r.Body))
		require.JSONEq(t, `{"protocol":1,"protocol_version":"`+protocol.Version+`","sdk":"`+gatewaytest.SDK+`","replay_only":true,"functions":[
			{"name":"hello","path":"hello","config":{"modes":["request","duplex"]}},
			{"name":"orders.checkout","path":"orders.checkout","config":{"modes":["request","duplex"],
				"timeout":"30s","retries":{"max_attempts":5,"initial_interval":"1s","max_interval":"1m0s"}}}
		]}`, string(r.Body))

		r = g.Post(url+"/", nil, g.Sign(http.MethodPost, url+"/", nil))
		require.Equal(t, http.StatusMethodNotAllowed, r.Code)
	})

	t.Run("ManifestNeedsSignature", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, hello)
		g.Key = nil

		r := g.Get(url + "/")
		require.Equal(t, http.StatusUnauthorized, r.Code, string(r.Body))
		require.Equal(t, "signature", r.Error.Type)
	})

	t.Run("NoKeysRefusesEverything", func(t *testing.T) {
		t.Parallel()
		app := functions.New(functions.Config{Logger: testLogger(t)})
		hello(app)
		srv := httptest.NewServer(app)
		t.Cleanup(srv.Close)
		g := gatewaytest.New(t, newKey)

		r := g.Invoke(srv.URL+"/hello", g.Request("run-1", "hello", `{}`))
		require.Equal(t, http.StatusUnauthorized, r.Code, string(r.Body))
		require.ErrorContains(t, errors.New(r.Error.Message), "no key")
	})

	t.Run("InsecureSkipVerify", func(t *testing.T) {
		t.Parallel()
		app := functions.New(functions.Config{InsecureSkipVerify: true, Logger: testLogger(t)})
		hello(app)
		srv := httptest.NewServer(app)
		t.Cleanup(srv.Close)
		g := gatewaytest.New(t, nil)

		r := g.Invoke(srv.URL+"/hello", g.Request("run-1", "hello", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
	})

	t.Run("HMACSecrets", func(t *testing.T) {
		t.Parallel()
		app := functions.New(functions.Config{HMACSecrets: [][]byte{newKey.HMAC}, Logger: testLogger(t)})
		hello(app)
		srv := httptest.NewServer(app)
		t.Cleanup(srv.Close)
		g := gatewaytest.New(t, newKey)
		r := g.Invoke(srv.URL+"/hello", g.Request("run-1", "hello", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))

		g.Key = oldKey
		r = g.Invoke(srv.URL+"/hello", g.Request("run-2", "hello", `{}`))
		require.Equal(t, http.StatusUnauthorized, r.Code, string(r.Body))
	})

	t.Run("TenantPinned", func(t *testing.T) {
		t.Parallel()
		for tenant, code := range map[string]int{gatewaytest.Tenant: http.StatusOK, "globex": http.StatusUnauthorized} {
			app := functions.New(functions.Config{PublicKeys: []ed25519.PublicKey{pub(newKey)}, Tenant: tenant})
			hello(app)
			srv := httptest.NewServer(app)
			t.Cleanup(srv.Close)
			g := gatewaytest.New(t, newKey)
			r := g.Invoke(srv.URL+"/hello", g.Request("run-1", "hello", `{}`))
			require.Equal(t, code, r.Code, string(r.Body))
		}
	})

	t.Run("BadKeysPanic", func(t *testing.T) {
		t.Parallel()
		require.PanicsWithValue(t, "functions: public key 1 is 3 bytes, not an Ed25519 public key (32 bytes)", func() {
			functions.New(functions.Config{PublicKeys: []ed25519.PublicKey{{1, 2, 3}}})
		})
		require.PanicsWithValue(t, "functions: HMAC secret 1 is 5 bytes; at least 32 are required", func() {
			functions.New(functions.Config{HMACSecrets: [][]byte{[]byte("short")}})
		})
	})

	t.Run("MountedUnderAPrefix", func(t *testing.T) {
		t.Parallel()
		app := functions.New(functions.Config{PublicKeys: []ed25519.PublicKey{pub(newKey)}})
		hello(app)
		mux := http.NewServeMux()
		mux.Handle("/fns/", http.StripPrefix("/fns", app))
		srv := httptest.NewServer(mux)
		t.Cleanup(srv.Close)
		g := gatewaytest.New(t, newKey)

		require.Equal(t, http.StatusOK, g.Get(srv.URL+"/fns/").Code)
		r := g.Invoke(srv.URL+"/fns/orders.checkout", g.Request("run-1", "orders.checkout", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
	})

	t.Run("Malformed", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, hello)
		valid := g.Request("run-1", "hello", `{}`)
		for _, tt := range []struct {
			name, body, want string
		}{
			{"NotJSON", `{"protocol":`, "decode invocation: unexpected end of JSON input"},
			{"WrongType", `{"protocol":"one"}`, "decode invocation: "},
			{"Protocol2", `{"protocol":2}`, "invalid invocation: protocol 2 is not supported (want 1)"},
			{"NoRun", `{"protocol":1}`, "invalid invocation: run.id is missing"},
			{"NoCheckpoint", mustJSON(t, func() any { r := *valid; r.Checkpoint = protocol.Checkpoint{}; return r }()),
				"invalid invocation: checkpoint.url or checkpoint.token is missing"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := g.Post(url+"/hello", []byte(tt.body), g.Sign(http.MethodPost, url+"/hello", []byte(tt.body)))
				require.Equal(t, http.StatusBadRequest, r.Code, string(r.Body))
				require.Equal(t, "malformed", r.Error.Type)
				require.True(t, strings.HasPrefix(r.Error.Message, tt.want), r.Error.Message)
			})
		}
	})

	t.Run("TooLarge", func(t *testing.T) {
		t.Parallel()
		app := functions.New(functions.Config{MaxBodyBytes: 10, InsecureSkipVerify: true})
		hello(app)
		srv := httptest.NewServer(app)
		t.Cleanup(srv.Close)
		g := gatewaytest.New(t, nil)

		r := g.Invoke(srv.URL+"/hello", g.Request("run-1", "hello", `{}`))
		require.Equal(t, http.StatusRequestEntityTooLarge, r.Code, string(r.Body))
	})

	t.Run("UnknownFunctionAndMethod", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t, hello)

		r := g.Invoke(url+"/nope", g.Request("run-1", "nope", `{}`))
		require.Equal(t, http.StatusNotFound, r.Code)
		require.Equal(t, `no function "nope"`, r.Error.Message)
		r = g.Get(url + "/hello")
		require.Equal(t, http.StatusMethodNotAllowed, r.Code)
	})
}

func TestRegister(t *testing.T) {
	t.Parallel()
	app := functions.New(functions.Config{})
	fn := func(ctx context.Context, _ empty) (empty, error) { return empty{}, nil }
	functions.Register(app, "a.b-c_d", fn)

	require.PanicsWithValue(t, `functions: function "a.b-c_d" registered twice`, func() { functions.Register(app, "a.b-c_d", fn) })
	for _, name := range []string{"", "a/b", ".a", "a b", strings.Repeat("a", 256)} {
		require.Panics(t, func() { functions.Register(app, name, fn) }, name)
	}
}

func TestStepOutsideAnInvocation(t *testing.T) {
	t.Parallel()
	_, err := step.Run(t.Context(), "a", func(ctx context.Context) (int, error) { return 1, nil })
	require.ErrorIs(t, err, step.ErrNoInvocation)
	require.ErrorIs(t, step.Sleep(t.Context(), "a", time.Second), step.ErrNoInvocation)
	_, err = step.Invoke[int](t.Context(), "a", "b", nil).Get()
	require.ErrorIs(t, err, step.ErrNoInvocation)
	require.Equal(t, 0, step.Attempt(t.Context()))
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// reversed returns a signature header with its parts in reverse order.
func reversed(header string) string {
	parts := strings.Split(header, ",")
	slices.Reverse(parts)
	return strings.Join(parts, ",")
}

// aThenB runs step "a", whose checkpoint is made when step "b" starts, and returns b's
// output; b is journaled with the answer (its steps).
func aThenB(ctx context.Context, _ empty) (int, error) {
	if _, err := step.Run(ctx, "a", func(ctx context.Context) (int, error) { return 1, nil }); err != nil {
		return 0, err
	}
	return step.Run(ctx, "b", func(ctx context.Context) (int, error) { return 2, nil })
}
