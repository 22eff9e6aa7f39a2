package step_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
	"github.com/stepgate/stepgate/functions/step"
)

// The examples of the waits run their functions in functionstest, as a test would
// (functionstest.New(t, app) with the test's t), against an in-memory journal and a
// virtual clock: no gateway, and a week's sleep takes no time.

// A function that reminds a user when their trial ends, two weeks after it starts:
// nothing of the run is held while it sleeps, and the harness's virtual clock moves
// the two weeks at once.
func ExampleSleep() {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	functions.Register(app, "trial.remind", func(ctx context.Context, user string) (string, error) {
		if err := step.Sleep(ctx, "trial", 14*24*time.Hour); err != nil {
			return "", err
		}
		return step.Run(ctx, "mail", func(ctx context.Context) (string, error) {
			return "reminded " + user, nil // the mail provider's call
		})
	})

	h := functionstest.New(t, app)
	run := h.Start("trial.remind", "ada")
	fmt.Println(run.Result().Status, run.Result().Await.Type)
	res := run.Advance(14 * 24 * time.Hour)
	fmt.Println(res.Status, string(res.Output))
	// Output:
	// suspended sleep
	// completed "reminded ada"
}

type Payment struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

// A function that waits up to an hour for its order's payment event. It looks back to
// the run's start (SinceStart), so an event sent after the run started but before it
// reached its wait is not missed.
func ExampleWaitForEvent() {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	functions.Register(app, "orders.fulfil", func(ctx context.Context, orderID string) (string, error) {
		paid, err := step.WaitForEvent[Payment](ctx, "payment", "orders.paid",
			step.Matching(step.Match{"data.order_id": orderID}), step.SinceStart(), step.Timeout(time.Hour)).Get()
		if errors.Is(err, step.ErrTimedOut) {
			return "unpaid", nil
		}
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("paid %d", paid.Data.Amount), nil
	})

	h := functionstest.New(t, app)
	run := h.Start("orders.fulfil", "o-1")
	res := run.SendEvent("orders.paid", Payment{OrderID: "o-1", Amount: 500}) // as POST /v1/events
	fmt.Println(res.Status, string(res.Output))
	unpaid := h.Start("orders.fulfil", "o-2")
	res = unpaid.Advance(time.Hour)
	fmt.Println(res.Status, string(res.Output))
	// Output:
	// completed "paid 500"
	// completed "unpaid"
}

type Approval struct {
	Approved bool   `json:"approved"`
	Note     string `json:"note"`
}

// A function that asks for an approval in a step, then waits a day for the answer: a
// message on topic "approval" (sent by a client with POST /v1/runs/{id}/messages, or by
// another run with step.Send). A message is kept in the run's mailbox until a receive
// takes it, so one sent before the wait is not lost.
func ExampleReceive() {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	functions.Register(app, "refunds.approve", func(ctx context.Context, amount int) (string, error) {
		if _, err := step.Run(ctx, "ask", func(ctx context.Context) (bool, error) {
			return true, nil // post the question to the team's chat
		}); err != nil {
			return "", err
		}
		got, err := step.Receive[Approval](ctx, "approval", step.Timeout(24*time.Hour)).Get()
		switch {
		case errors.Is(err, step.ErrTimedOut):
			return "nobody answered", nil
		case err != nil:
			return "", err
		case !got.Data.Approved:
			return "refused: " + got.Data.Note, nil
		}
		return fmt.Sprintf("refunded %d", amount), nil
	})

	h := functionstest.New(t, app)
	run := h.Start("refunds.approve", 40)
	fmt.Println(run.Result().Status, run.Result().Await.Type)
	res := run.SendMessage("approval", Approval{Approved: true})
	fmt.Println(res.Status, string(res.Output))
	res = h.Start("refunds.approve", 900).SendMessage("approval", Approval{Note: "too much"})
	fmt.Println(res.Status, string(res.Output))
	// Output:
	// suspended receive
	// completed "refunded 40"
	// completed "refused: too much"
}

