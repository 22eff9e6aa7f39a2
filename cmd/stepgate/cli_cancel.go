package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/stepgate/stepgate/protocol"
)

// runsCancel runs "stepgate runs cancel ID" (one run and its tree of children) or
// "stepgate runs cancel --function F --status S,... [...]" (a bulk cancel by filter,
// whose progress it prints until the operation ends, unless --no-wait).
func (c *cli) runsCancel(ctx context.Context, args []string) error {
	fs := c.newFlagSet("runs cancel", "ID | [--function F] [--status S,...] [--created-after T] [--created-before T] [--key-prefix P] [--no-wait]")
	cf := addClientFlags(fs, true)
	function := fs.String("function", "", "bulk: only runs of `FUNCTION`")
	status := fs.String("status", "", "bulk: only runs in one of `STATUSES` (comma-separated: scheduled, queued, running, suspended)")
	after := fs.String("created-after", "", "bulk: only runs created after `TIME` (RFC 3339)")
	before := fs.String("created-before", "", "bulk: only runs created before `TIME` (RFC 3339)")
	prefix := fs.String("key-prefix", "", "bulk: only runs whose idempotency key starts with `PREFIX`")
	noWait := fs.Bool("no-wait", false, "bulk: print the operation and return at once")
	every := fs.Duration("every", 500*time.Millisecond, "bulk: how often to read the operation's progress")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	var f protocol.CancelFilter
	if *function != "" {
		f.Function = function
	}
	if *status != "" {
		var st []protocol.RunStatus
		for _, s := range strings.Split(*status, ",") {
			st = append(st, protocol.RunStatus(strings.TrimSpace(s)))
		}
		f.Status = &st
	}
	for _, t := range []struct {
		flag, v string
		dst     **time.Time
	}{{"--created-after", *after, &f.CreatedAfter}, {"--created-before", *before, &f.CreatedBefore}} {
		if t.v == "" {
			continue
		}
		tm, err := time.Parse(time.RFC3339Nano, t.v)
		if err != nil {
			return usagef("runs cancel: %s: %v", t.flag, err)
		}
		*t.dst = &tm
	}
	if *prefix != "" {
		f.IdempotencyKeyPrefix = prefix
	}
	bulk := f != (protocol.CancelFilter{})
	switch {
	case bulk && len(pos) > 0:
		return usagef("runs cancel: give a run ID or filter flags, not both")
	case !bulk && len(pos) != 1:
		return usagef("runs cancel: give one run ID, or filter flags (--function, --status, ...) for a bulk cancel")
	}
	cl, err := c.client(cf, nil)
	if err != nil {
		return err
	}
	if !bulk {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		defer cancel()
		resp, err := cl.CancelRunWithResponse(rctx, pos[0])
		if err != nil {
			return requestError("cancel run "+pos[0], err)
		}
		if err := expect(resp, http.StatusOK); err != nil {
			return err
		}
		if cf.json {
			return printRaw(c.stdout, resp.Body)
		}
		_, err = fmt.Fprintf(c.stdout, "run %s cancelled, with its children that were not started detached\n", pos[0])
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := cl.CancelRunsWithResponse(rctx, f)
	if err != nil {
		return requestError("cancel runs", err)
	}
	if err := expect(resp, http.StatusAccepted); err != nil {
		return err
	}
	op := resp.JSON202
	if op == nil {
		return fmt.Errorf("cancel runs: unexpected response %q", resp.ContentType())
	}
	if *noWait {
		if cf.json {
			return printRaw(c.stdout, resp.Body)
		}
		_, err := fmt.Fprintf(c.stdout, "operation %s started; see stepgate's GET /v1/operations/%s\n", op.ID, op.ID)
		return err
	}
	fmt.Fprintf(c.stdout, "operation %s: cancelling\n", op.ID)
	tick := time.NewTicker(max(*every, 50*time.Millisecond))
	defer tick.Stop()
	for op.Status == protocol.OperationStatusRunning {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		op, err = getOperation(ctx, cl, op.ID)
		if err != nil {
			return err
		}
		fmt.Fprintln(c.stdout, progressLine(op))
	}
	if op.Status == protocol.OperationStatusFailed {
		msg := ""
		if op.Error != nil {
			msg = *op.Error
		}
		return fmt.Errorf("operation %s failed after cancelling %d runs: %s", op.ID, op.Cancelled, msg)
	}
	_, err = fmt.Fprintf(c.stdout, "operation %s completed: %d runs cancelled in %d batches\n", op.ID, op.Cancelled, op.Batches)
	return err
}

func getOperation(ctx context.Context, cl *protocol.ClientWithResponses, id uuid.UUID) (*protocol.Operation, error) {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := cl.GetOperationWithResponse(ctx, id)
	if err != nil {
		return nil, requestError("get operation "+id.String(), err)
	}
	if err := expect(resp, http.StatusOK); err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, fmt.Errorf("get operation %s: unexpected response %q", id, resp.ContentType())
	}
	return resp.JSON200, nil
}

// progressLine is a bar of 30 cells and the counts: "[#########.....] 3000/9000".
func progressLine(op *protocol.Operation) string {
	if op.Matched == nil {
		return fmt.Sprintf("[%s] %d cancelled", strings.Repeat(".", 30), op.Cancelled)
	}
	total := max(*op.Matched, op.Cancelled, 1)
	done := int(30 * op.Cancelled / total)
	return fmt.Sprintf("[%s%s] %d/%d cancelled, %d batches", strings.Repeat("#", done), strings.Repeat(".", 30-done),
		op.Cancelled, *op.Matched, op.Batches)
}
