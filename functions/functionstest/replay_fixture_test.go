package functionstest_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
	"github.com/stepgate/stepgate/functions/step"
)

type item struct {
	Item string `json:"item"`
}

// checkoutApp returns an app (that needs no signatures) with checkout registered by
// registerCheckout with a sleep of an hour.
func checkoutApp(t *testing.T, a, b string, ran *atomic.Int64) *functions.App {
	app := newApp(t)
	registerCheckout(app, "checkout", a, b, time.Hour, ran)
	return app
}

// registerCheckout registers function name: steps a and b (in that order), a sleep
// named "cool off" (none when sleep is 0), then a step "ship"; every step function adds
// one to ran.
func registerCheckout(app *functions.App, name, a, b string, sleep time.Duration, ran *atomic.Int64) {
	functions.Register(app, name, func(ctx context.Context, in item) (string, error) {
		for _, s := range []string{a, b} {
			if _, err := step.Run(ctx, s, func(context.Context) (string, error) {
				ran.Add(1)
				return s[:1] + "-" + in.Item, nil
			}); err != nil {
				return "", err
			}
		}
		if sleep > 0 {
			if err := step.Sleep(ctx, "cool off", sleep); err != nil {
				return "", err
			}
		}
		return step.Run(ctx, "ship", func(context.Context) (string, error) {
			ran.Add(1)
			return "shipped " + in.Item, nil
		})
	})
}

// TestReplayFixture replays a hand-written export (testdata/checkout.run.json: a run
// suspended after steps reserve and charge) with no gateway.
func TestReplayFixture(t *testing.T) {
	t.Parallel()
	const file = "testdata/checkout.run.json"

	t.Run("TheSameCodeReplaysCleanlyAndWouldWaitForItsSleep", func(t *testing.T) {
		t.Parallel()
		var ran atomic.Int64
		r := functionstest.Replay(t, checkoutApp(t, "reserve", "charge", &ran), "checkout", file)
		require.True(t, r.Clean, "%s", r)
		require.Nil(t, r.Divergence)
		require.Equal(t, "wait", r.Next.Kind)
		require.Equal(t, 3, r.Next.Seq)
		require.Equal(t, functionstest.Step{Kind: "sleep", Name: "cool off"}, r.Next.Step)
		require.Equal(t, `would wait for sleep "cool off" at seq 3`, r.Next.String())
		require.Zero(t, ran.Load(), "no step function ran")
	})

	t.Run("StepsReorderedDivergeAtTheFirstSeq", func(t *testing.T) {
		t.Parallel()
		var ran atomic.Int64
		r, err := functionstest.ReplayFile(checkoutApp(t, "charge", "reserve", &ran), "checkout", file)
		require.NoError(t, err)
		require.False(t, r.Clean)
		require.NotNil(t, r.Divergence, "%+v", r.Answer)
		require.Equal(t, 1, r.Divergence.Seq)
		require.Equal(t, functionstest.Step{Kind: "step", Name: "reserve"}, r.Divergence.Journal)
		require.Equal(t, functionstest.Step{Kind: "step", Name: "charge"}, r.Divergence.Asked)
		require.Equal(t, `seq 1: the journal holds step "reserve" but the code asks for step "charge"`, r.Divergence.String())
		require.Zero(t, ran.Load())
	})

	t.Run("ReplayFailsTheTestOnADivergence", func(t *testing.T) {
		t.Parallel()
		var ran atomic.Int64
		ft := &fakeT{TB: t}
		functionstest.Replay(ft, checkoutApp(t, "reserve", "refund", &ran), "checkout", file)
		require.Len(t, ft.errors, 1)
		require.Contains(t, ft.errors[0], `the code diverges from the run at seq 2: the journal holds step "charge" but the code asks for step "refund"`)
	})

	t.Run("ANewStepAfterTheJournalIsNamedNotRun", func(t *testing.T) {
		t.Parallel()
		var ran atomic.Int64
		app := newApp(t)
		functions.Register(app, "checkout", func(ctx context.Context, in item) (string, error) {
			for _, name := range []string{"reserve", "charge", "notify"} {
				if _, err := step.Run(ctx, name, func(context.Context) (string, error) {
					ran.Add(1)
					return "x", nil
				}); err != nil {
					return "", err
				}
			}
			return "done", nil
		})
		r := functionstest.Replay(t, app, "checkout", file)
		require.True(t, r.Clean, "%s", r)
		require.Equal(t, functionstest.Next{Kind: "step", Seq: 3, Step: functionstest.Step{Kind: "step", Name: "notify"}}, r.Next)
		require.Equal(t, `would run step "notify" at seq 3`, r.Next.String())
		require.Zero(t, ran.Load(), "the new step's function did not run")
	})

	t.Run("ANewEntryIsReportedNotJournaled", func(t *testing.T) {
		t.Parallel()
		var ran atomic.Int64
		app := newApp(t)
		functions.Register(app, "checkout", func(ctx context.Context, in item) (string, error) {
			for _, name := range []string{"reserve", "charge"} {
				if _, err := step.Run(ctx, name, func(context.Context) (string, error) {
					ran.Add(1)
					return "x", nil
				}); err != nil {
					return "", err
				}
			}
			if err := step.SendEvent(ctx, "order.paid", in); err != nil {
				return "", err
			}
			return "done", nil
		})
		r := functionstest.Replay(t, app, "checkout", file)
		require.True(t, r.Clean, "%s", r)
		require.Equal(t, "checkpoint", r.Next.Kind)
		require.Equal(t, 3, r.Next.Seq)
		require.Equal(t, functionstest.Step{Kind: "event", Name: "order.paid"}, r.Next.Step)
		require.Zero(t, ran.Load())
	})

	t.Run("AnotherFormatIsRefused", func(t *testing.T) {
		t.Parallel()
		_, err := functionstest.ReplayFile(newApp(t), "checkout", "testdata/not-an-export.json")
		require.Error(t, err)
	})
}

