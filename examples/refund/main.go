package main

import (
	"context"
	"log"
	"net/http"
	"os"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol/signature"
)

type Refund struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

func refund(ctx context.Context, r Refund) (string, error) {
	// Runs until it succeeds once (3 attempts by default); a replay returns its output.
	id, err := step.Run(ctx, "refund", func(ctx context.Context) (string, error) {
		return "rf_" + r.OrderID, nil // call the payment provider here
	})
	if err != nil {
		return "", err
	}
	// Durable: the run is suspended, and the gateway wakes it in an hour.
	if err := step.Sleep(ctx, "grace-period", time.Hour); err != nil {
		return "", err
	}
	_, err = step.Run(ctx, "notify", func(ctx context.Context) (bool, error) {
		who := functions.IdentityFrom(ctx) // the caller, from their JWT
		log.Printf("refund %s approved by %s", id, who.Subject)
		return true, nil
	})
	return id, err
}

func main() {
	// Your tenant's public keys (stepgate keys): the app accepts only requests the
	// gateway signed for your tenant, with a private key only the gateway holds.
	keys, err := signature.ParsePublicKeys(os.Getenv("STEPGATE_PUBLIC_KEYS"))
	if err != nil {
		log.Fatal(err)
	}
	app := functions.New(functions.Config{PublicKeys: keys})
	functions.Register(app, "orders.refund", refund, functions.InvocationTimeout(30*time.Second))
	log.Fatal(http.ListenAndServe("127.0.0.1:9090", app))
}