// A function that asks a manager to approve a refund: it makes a callback, mails its
// URL in a step (so the mail goes out once), and waits up to three days for the answer,
// its Result. The manager resolves the callback (POST <url> with the data) or rejects it
// (POST <url>/reject), or nobody answers before it expires.
func ExampleCallback() {
	type decision struct {
		Approved bool `json:"approved"`
	}
	sendMail := func(to, body string) error { return nil }
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	functions.Register(app, "refunds.ask", func(ctx context.Context, manager string) (string, error) {
		cb, err := step.Callback[decision](ctx, "manager-approval", step.Timeout(72*time.Hour))
		if err != nil {
			return "", err
		}
		if _, err := step.Run(ctx, "ask", func(ctx context.Context) (bool, error) {
			return true, sendMail(manager, "Approve the refund? POST {\"approved\": true} to "+cb.URL)
		}); err != nil {
			return "", err
		}
		res, err := cb.Result().Get()
		var rejected *step.Error
		switch {
		case errors.As(err, &rejected): // POST <url>/reject {"message": "..."}
			return "refused: " + rejected.Message, nil
		case errors.Is(err, step.ErrTimedOut): // the callback expired after 72h
			return "nobody answered", nil
		case err != nil:
			return "", err
		case !res.Approved:
			return "not approved", nil
		}
		return "approved", nil
	})

	h := functionstest.New(t, app)
	res := h.Start("refunds.ask", "bob").ResolveCallback("manager-approval", decision{Approved: true})
	fmt.Println(res.Status, string(res.Output))
	res = h.Start("refunds.ask", "bob").RejectCallback("manager-approval", "", "over budget")
	fmt.Println(res.Status, string(res.Output))
	res = h.Start("refunds.ask", "bob").Advance(72 * time.Hour)
	fmt.Println(res.Status, string(res.Output))
	// Output:
	// completed "approved"
	// completed "refused: over budget"
	// completed "nobody answered"
}

type CheckoutOutput struct {
	Shipment struct {
		Tracking string `json:"tracking"`
	} `json:"shipment"`
}

// A function that checks an order out as a child run of orders.checkout, which runs as
// the same identity, and falls back to pickup when the checkout failed. The harness runs
// the app's orders.checkout as the child run (Harness.Stub would answer it instead).
func ExampleInvoke() {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	functions.Register(app, "orders.checkout", func(ctx context.Context, in struct {
		OrderID string `json:"order_id"`
	}) (out CheckoutOutput, err error) {
		if in.OrderID == "o-lost" {
			return out, step.NonRetryable(errors.New("no such order"))
		}
		out.Shipment.Tracking = "trk-" + in.OrderID
		return out, nil
	})
	functions.Register(app, "orders.deliver", func(ctx context.Context, orderID string) (string, error) {
		out, err := step.Invoke[CheckoutOutput](ctx, "checkout", "orders.checkout",
			map[string]any{"order_id": orderID}).Get()
		var failed *step.Error
		if errors.As(err, &failed) {
			// The child failed, was cancelled, or could not start (failed.Type says which):
			// journaled, so every replay takes this branch too.
			return "pickup (" + failed.Message + ")", nil
		}
		if err != nil {
			return "", err
		}
		return out.Shipment.Tracking, nil
	})

	h := functionstest.New(t, app)
	res := h.Start("orders.deliver", "o-1").Result()
	fmt.Println(res.Status, string(res.Output))
	res = h.Start("orders.deliver", "o-lost").Result()
	fmt.Println(res.Status, string(res.Output))
	// Output:
	// completed "trk-o-1"
	// completed "pickup (no such order)"
}

