package refund_test

import (
	"context"
	"testing"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
	"github.com/stepgate/stepgate/functions/step"
)

func TestRefund(t *testing.T) {
	app := functions.New(functions.Config{InsecureSkipVerify: true}) // no gateway signs
	functions.Register(app, "refund", func(ctx context.Context, id string) (string, error) {
		if err := step.Sleep(ctx, "grace-period", time.Hour); err != nil {
			return "", err
		}
		return step.Run(ctx, "refund", func(context.Context) (string, error) { return "rf_" + id, nil })
	})
	h := functionstest.New(t, app)
	run := h.Start("refund", "o1") // suspended: it sleeps
	if res := run.Advance(time.Hour); string(res.Output) != `"rf_o1"` {
		t.Fatalf("got %s %s, journal %v", res.Status, res.Output, run.Journal())
	}
}
