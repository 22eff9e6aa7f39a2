package functions_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol"
)

// TestMaxInvocationDuration: a function that allows itself a short budget answers a
// continue at a step boundary once most of it has passed, and goes on from its journal.
func TestMaxInvocationDuration(t *testing.T) {
	t.Parallel()
	ran := map[int]int{}
	g, url := serve(t, func(app *functions.App) {
		functions.Register(app, "long", func(ctx context.Context, _ empty) (int, error) {
			for i := range 20 {
				if _, err := step.Run(ctx, fmt.Sprintf("s%d", i), func(context.Context) (int, error) {
					ran[i]++
					time.Sleep(10 * time.Millisecond) // work: 20 steps take longer than the budget
					return i, nil
				}); err != nil {
					return 0, err
				}
			}
			return 20, nil
		}, functions.MaxInvocationDuration(100*time.Millisecond), functions.RunTimeout(time.Hour))
	})

	r := g.Get(url + "/")
	require.Contains(t, string(r.Body), `"max_invocation_duration":"100ms"`)
	require.Contains(t, string(r.Body), `"run_timeout":"1h0m0s"`)

	first := g.Invoke(url+"/long", g.Request("run-1", "long", `{}`))
	require.Equal(t, http.StatusOK, first.Code, string(first.Body))
	require.Equal(t, protocol.AnswerStatusSuspended, first.Answer.Status)
	aw := first.Answer.Await
	require.Equal(t, protocol.AwaitTypeContinue, aw.Type)
	require.Equal(t, "continue", aw.Name)
	require.Greater(t, aw.Seq, 1, "at least one step per invocation")
	require.Less(t, aw.Seq, 20)
	require.Len(t, g.Journal("run-1"), aw.Seq-1, "the await's seq is the journal's next")

	res, invocations := g.Run(url+"/long", "run-1", "long", `{}`, 1)
	require.Equal(t, protocol.AnswerStatusCompleted, res.Answer.Status, string(res.Body))
	require.Greater(t, invocations, 1)
	for i := range 20 {
		require.Equal(t, 1, ran[i], "step %d", i)
	}
}
