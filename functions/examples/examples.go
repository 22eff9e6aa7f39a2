// Package examples holds the example functions that `stepgate dev` and compose.yaml
// serve: hello (no steps), orders.checkout (three steps and an optional sleep),
// orders.fulfil (orders.checkout as a child run), orders.await_payment (a wait for an
// event), orders.approval (a human's approval or the payment, whichever comes first),
// flaky (a step that fails before it succeeds), chain (n steps in a row, for
// benchmarks), orders.notify (throttled per customer), sleep (one durable sleep, for
// benchmarks) and nap (a sleep until a given time, for bench/scale).
package examples

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
)

// Register adds hello, orders.checkout, orders.fulfil, orders.quote,
// orders.fulfil_all, orders.await_payment, orders.approval, flaky, chain, orders.notify,
// hello.limited and hello.keyed (hello under concurrency limits, for benchmarks),
// orders.checkout_inline, sleep and nap to app.
func Register(app *functions.App) {
	functions.Register(app, "hello", Hello)
	functions.Register(app, "orders.checkout", Checkout, functions.InvocationTimeout(30*time.Second), functions.InvocationAttempts(5))
	// One fulfilment per customer at a time, whichever gateway runs it: the others wait,
	// queued, in order (docs/flow-control.md: Concurrency limits).
	functions.Register(app, "orders.fulfil", Fulfil, functions.Concurrency(1, "input.customer_id"))
	functions.Register(app, "orders.quote", Quote)
	functions.Register(app, "orders.fulfil_all", FulfilAll)
	functions.Register(app, "orders.await_payment", AwaitPayment)
	functions.Register(app, "orders.approval", Approval)
	functions.Register(app, "flaky", Flaky)
	functions.Register(app, "chain", Chain)
	// At most 2 notifications a second per customer, one more at once after a quiet
	// spell; the starts beyond wait, scheduled (see docs/flow-control.md's throttles).
	functions.Register(app, "orders.notify", Notify, functions.Throttle(functions.Rate{
		Limit: 2, Period: time.Second, Burst: 1, Key: "input.customer_id",
	}))
	// hello under concurrency limits, for `stepgate bench`: a function-wide limit it
	// never reaches, and one run at a time per key (the bench spreads over 100 keys).
	functions.Register(app, "hello.limited", Hello, functions.Concurrency(1000, ""))
	functions.Register(app, "hello.keyed", Hello, functions.Concurrency(1, "input.key"))
	// orders.checkout waiting out sleeps of up to 30s in its process (checkpointed),
	// instead of suspending the run: one invocation, woken by its own timer.
	functions.Register(app, "orders.checkout_inline", Checkout, functions.SleepInProcess(30*time.Second))
	// One durable sleep and nothing else, for `stepgate bench --sleep-e2e`.
	functions.Register(app, "sleep", Sleep)
	functions.Register(app, "nap", Nap)
}

// SleepInput is the input of sleep.
type SleepInput struct {
	MS int `json:"ms"` // How long to sleep, in milliseconds; 0 or less: no time.
}

// SleepOutput is the output of sleep.
type SleepOutput struct {
	SleptMS int `json:"slept_ms"` // The input's ms.
}

// Sleep sleeps in.MS milliseconds in one durable sleep named "sleep" and returns: the
// run suspends, and the gateway invokes it again when the sleep is over. It is the
// shape `stepgate bench --sleep-e2e` times a sleep's end-to-end lateness with.
func Sleep(ctx context.Context, in SleepInput) (SleepOutput, error) {
	if err := step.Sleep(ctx, "sleep", time.Duration(in.MS)*time.Millisecond); err != nil {
		return SleepOutput{}, err
	}
	return SleepOutput{SleptMS: in.MS}, nil
}

// NapInput is the input of nap.
type NapInput struct {
	Until time.Time `json:"until"` // The wake time; one already past wakes at once.
}

// NapOutput is the output of nap.
type NapOutput struct {
	Woke bool `json:"woke"`
}

