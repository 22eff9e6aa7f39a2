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

// TestWaitFirstAnswer checks the await WaitFirst answers: one wait_any at the next seq,
// its timeout the timer's (at least 1s) or the longest the gateway allows, the timer no
// alternative; and that making futures takes no seq.
func TestWaitFirstAnswer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		timer   time.Duration // 0: none
		timeout string
	}{
		{"NoTimer", 0, "87600h0m0s"},
		{"ATimer", 90 * time.Minute, "1h30m0s"},
		{"AShortTimerWaitsASecond", 10 * time.Millisecond, "1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			g, url := serve(t, func(app *functions.App) {
				functions.Register(app, "f", func(ctx context.Context, _ empty) (int, error) {
					futures := []step.Waitable{
						step.WaitForEvent[any](ctx, "paid", "orders.paid", step.Matching(step.Match{"data.id": 1})),
						step.Receive[string](ctx, "cancel"),
					}
					if tc.timer > 0 {
						futures = append(futures, step.After(ctx, "late", tc.timer))
					}
					// The futures took no seq: this step is seq 1.
					if _, err := step.Run(ctx, "before", func(context.Context) (int, error) { return 1, nil }); err != nil {
						return 0, err
					}
					return step.WaitFirst(ctx, "first", futures...)
				})
			})
			r := g.Invoke(url+"/f", g.Request("run-1", "f", `{}`))
			require.Equal(t, protocol.AnswerStatusSuspended, r.Answer.Status, string(r.Body))
			aw := r.Answer.Await
			require.Equal(t, protocol.AwaitTypeWaitAny, aw.Type)
			require.Equal(t, 2, aw.Seq)
			require.Equal(t, "first", aw.Name)
			require.Equal(t, tc.timeout, *aw.Timeout)
			require.Len(t, *aw.Of, 2, "the timer is the timeout, not an alternative")
			for _, o := range *aw.Of {
				require.Equal(t, 2, o.Seq)
				require.Equal(t, "first", o.Name)
				require.Nil(t, o.Timeout)
			}
			require.Equal(t, protocol.AwaitTypeWaitEvent, (*aw.Of)[0].Type)
			require.JSONEq(t, `1`, string((*(*aw.Of)[0].Match)["data.id"]))
			require.Equal(t, "cancel", *(*aw.Of)[1].Topic)
		})
	}
}

// TestWaitFirstAtTimer checks that an At timer's timeout is what is left until its time.
func TestWaitFirstAtTimer(t *testing.T) {
	t.Parallel()
	at := time.Now().Add(2 * time.Hour)
	g, url := serve(t, func(app *functions.App) {
		functions.Register(app, "f", func(ctx context.Context, _ empty) (int, error) {
			return step.WaitFirst(ctx, "first", step.Receive[string](ctx, "cancel"), step.At(ctx, "deadline", at))
		})
	})
	r := g.Invoke(url+"/f", g.Request("run-1", "f", `{}`))
	require.Equal(t, protocol.AnswerStatusSuspended, r.Answer.Status, string(r.Body))
	d, err := time.ParseDuration(*r.Answer.Await.Timeout)
	require.NoError(t, err)
	require.LessOrEqual(t, d, 2*time.Hour)
	require.Greater(t, d, time.Hour, "what is left until the timer's time, %s", d)
}
