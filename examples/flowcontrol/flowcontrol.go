// Package flowcontrol is the README's throttle, debounce and rate limit: orders.notify
// starts at most 2 runs a second per customer, search.index runs once for a burst of
// starts of one document, with the last one's input, and sms.send starts at most 10 runs
// an hour per caller.
package flowcontrol

import (
	"context"
	"time"

	"github.com/stepgate/stepgate/functions"
)

// In is the input of the three functions.
type In struct {
	CustomerID string `json:"customer_id,omitempty"`
	DocID      string `json:"doc_id,omitempty"`
	Text       string `json:"text,omitempty"`
}

// Notify stands for a notification to a customer.
func Notify(ctx context.Context, in In) (bool, error) { return true, nil }

// Index stands for indexing a document: it answers the text it indexed.
func Index(ctx context.Context, in In) (string, error) { return in.Text, nil }

// Send stands for an SMS gateway's call.
func Send(ctx context.Context, in In) (bool, error) { return true, nil }

// Register adds orders.notify, search.index and sms.send to app.
func Register(app *functions.App) {
	// docs:begin flow
	functions.Register(app, "orders.notify", Notify, functions.Throttle(functions.Rate{
		Limit: 2, Period: time.Second, Burst: 1, Key: "input.customer_id",
	}))
	functions.Register(app, "search.index", Index, functions.Debounce(5*time.Second, "input.doc_id", time.Minute))
	functions.Register(app, "sms.send", Send, functions.RateLimit(functions.Rate{Limit: 10, Period: time.Hour, Key: functions.KeySubject}))
	// docs:end flow
}
