// Package callback is the README's callback: refunds.large mails a manager a URL to
// approve a large refund, and waits up to 72 hours for the answer.
package callback

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
)

type (
	Refund struct {
		OrderID string `json:"order_id"`
		Amount  int    `json:"amount"`
		Manager string `json:"manager"`
	}
	Decision struct {
		Approved bool `json:"approved"`
	}
)

// mailer stands for a mail service: it keeps what it sends.
type mailer struct {
	mu   sync.Mutex
	sent []string
}

func (m *mailer) Send(to, body string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent = append(m.sent, to+": "+body)
	return nil
}

// Sent returns the mails sent so far, each as "to: body".
func Sent() []string {
	mail.mu.Lock()
	defer mail.mu.Unlock()
	return append([]string(nil), mail.sent...)
}

var mail mailer

// pay stands for the payment provider's refund.
func pay(r Refund, d Decision) (string, error) {
	if !d.Approved {
		return "not approved", nil
	}
	return "rf_" + r.OrderID, nil
}

// Register adds refunds.large to app.
func Register(app *functions.App) {
	// docs:begin callback
	functions.Register(app, "refunds.large", func(ctx context.Context, r Refund) (string, error) {
		// The gateway makes the token and the URL; the callback expires in 72h.
		cb, err := step.Callback[Decision](ctx, "manager-approval", step.Timeout(72*time.Hour))
		if err != nil {
			return "", err
		}
		if _, err := step.Run(ctx, "ask", func(ctx context.Context) (bool, error) {
			return true, mail.Send(r.Manager, fmt.Sprintf("Approve a refund of %d? POST %s", r.Amount, cb.URL))
		}); err != nil {
			return "", err
		}
		d, err := cb.Result().Get()
		var rejected *step.Error
		switch {
		case errors.As(err, &rejected): // POST <url>/reject {"message": "…"}
			return "refused: " + rejected.Message, nil
		case errors.Is(err, step.ErrTimedOut):
			return "nobody answered", nil
		case err != nil:
			return "", err
		}
		return step.Run(ctx, "refund", func(ctx context.Context) (string, error) { return pay(r, d) })
	})
	// docs:end callback
}
