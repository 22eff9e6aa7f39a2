package flowcontrol_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/examples/flowcontrol"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

func TestMain(m *testing.M) { stack.Main(m) }

// TestFlowControl registers the three functions with a real gateway and starts them as
// the README says they behave: a customer's notifications beyond the throttle's rate
// are held (scheduled, not dropped); two starts of one document within 5 s are one run,
// with the second start's input; the 11th SMS of a caller within the hour is a 429.
func TestFlowControl(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	app := s.NewApp()
	flowcontrol.Register(app)
	s.Sync(t, s.ServeApp(t, app))
	c := s.Client(t, s.Token)
	start := func(function, input string) *protocol.StartRunResponse {
		t.Helper()
		resp, err := c.StartRunWithBodyWithResponse(t.Context(), function, nil, "application/json", strings.NewReader(input))
		require.NoError(t, err)
		return resp
	}

	t.Run("Throttle", func(t *testing.T) {
		// At most 2 a second, plus 1 at once: a few starts back to back meet the rate.
		var held *protocol.RunDetail
		for i := 0; i < 20 && held == nil; i++ {
			resp := start("orders.notify", `{"customer_id":"c-9"}`)
			require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
			run, err := c.GetRunWithResponse(t.Context(), resp.JSON202.ID, nil)
			require.NoError(t, err)
			if run.JSON200.Status == protocol.RunStatusScheduled {
				held = run.JSON200
			}
		}
		require.NotNil(t, held, "20 starts within the rate")
		require.NotNil(t, held.Held)
		require.Equal(t, "throttled: 2 per 1s (key customer_id=c-9)", *held.Held)
		require.NotNil(t, held.WakeAt)
		stack.AwaitStatus(t, c, held.ID, protocol.RunStatusCompleted) // it runs later
	})

	t.Run("Debounce", func(t *testing.T) {
		first := start("search.index", `{"doc_id":"d1","text":"draft"}`)
		require.Equal(t, http.StatusAccepted, first.StatusCode(), string(first.Body))
		second := start("search.index", `{"doc_id":"d1","text":"final"}`)
		require.Equal(t, http.StatusAccepted, second.StatusCode(), string(second.Body))
		require.Equal(t, first.JSON202.ID, second.JSON202.ID, "one run for the document")
		run := stack.AwaitStatus(t, c, first.JSON202.ID, protocol.RunStatusCompleted)
		require.JSONEq(t, `"final"`, string(*run.Output))
	})

	t.Run("RateLimit", func(t *testing.T) {
		for i := 1; i <= 10; i++ {
			resp := start("sms.send", fmt.Sprintf(`{"text":"sms %d"}`, i))
			require.Equal(t, http.StatusAccepted, resp.StatusCode(), "start %d: %s", i, resp.Body)
		}
		resp := start("sms.send", `{"text":"sms 11"}`)
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode(), string(resp.Body))
		retry, err := time.ParseDuration(resp.HTTPResponse.Header.Get("Retry-After") + "s")
		require.NoError(t, err)
		require.Positive(t, retry)
	})
}
