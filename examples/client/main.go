package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/stepgate/stepgate/client"
)

type Refund struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

func main() {
	c, err := client.New(os.Getenv("STEPGATE_URL"), os.Getenv("STEPGATE_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
	// Or what functions.Register(app, "orders.refund", refund) returned.
	refund := client.Ref[Refund, string]("orders.refund")

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id, err := client.Run(ctx, c, refund, Refund{OrderID: "o1", Amount: 500})
	var failed *client.RunError
	switch {
	case errors.As(err, &failed):
		log.Printf("run %s failed: %s: %s", failed.RunID, failed.Type, failed.Message)
	case err != nil:
		log.Fatal(err) // the gateway refused, or was not reached after the retries
	default:
		fmt.Println("refunded:", id)
	}
}