// Nap sleeps until in.Until (a durable sleep named "nap", suspended, with an absolute
// wake time), then runs one step, "woke": the journal shows when the sleep was due and
// when the step after it started. bench/scale starts many whose wake times fall within
// one second, to see how late they wake.
func Nap(ctx context.Context, in NapInput) (NapOutput, error) {
	if err := step.SleepUntil(ctx, "nap", in.Until); err != nil {
		return NapOutput{}, err
	}
	woke, err := step.Run(ctx, "woke", func(ctx context.Context) (bool, error) { return true, nil })
	return NapOutput{Woke: woke}, err
}

// NotifyInput is the input of orders.notify.
type NotifyInput struct {
	CustomerID string `json:"customer_id"`
	Message    string `json:"message"`
}

// NotifyOutput is the output of orders.notify.
type NotifyOutput struct {
	Sent string `json:"sent"`
}

// Notify sends in.Message to the customer in one step. It is throttled per customer:
// a burst of notifications for one customer is spread out, other customers' are not
// held back by it.
func Notify(ctx context.Context, in NotifyInput) (NotifyOutput, error) {
	sent, err := step.Run(ctx, "send", func(ctx context.Context) (string, error) {
		return fmt.Sprintf("to %s: %s", in.CustomerID, in.Message), nil
	})
	return NotifyOutput{Sent: sent}, err
}

// HelloInput is the input of hello.
type HelloInput struct {
	Name string `json:"name"`
}

// HelloOutput is the output of hello.
type HelloOutput struct {
	Greeting string `json:"greeting"`
}

// Hello greets in.Name, or "World" when it is empty. It has no steps.
func Hello(ctx context.Context, in HelloInput) (HelloOutput, error) {
	return HelloOutput{Greeting: fmt.Sprintf("Hello, %s!", cmp.Or(in.Name, "World"))}, nil
}

// CheckoutInput is the input of orders.checkout.
type CheckoutInput struct {
	OrderID string `json:"order_id"` // Defaults to the run's id.
	Amount  int    `json:"amount"`   // In cents.
	SleepMS int    `json:"sleep_ms"` // When positive, a sleep between charge and ship.
	// CustomerID is the customer the order is for: orders.fulfil runs one fulfilment
	// per customer at a time.
	CustomerID string `json:"customer_id,omitempty"`
	// FailShip makes shipping fail for good: the charge is refunded and the reservation
	// released (compensations), and the run fails.
	FailShip bool `json:"fail_ship,omitempty"`
}

// Reservation is the output of the reserve step.
type Reservation struct {
	OrderID  string `json:"order_id"`
	Reserved bool   `json:"reserved"`
}

// Charge is the output of the charge step.
type Charge struct {
	ChargeID string `json:"charge_id"`
	Amount   int    `json:"amount"`
}

// Shipment is the output of the ship step.
type Shipment struct {
	Tracking string `json:"tracking"`
}

// CheckoutOutput is the output of orders.checkout: each step's output.
type CheckoutOutput struct {
	Reservation Reservation `json:"reservation"`
	Charge      Charge      `json:"charge"`
	Shipment    Shipment    `json:"shipment"`
}

// Checkout reserves, charges and ships an order, one step each, with a sleep named
// "cool-off" of in.SleepMS milliseconds between charge and ship when it is positive.
// Its ids derive from the run's id, so they are the same on every replay. When shipping
// fails for good, the charge is refunded and the reservation released, in that order
// (the steps "compensate refund" and "compensate release"), and the run fails.
func Checkout(ctx context.Context, in CheckoutInput) (CheckoutOutput, error) {
	orderID := cmp.Or(in.OrderID, functions.RunFrom(ctx).ID)
	var out CheckoutOutput
	var err error
	out.Reservation, err = step.Run(ctx, "reserve", func(ctx context.Context) (Reservation, error) {
		return Reservation{OrderID: orderID, Reserved: true}, nil
	})
	if err != nil {
		return out, err
	}
	if err := step.Compensate(ctx, "release", func(ctx context.Context) error {
		return nil // the inventory service's release of orderID
	}); err != nil {
		return out, err
	}
	out.Charge, err = step.Run(ctx, "charge", func(ctx context.Context) (Charge, error) {
		return Charge{ChargeID: "ch_" + orderID, Amount: in.Amount}, nil
	})
	if err != nil {
		return out, err
	}
	if err := step.Compensate(ctx, "refund", func(ctx context.Context) error {
		return nil // the payment provider's refund of the charge
	}); err != nil {
		return out, err
	}
	if in.SleepMS > 0 {
		if err := step.Sleep(ctx, "cool-off", time.Duration(in.SleepMS)*time.Millisecond); err != nil {
			return out, err
		}
	}
	out.Shipment, err = step.Run(ctx, "ship", func(ctx context.Context) (Shipment, error) {
		if in.FailShip {
			return Shipment{}, step.NonRetryable(fmt.Errorf("no carrier ships order %s", orderID))
		}
		return Shipment{Tracking: "trk_" + orderID}, nil
	})
	return out, err
}

