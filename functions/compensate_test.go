package functions_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol"
)

// saga books, pays and ships; each done step registers its undo; ship fails for good
// when told to, and an undo fails for good when told to. It counts what ran.
type saga struct {
	failShip, failRefund bool
	retryable            bool
	refunds, releases    atomic.Int32
	refundAttempts       atomic.Int32
}

func (s *saga) register(app *functions.App) {
	functions.Register(app, "saga", func(ctx context.Context, _ empty) (string, error) {
		if _, err := step.Run(ctx, "book", func(context.Context) (int, error) { return 1, nil }); err != nil {
			return "", err
		}
		if err := step.Compensate(ctx, "release", func(context.Context) error { s.releases.Add(1); return nil }); err != nil {
			return "", err
		}
		if _, err := step.Run(ctx, "pay", func(context.Context) (int, error) { return 2, nil }); err != nil {
			return "", err
		}
		if err := step.Compensate(ctx, "refund", func(context.Context) error {
			s.refundAttempts.Add(1)
			if s.failRefund {
				return step.NonRetryable(errors.New("the provider refuses refunds"))
			}
			s.refunds.Add(1)
			return nil
		}); err != nil {
			return "", err
		}
		if s.retryable {
			return "", errors.New("a blip") // retried: nothing is undone
		}
		_, err := step.Run(ctx, "ship", func(context.Context) (int, error) {
			if s.failShip {
				return 0, step.NonRetryable(errors.New("no carrier"))
			}
			return 3, nil
		})
		return "shipped", err
	})
}

func journalNames(j []protocol.JournalEntry) []string {
	var out []string
	for _, e := range j {
		out = append(out, e.Name)
	}
	return out
}

func TestCompensation(t *testing.T) {
	t.Parallel()

	t.Run("AFailureUndoesNewestFirstOnce", func(t *testing.T) {
		t.Parallel()
		s := &saga{failShip: true}
		g, url := serve(t, s.register)
		r := g.Invoke(url+"/saga", g.Request("run-1", "saga", `{}`))
		require.Equal(t, protocol.AnswerStatusFailed, r.Answer.Status, string(r.Body))
		require.Equal(t, "no carrier", r.Answer.Error.Message, "the original error")
		require.Equal(t, []string{"book", "pay", "ship", "compensate refund", "compensate release"}, journalNames(g.Journal("run-1")))
		// A replay (the answer was lost) runs no undo again.
		r = g.Invoke(url+"/saga", g.Request("run-1", "saga", `{}`))
		require.Equal(t, protocol.AnswerStatusFailed, r.Answer.Status)
		require.EqualValues(t, 1, s.refunds.Load())
		require.EqualValues(t, 1, s.releases.Load())
	})

	t.Run("AnUndoThatFailsLeavesTheOthersToRunAndSaysSo", func(t *testing.T) {
		t.Parallel()
		s := &saga{failShip: true, failRefund: true}
		g, url := serve(t, s.register)
		r, _ := g.Run(url+"/saga", "run-1", "saga", `{}`, 1)
		require.Equal(t, protocol.AnswerStatusFailed, r.Answer.Status, string(r.Body))
		require.Equal(t, "no carrier (compensation incomplete: refund failed)", r.Answer.Error.Message)
		j := g.Journal("run-1")
		require.Equal(t, []string{"book", "pay", "ship", "compensate refund", "compensate release"}, journalNames(j))
		require.NotNil(t, j[3].Error, "the failed undo is journaled as failed")
		require.EqualValues(t, 1, s.releases.Load())
	})

	t.Run("ARetryableErrorUndoesNothing", func(t *testing.T) {
		t.Parallel()
		s := &saga{retryable: true}
		g, url := serve(t, s.register)
		r := g.Invoke(url+"/saga", g.Request("run-1", "saga", `{}`))
		require.Equal(t, 500, r.Code)
		require.Equal(t, []string{"book", "pay"}, journalNames(g.Journal("run-1")))
		require.Zero(t, s.refunds.Load()+s.releases.Load())
	})

	t.Run("SuccessUndoesNothing", func(t *testing.T) {
		t.Parallel()
		s := &saga{}
		g, url := serve(t, s.register)
		r := g.Invoke(url+"/saga", g.Request("run-1", "saga", `{}`))
		require.Equal(t, protocol.AnswerStatusCompleted, r.Answer.Status, string(r.Body))
		require.Zero(t, s.refunds.Load()+s.releases.Load())
	})

	t.Run("RollbackUndoesAtOnce", func(t *testing.T) {
		t.Parallel()
		var undone atomic.Int32
		g, url := serve(t, func(app *functions.App) {
			functions.Register(app, "f", func(ctx context.Context, _ empty) (string, error) {
				if _, err := step.Run(ctx, "book", func(context.Context) (int, error) { return 1, nil }); err != nil {
					return "", err
				}
				if err := step.Compensate(ctx, "release", func(context.Context) error { undone.Add(1); return nil }); err != nil {
					return "", err
				}
				return "", step.Rollback(ctx, errors.New("the customer changed their mind"))
			})
		})
		r := g.Invoke(url+"/f", g.Request("run-1", "f", `{}`))
		require.Equal(t, protocol.AnswerStatusFailed, r.Answer.Status, string(r.Body))
		require.Equal(t, "the customer changed their mind", r.Answer.Error.Message)
		require.Equal(t, []string{"book", "compensate release"}, journalNames(g.Journal("run-1")))
		require.EqualValues(t, 1, undone.Load(), "run once: by Rollback, not again by the SDK")
	})
}
