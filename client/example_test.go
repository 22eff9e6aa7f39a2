package client_test

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

// A caller without the function's code names it with its types; a caller that has it
// uses what functions.Register returned. Run only compiles with a Refund, and returns
// the function's output, a string.
func ExampleRun() {
	c, err := client.New(os.Getenv("STEPGATE_URL"), os.Getenv("STEPGATE_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
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

// Start answers at once; the run's id attaches to it later, from any process.
func ExampleStart() {
	c, err := client.New(os.Getenv("STEPGATE_URL"), os.Getenv("STEPGATE_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	run, err := client.Start(ctx, c, client.Ref[Refund, string]("orders.refund"), Refund{OrderID: "o2", Amount: 20},
		client.IdempotencyKey("refund-o2"), client.Delay(time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	id, err := run.Attach(ctx, c) // or client.Attach[string](ctx, c, run.ID)
	fmt.Println(id, err)
}

// StartWithMessage starts the run of an idempotency key unless there is one, and puts a
// message in its mailbox, in one transaction: the first approval of order o-42 starts
// its run, and a retry neither starts another nor sends the message twice.
func ExampleStartWithMessage() {
	c, err := client.New(os.Getenv("STEPGATE_URL"), os.Getenv("STEPGATE_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	// docs:begin startwithmessage
	type Order struct {
		Order string `json:"order"`
	}
	type Approval struct {
		Approved bool `json:"approved"`
	}
	approval := client.Ref[Order, string]("orders.approval")
	run, err := client.StartWithMessage(ctx, c, approval, "order-o-42", Order{Order: "o-42"},
		"approval", Approval{Approved: true})
	if err != nil {
		log.Fatal(err) // errors.Is(err, client.ErrConflict): the key's run finished without this message
	}
	fmt.Println(run.ID, run.Created, run.Message.Consumed, run.Message.Duplicate)
	// docs:end startwithmessage
}
