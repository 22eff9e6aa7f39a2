package main

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/stepgate/stepgate/protocol"
)

// functionsQueue runs "stepgate functions queue NAME".
func (c *cli) functionsQueue(ctx context.Context, args []string) error {
	return singleRequest(ctx, c, args, "functions queue", "NAME", "get the queue of function", []int{http.StatusOK},
		func(ctx context.Context, cl *protocol.ClientWithResponses, name string) (*protocol.GetFunctionQueueResponse, error) {
			return cl.GetFunctionQueueWithResponse(ctx, name)
		},
		func(resp *protocol.GetFunctionQueueResponse, name string) error {
			if resp.JSON200 == nil {
				return fmt.Errorf("get the queue of function %s: unexpected response %q", name, resp.ContentType())
			}
			return writeQueue(c.stdout, resp.JSON200)
		})
}

// writeQueue prints a function's queue: its counts, its busiest concurrency keys and
// why its held runs wait.
func writeQueue(w io.Writer, q *protocol.FunctionQueue) error {
	if _, err := fmt.Fprintf(w, "%s: %d running, %d queued, %d held\n", q.Function, q.Running, q.Queued, q.Held); err != nil {
		return err
	}
	if len(q.Keys) > 0 {
		tw := newTable(w)
		fmt.Fprintln(tw, "\nKEY\tRUNNING\tLIMIT\tHELD")
		for _, k := range q.Keys {
			key := k.Key
			if key == "" {
				key = "(function)"
			}
			limit := "-"
			if k.Limit > 0 {
				limit = fmt.Sprint(k.Limit)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", truncate(key, 60), k.Running, limit, k.Held)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if len(q.Reasons) > 0 {
		fmt.Fprintln(w, "\nheld:")
		for _, r := range q.Reasons {
			if _, err := fmt.Fprintf(w, "  %d %s\n", r.Runs, r.Reason); err != nil {
				return err
			}
		}
	}
	return nil
}