// Fulfil checks the order out as a child run of orders.checkout (the same input), which
// runs as the caller's identity, and returns its shipment. Its concurrency limit runs
// one fulfilment per customer (input.customer_id) at a time; waiting for its child, a
// fulfilment holds no slot. A checkout that fails or is
// cancelled fails the fulfilment with the checkout's error.
func Fulfil(ctx context.Context, in CheckoutInput) (Shipment, error) {
	out, err := step.Invoke[CheckoutOutput](ctx, "checkout", "orders.checkout", in).Get()
	if err != nil {
		return Shipment{}, fmt.Errorf("checkout: %w", err)
	}
	return out.Shipment, nil
}

// QuoteInput is the input of orders.quote.
type QuoteInput struct {
	SKU string `json:"sku"`
}

// QuoteOutput is the output of orders.quote: the cheapest supplier and every price.
type QuoteOutput struct {
	Best   string         `json:"best"`
	Prices map[string]int `json:"prices"`
}

// Quote asks three suppliers for a price at once (parallel steps: step.Go and step.All)
// and picks the cheapest. Each answer is journaled as it comes; a replay asks nobody
// again.
func Quote(ctx context.Context, in QuoteInput) (QuoteOutput, error) {
	suppliers := []string{"acme", "globex", "initech"}
	futures := make([]*step.Future[int], len(suppliers))
	for i, name := range suppliers {
		futures[i] = step.Go(ctx, "price from "+name, func(ctx context.Context) (int, error) {
			// A stand-in for a supplier's API: a price from the SKU and the supplier.
			return 100 + (len(in.SKU)*7+len(name)*13+i*5)%50, nil
		})
	}
	prices, err := step.All(futures...)
	if err != nil {
		return QuoteOutput{}, err
	}
	out := QuoteOutput{Prices: map[string]int{}}
	for i, p := range prices {
		out.Prices[suppliers[i]] = p
		if out.Best == "" || p < out.Prices[out.Best] {
			out.Best = suppliers[i]
		}
	}
	return out, nil
}

// FulfilAllInput is the input of orders.fulfil_all.
type FulfilAllInput struct {
	Orders []CheckoutInput `json:"orders"`
}

// FulfilAllOutput says, per order in the input's order, its tracking number or why it
// failed.
type FulfilAllOutput struct {
	Results []string `json:"results"`
}

// FulfilAll checks out every order at once, as child runs of orders.checkout (parallel
// children: step.Invoke for each, step.WaitAll of them), and waits for all of them: it
// is called again once, when the last one has ended.
func FulfilAll(ctx context.Context, in FulfilAllInput) (FulfilAllOutput, error) {
	if len(in.Orders) == 0 || len(in.Orders) > step.MaxInvokeAll {
		return FulfilAllOutput{}, step.NonRetryable(fmt.Errorf("orders: %d, not from 1 to %d", len(in.Orders), step.MaxInvokeAll))
	}
	children := make([]step.Waitable, len(in.Orders))
	checkouts := make([]*step.Future[CheckoutOutput], len(in.Orders))
	for i, o := range in.Orders {
		checkouts[i] = step.Invoke[CheckoutOutput](ctx, "checkouts", "orders.checkout", o)
		children[i] = checkouts[i]
	}
	// A child's failure is its own future's error, read below: WaitAll's is the first.
	_ = step.WaitAll(ctx, children...)
	var out FulfilAllOutput
	for _, c := range checkouts {
		o, err := c.Get() // resolved: returns at once
		if err != nil {
			out.Results = append(out.Results, "failed: "+err.Error())
			continue
		}
		out.Results = append(out.Results, o.Shipment.Tracking)
	}
	return out, nil
}