// A function that mails a report once the run that builds it ends: any run of the
// tenant, here one a client started, not a child of this run.
func ExampleAwaitRun() {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	functions.Register(app, "reports.build", func(ctx context.Context, month string) (string, error) {
		if err := step.Sleep(ctx, "render", time.Minute); err != nil { // a long render
			return "", err
		}
		return "https://reports.example/" + month + ".pdf", nil
	})
	functions.Register(app, "reports.notify", func(ctx context.Context, buildRun string) (string, error) {
		url, err := step.AwaitRun[string](ctx, "report", buildRun, step.Timeout(time.Hour)).Get()
		var failed *step.Error
		if errors.As(err, &failed) { // it failed, or no such run (failed.Type: not_found)
			return "no report: " + failed.Type, nil
		}
		if err != nil {
			return "", err
		}
		return "mailed " + url, nil
	})

	h := functionstest.New(t, app)
	build := h.Start("reports.build", "2026-11")
	notify := h.Start("reports.notify", build.ID())
	fmt.Println(notify.Result().Status, notify.Result().Await.Type)
	h.Advance(time.Minute) // the build ends, and the notify's wait with it
	fmt.Println(notify.Result().Status, string(notify.Result().Output))
	// Output:
	// suspended await_run
	// completed "mailed https://reports.example/2026-11.pdf"
}

// A function that waits for whichever comes first: the order's payment event, a
// cancellation message, or a timer of one hour; then it acts on the one that came.
func ExampleWaitFirst() {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	functions.Register(app, "orders.hold", func(ctx context.Context, orderID string) (string, error) {
		payment := step.WaitForEvent[Payment](ctx, "payment", "orders.paid",
			step.Matching(step.Match{"data.order_id": orderID}), step.SinceStart())
		cancel := step.Receive[string](ctx, "cancel")
		hour := step.After(ctx, "pay-within", time.Hour)
		i, err := step.WaitFirst(ctx, "paid-or-cancelled", payment, cancel, hour)
		if err != nil {
			return "", err
		}
		switch i {
		case 0:
			ev, err := payment.Get() // resolved: returns at once
			if err != nil {
				return "", err
			}
			return fmt.Sprintf("paid %d", ev.Data.Amount), nil
		case 1:
			return "cancelled", nil
		}
		return "expired", nil
	})

	h := functionstest.New(t, app)
	res := h.Start("orders.hold", "o-1").SendEvent("orders.paid", Payment{OrderID: "o-1", Amount: 500})
	fmt.Println(string(res.Output))
	res = h.Start("orders.hold", "o-2").SendMessage("cancel", "changed my mind")
	fmt.Println(string(res.Output))
	res = h.Start("orders.hold", "o-3").Advance(time.Hour)
	fmt.Println(string(res.Output))
	// Output:
	// "paid 500"
	// "cancelled"
	// "expired"
}

// A function that answers requests while it runs (a client's POST /v1/runs/{id}/requests,
// which waits for the reply): each quote request gets a price, until a "done" message.
func ExampleReceiveRequest() {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	functions.Register(app, "quotes.desk", func(ctx context.Context, rate int) (int, error) {
		for n := 0; ; n++ {
			quote := step.ReceiveRequest[int](ctx, "quote", step.Timeout(time.Hour))
			done := step.Receive[struct{}](ctx, "done")
			i, err := step.WaitFirst(ctx, fmt.Sprintf("next-%d", n), quote, done)
			if err != nil || i == 1 {
				return n, err // the number of quotes answered
			}
			req, err := quote.Get() // resolved: returns at once
			if err != nil {
				return n, err
			}
			if req.Data <= 0 {
				err = step.ReplyError(ctx, req.ID, errors.New("the quantity must be positive"))
			} else {
				err = step.Reply(ctx, req.ID, req.Data*rate)
			}
			if err != nil {
				return n, err
			}
		}
	})

	h := functionstest.New(t, app)
	run := h.Start("quotes.desk", 3)
	reply, _, _ := run.SendRequest("quote", 10)
	fmt.Println("10 cost", string(reply))
	_, replyErr, _ := run.SendRequest("quote", 0)
	fmt.Println("0:", replyErr.Type, replyErr.Message)
	res := run.SendMessage("done", struct{}{})
	fmt.Println(res.Status, string(res.Output))
	// Output:
	// 10 cost 30
	// 0: error the quantity must be positive
	// completed 2
}
