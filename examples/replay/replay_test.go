// Package replay_test is the README's replay of a production run: testdata/run.json is
// a run of checkout.pay exported with `stepgate runs export`, suspended in its
// "cool off" sleep, and the test replays it against the code of checkout.pay here.
package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
	"github.com/stepgate/stepgate/functions/step"
)

type Order struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

// newApp is the app under test, with checkout.pay: charge, mail a receipt, cool off for
// an hour, then ship.
func newApp() *functions.App { return appWithReceipt("receipt") }

// renamedApp is newApp after a change that breaks the runs in flight: its second step
// is renamed "send receipt".
func renamedApp() *functions.App { return appWithReceipt("send receipt") }

func appWithReceipt(receipt string) *functions.App {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	functions.Register(app, "checkout.pay", func(ctx context.Context, o Order) (string, error) {
		charge, err := step.Run(ctx, "charge", func(ctx context.Context) (string, error) { return "ch_" + o.OrderID, nil })
		if err != nil {
			return "", err
		}
		if _, err := step.Run(ctx, receipt, func(ctx context.Context) (bool, error) { return true, nil }); err != nil {
			return "", err
		}
		if err := step.Sleep(ctx, "cool off", time.Hour); err != nil {
			return "", err
		}
		return step.Run(ctx, "ship", func(ctx context.Context) (string, error) { return "shipped " + charge, nil })
	})
	return app
}

func TestReplayProductionRun(t *testing.T) {
	// docs:begin replay
	r := functionstest.Replay(t, newApp(), "checkout.pay", "testdata/run.json")
	t.Log(r) // "replays cleanly; would wait for sleep \"cool off\" at seq 3"
	// docs:end replay
	if want := "replays cleanly; would wait for sleep \"cool off\" at seq 3"; r.String() != want {
		t.Errorf("the replay says %q, the README %q", r, want)
	}
}

// TestReplayDivergence asserts a divergence instead of failing on it: Replay would fail
// the test, ReplayFile returns the divergence for the test to check.
func TestReplayDivergence(t *testing.T) {
	// docs:begin replay-divergence
	r, err := functionstest.ReplayFile(renamedApp(), "checkout.pay", "testdata/run.json")
	if err != nil {
		t.Fatal(err) // the export cannot be read or the function invoked: never a divergence
	}
	d := r.Divergence
	if d == nil {
		t.Fatalf("the run replays on the renamed step: %s", r)
	}
	if d.Seq != 2 || d.Journal.Name != "receipt" || d.Asked.Name != "send receipt" {
		t.Errorf("want the divergence at the renamed step, got %s", d)
	}
	t.Log(d) // seq 2: the journal holds step "receipt" but the code asks for step "send receipt"
	// docs:end replay-divergence
	if want := `seq 2: the journal holds step "receipt" but the code asks for step "send receipt"`; d.String() != want {
		t.Errorf("the divergence says %q, the docs %q", d, want)
	}
}