// FlakyInput is the input of flaky.
type FlakyInput struct {
	// FailTimes is how many attempts of the step fail before one succeeds. Defaults to
	// 2; 3 or more exhausts the step's attempts and fails the run.
	FailTimes *int `json:"fail_times"`
}

// FlakyOutput is the output of flaky.
type FlakyOutput struct {
	Attempts int `json:"attempts"` // The attempt that succeeded.
}

// Flaky runs one step, "attempt", that fails on its first in.FailTimes attempts. The step
// makes 3 attempts at most, 10ms apart at first.
func Flaky(ctx context.Context, in FlakyInput) (FlakyOutput, error) {
	failTimes := 2
	if in.FailTimes != nil {
		failTimes = *in.FailTimes
	}
	return step.Run(ctx, "attempt", func(ctx context.Context) (FlakyOutput, error) {
		n := step.Attempt(ctx)
		if n <= failTimes {
			return FlakyOutput{}, fmt.Errorf("attempt %d of %d planned failures: %w", n, failTimes, errFlaky)
		}
		return FlakyOutput{Attempts: n}, nil
	}, step.MaxAttempts(3), step.Backoff(10*time.Millisecond, 100*time.Millisecond))
}

var errFlaky = errors.New("flaky by design")

// ChainInput is the input of chain.
type ChainInput struct {
	Steps *int `json:"steps"` // How many steps; defaults to 10, at most 1000.
}

// ChainOutput is the output of chain.
type ChainOutput struct {
	Sum int `json:"sum"` // 1 + 2 + ... + steps, each term the output of one step.
}

// Chain runs in.Steps steps in a row, "step-1" to "step-N", each returning its number:
// the shape of a long workflow, and the 10-step benchmark.
func Chain(ctx context.Context, in ChainInput) (ChainOutput, error) {
	n := 10
	if in.Steps != nil {
		n = *in.Steps
	}
	if n < 0 || n > 1000 {
		return ChainOutput{}, step.NonRetryable(fmt.Errorf("steps must be between 0 and 1000, not %d", n))
	}
	var out ChainOutput
	for i := 1; i <= n; i++ {
		v, err := step.Run(ctx, fmt.Sprintf("step-%d", i), func(ctx context.Context) (int, error) { return i, nil })
		if err != nil {
			return out, err
		}
		out.Sum += v
	}
	return out, nil
}

// PaymentInput is the input of orders.await_payment.
type PaymentInput struct {
	OrderID string `json:"order_id"`
	// Timeout is how long to wait for the payment, a Go duration; defaults to 1h.
	Timeout string `json:"timeout"`
}

// Payment is the data of an orders.paid event.
type Payment struct {
	OrderID string  `json:"order_id"`
	Amount  float64 `json:"amount"`
}

// PaymentOutput is the output of orders.await_payment.
type PaymentOutput struct {
	Paid    bool    `json:"paid"`
	Amount  float64 `json:"amount,omitempty"`
	EventID string  `json:"event_id,omitempty"`
	PaidBy  string  `json:"paid_by,omitempty"` // The event's sender.
}

// AwaitPayment waits for the event orders.paid whose data.order_id is in.OrderID, for
// in.Timeout at most, and says whether it came: the shape of a checkout that waits for
// a payment provider's webhook, and the event benchmark.
func AwaitPayment(ctx context.Context, in PaymentInput) (PaymentOutput, error) {
	timeout := time.Hour
	if in.Timeout != "" {
		d, err := time.ParseDuration(in.Timeout)
		if err != nil {
			return PaymentOutput{}, step.NonRetryable(fmt.Errorf("timeout: %w", err))
		}
		timeout = d
	}
	ev, err := step.WaitForEvent[Payment](ctx, "payment", "orders.paid",
		step.Matching(step.Match{"data.order_id": in.OrderID}), step.Timeout(timeout)).Get()
	if errors.Is(err, step.ErrTimedOut) {
		return PaymentOutput{}, nil
	}
	if err != nil {
		return PaymentOutput{}, err
	}
	return PaymentOutput{Paid: true, Amount: ev.Data.Amount, EventID: ev.ID, PaidBy: ev.Sender.Subject}, nil
}

