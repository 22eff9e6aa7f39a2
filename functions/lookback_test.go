package functions_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol"
)

// TestWaitForEventLookBack checks the await WaitForEvent answers with a look-back:
// SinceStart sends since_start, Since its time, the last of the two given wins, and both
// ride with the wait when it is an alternative of WaitFirst.
func TestWaitForEventLookBack(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		opts       []step.Option
		since      *time.Time
		sinceStart bool
		first      bool // in a WaitFirst
	}{
		{"None", nil, nil, false, false},
		{"SinceStart", []step.Option{step.SinceStart()}, nil, true, false},
		{"Since", []step.Option{step.Since(at)}, &at, false, false},
		{"TheLastWins", []step.Option{step.SinceStart(), step.Since(at)}, &at, false, false},
		{"InWaitFirst", []step.Option{step.SinceStart()}, nil, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g, url := serve(t, func(app *functions.App) {
				functions.Register(app, "f", func(ctx context.Context, _ empty) (any, error) {
					paid := step.WaitForEvent[any](ctx, "paid", "orders.paid", tc.opts...)
					if tc.first {
						return step.WaitFirst(ctx, "first", paid, step.After(ctx, "late", time.Hour))
					}
					return paid.Get()
				})
			})
			r := g.Invoke(url+"/f", g.Request("run-1", "f", `{}`))
			require.Equal(t, protocol.AnswerStatusSuspended, r.Answer.Status, string(r.Body))
			aw := r.Answer.Await
			if tc.first {
				aw = &(*aw.Of)[0]
			}
			require.Equal(t, protocol.AwaitTypeWaitEvent, aw.Type)
			if tc.since == nil {
				require.Nil(t, aw.Since)
			} else {
				require.True(t, tc.since.Equal(*aw.Since), "since %v", aw.Since)
			}
			require.Equal(t, tc.sinceStart, aw.SinceStart != nil && *aw.SinceStart)
		})
	}
}