// fakeT records Errorf calls instead of failing the test.
type fakeT struct {
	testing.TB
	errors []string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Errorf(format string, args ...any) {
	f.errors = append(f.errors, fmt.Sprintf(format, args...))
}

// refundApp returns an app with refund: steps lookup and pay (which fails with
// card_declined when decline is set), then {"paid": <pay's output><suffix>}.
func refundApp(t *testing.T, decline bool, suffix string, ran *atomic.Int64) *functions.App {
	app := newApp(t)
	functions.Register(app, "refund", func(ctx context.Context, in struct{ Order int }) (map[string]string, error) {
		n, err := step.Run(ctx, "lookup", func(context.Context) (int, error) {
			ran.Add(1)
			return in.Order, nil
		})
		if err != nil {
			return nil, err
		}
		paid, err := step.Run(ctx, "pay", func(context.Context) (string, error) {
			ran.Add(1)
			if decline {
				return "", step.NonRetryable(&step.Error{Type: "card_declined", Message: "card declined"})
			}
			return fmt.Sprintf("paid-%d", n), nil
		})
		if err != nil {
			return nil, err
		}
		return map[string]string{"paid": paid + suffix}, nil
	})
	return app
}

// TestReplayFixtureOutcome replays hand-written exports of runs that ended: the same
// end is clean, another is the divergence.
func TestReplayFixtureOutcome(t *testing.T) {
	t.Parallel()

	t.Run("ACompletedRunReplaysToItsOutput", func(t *testing.T) {
		t.Parallel()
		var ran atomic.Int64
		r := functionstest.Replay(t, refundApp(t, false, "", &ran), "refund", "testdata/refund-completed.run.json")
		require.True(t, r.Clean, "%s", r)
		require.Equal(t, functionstest.Next{Kind: "completed", Seq: 3}, r.Next)
		require.Zero(t, ran.Load())
	})

	t.Run("AnotherOutputIsTheDivergence", func(t *testing.T) {
		t.Parallel()
		var ran atomic.Int64
		r, err := functionstest.ReplayFile(refundApp(t, false, " (v2)", &ran), "refund", "testdata/refund-completed.run.json")
		require.NoError(t, err)
		require.NotNil(t, r.Divergence, "%s", r)
		require.Equal(t, `seq 3: the journal holds completed with {"paid":"paid-42"} but the code asks for completed with {"paid":"paid-42 (v2)"}`,
			r.Divergence.String())
	})

	t.Run("CodeThatEndsWhereTheJournalGoesOnDivergesThere", func(t *testing.T) {
		t.Parallel()
		var ran atomic.Int64
		app := newApp(t)
		functions.Register(app, "refund", func(ctx context.Context, in struct{ Order int }) (int, error) {
			return step.Run(ctx, "lookup", func(context.Context) (int, error) {
				ran.Add(1)
				return in.Order, nil
			})
		})
		r, err := functionstest.ReplayFile(app, "refund", "testdata/refund-completed.run.json")
		require.NoError(t, err)
		require.NotNil(t, r.Divergence, "%s", r)
		require.Equal(t, functionstest.Divergence{Seq: 2, Journal: functionstest.Step{Kind: "step", Name: "pay"},
			Asked: functionstest.Step{Kind: "completed"}}, *r.Divergence)
		require.Equal(t, `seq 2: the journal holds step "pay" but the code asks for completed`, r.Divergence.String())
		require.Zero(t, ran.Load())
	})

	t.Run("AFailedRunReplaysToItsFailure", func(t *testing.T) {
		t.Parallel()
		var ran atomic.Int64
		r := functionstest.Replay(t, refundApp(t, true, "", &ran), "refund", "testdata/refund-failed.run.json")
		require.True(t, r.Clean, "%s", r)
		require.Equal(t, functionstest.Next{Kind: "failed", Seq: 3}, r.Next)
		require.Zero(t, ran.Load())
	})
}