// ApprovalInput is the input of orders.approval.
type ApprovalInput struct {
	OrderID string `json:"order_id"`
	// Timeout is how long to wait for the approval or the payment, a Go duration;
	// defaults to 1h.
	Timeout string `json:"timeout"`
}

// ApprovalNote is what a human approves the order with (the callback's data).
type ApprovalNote struct {
	Note string `json:"note"`
}

// ApprovalOutput is the output of orders.approval.
type ApprovalOutput struct {
	// Outcome is "approved" or "rejected" (by a human), "paid" (the payment came first)
	// or "timed_out".
	Outcome string `json:"outcome"`
	By      string `json:"by,omitempty"`   // Who approved, rejected or paid.
	Note    string `json:"note,omitempty"` // The approval's note, or the rejection's message.
}

// Approval holds an order until a human approves it (a callback named "approval",
// which the dashboard's Approve and Reject buttons resolve, as does a POST to its URL)
// or its payment arrives (the event orders.paid with its order id), whichever comes
// first, for in.Timeout at most. It publishes its progress as the value "progress" and
// writes what happens to the stream "log".
func Approval(ctx context.Context, in ApprovalInput) (ApprovalOutput, error) {
	timeout := time.Hour
	if in.Timeout != "" {
		d, err := time.ParseDuration(in.Timeout)
		if err != nil {
			return ApprovalOutput{}, step.NonRetryable(fmt.Errorf("timeout: %w", err))
		}
		timeout = d
	}
	log, err := step.Stream(ctx, "log")
	if err != nil {
		return ApprovalOutput{}, err
	}
	if err := step.SetValue(ctx, "progress", 10); err != nil {
		return ApprovalOutput{}, err
	}
	cb, err := step.Callback[ApprovalNote](ctx, "approval", step.Timeout(timeout))
	if err != nil {
		return ApprovalOutput{}, err
	}
	if err := log.WriteString(fmt.Sprintf("order %s waits for an approval or its payment, for %s\n", in.OrderID, timeout)); err != nil {
		return ApprovalOutput{}, err
	}
	if err := step.SetValue(ctx, "progress", 50); err != nil {
		return ApprovalOutput{}, err
	}
	// The wait has the callback's name, which the dashboard resolves it by.
	paid := step.WaitForEvent[Payment](ctx, "payment", "orders.paid", step.Matching(step.Match{"data.order_id": in.OrderID}))
	i, err := step.WaitFirst(ctx, "approval", cb.Result(), paid, step.After(ctx, "approval-timeout", timeout))
	if err != nil {
		return ApprovalOutput{}, err
	}
	var out ApprovalOutput
	switch i {
	case 0:
		res, err := cb.Result().Get()
		var rejected *step.Error
		switch {
		case errors.As(err, &rejected):
			out.Outcome, out.Note = "rejected", rejected.Message
		case errors.Is(err, step.ErrTimedOut):
			out.Outcome = "timed_out"
		case err != nil:
			return ApprovalOutput{}, err
		default:
			out.Outcome, out.Note = "approved", res.Note
		}
		if cb.ResolvedBy != nil {
			out.By = cb.ResolvedBy.Subject
		}
	case 1:
		ev, err := paid.Get()
		if err != nil {
			return ApprovalOutput{}, err
		}
		out.Outcome, out.By = "paid", ev.Sender.Subject
	default:
		out.Outcome = "timed_out"
	}
	if err := log.WriteString(fmt.Sprintf("order %s: %s\n", in.OrderID, out.Outcome)); err != nil {
		return ApprovalOutput{}, err
	}
	if err := log.Close(); err != nil {
		return ApprovalOutput{}, err
	}
	return out, step.SetValue(ctx, "progress", 100)
}
