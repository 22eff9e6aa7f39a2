package main

import (
	"context"
	"flag"
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
	ff := addFilterFlags(fs, "scheduled, queued, running, suspended", false)
	of := addOperationFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	f, err := ff.filter("runs cancel")
	if err != nil {
		return err
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
	if resp.JSON202 == nil {
		return fmt.Errorf("cancel runs: unexpected response %q", resp.ContentType())
	}
	return c.followOperation(ctx, cl, cf, of, resp.JSON202, resp.Body)
}

// filterFlags are the flags of a bulk operation's filter (protocol.CancelFilter).
type filterFlags struct {
	function, status, after, before, prefix, errorType, errorGroup *string
}

// addFilterFlags adds the filter's flags to fs; statuses lists those the operation
// takes, and errors adds --error-type and --error-group (a rerun's).
func addFilterFlags(fs *flag.FlagSet, statuses string, errors bool) *filterFlags {
	ff := &filterFlags{
		function: fs.String("function", "", "bulk: only runs of `FUNCTION`"),
		status:   fs.String("status", "", "bulk: only runs in one of `STATUSES` (comma-separated: "+statuses+")"),
		after:    fs.String("created-after", "", "bulk: only runs created after `TIME` (RFC 3339)"),
		before:   fs.String("created-before", "", "bulk: only runs created before `TIME` (RFC 3339)"),
		prefix:   fs.String("key-prefix", "", "bulk: only runs whose idempotency key starts with `PREFIX`"),
	}
	if errors {
		ff.errorType = fs.String("error-type", "", "bulk: only runs whose error has type `TYPE`")
		ff.errorGroup = fs.String("error-group", "", "bulk: only failed runs of `GROUP` (see stepgate failures)")
	}
	return ff
}

// filter is the filter the flags give; the zero filter when none is set.
func (ff *filterFlags) filter(cmd string) (protocol.CancelFilter, error) {
	var f protocol.CancelFilter
	if *ff.function != "" {
		f.Function = ff.function
	}
	if *ff.status != "" {
		var st []protocol.RunStatus
		for _, s := range strings.Split(*ff.status, ",") {
			st = append(st, protocol.RunStatus(strings.TrimSpace(s)))
		}
		f.Status = &st
	}
	for _, t := range []struct {
		flag, v string
		dst     **time.Time
	}{{"--created-after", *ff.after, &f.CreatedAfter}, {"--created-before", *ff.before, &f.CreatedBefore}} {
		if t.v == "" {
			continue
		}
		tm, err := time.Parse(time.RFC3339Nano, t.v)
		if err != nil {
			return f, usagef("%s: %s: %v", cmd, t.flag, err)
		}
		*t.dst = &tm
	}
	if *ff.prefix != "" {
		f.IdempotencyKeyPrefix = ff.prefix
	}
	if ff.errorType != nil && *ff.errorType != "" {
		f.ErrorType = ff.errorType
	}
	if ff.errorGroup != nil && *ff.errorGroup != "" {
		f.ErrorGroup = ff.errorGroup
	}
	return f, nil
}

// operationFlags say whether and how often a bulk command follows its operation.
type operationFlags struct {
	noWait *bool
	every  *time.Duration
}

func addOperationFlags(fs *flag.FlagSet) *operationFlags {
	return &operationFlags{
		noWait: fs.Bool("no-wait", false, "bulk: print the operation and return at once"),
		every:  fs.Duration("every", 500*time.Millisecond, "bulk: how often to read the operation's progress"),
	}
}

// followOperation prints the operation op just started (body, its answer) and, unless
// --no-wait, its progress until it ends; an operation that fails or is cancelled is an
// error.
func (c *cli) followOperation(ctx context.Context, cl *protocol.ClientWithResponses, cf *clientFlags, of *operationFlags, op *protocol.Operation, body []byte) error {
	if *of.noWait {
		if cf.json {
			return printRaw(c.stdout, body)
		}
		_, err := fmt.Fprintf(c.stdout, "operation %s started; see stepgate's GET /v1/operations/%s\n", op.ID, op.ID)
		return err
	}
	verb, done := "cancelling", "cancelled"
	if op.Kind == protocol.Rerun {
		verb, done = "rerunning", "rerun"
	}
	fmt.Fprintf(c.stdout, "operation %s: %s\n", op.ID, verb)
	tick := time.NewTicker(max(*of.every, 50*time.Millisecond))
	defer tick.Stop()
	var err error
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
	failed := ""
	if op.Failed > 0 {
		failed = fmt.Sprintf(", %d could not be (%s)", op.Failed, firstOperationError(op))
	}
	switch op.Status {
	case protocol.OperationStatusFailed:
		msg := ""
		if op.Error != nil {
			msg = *op.Error
		}
		return fmt.Errorf("operation %s failed after %d runs %s%s: %s", op.ID, operationDone(op), done, failed, msg)
	case protocol.OperationStatusCancelled:
		return fmt.Errorf("operation %s was cancelled after %d runs %s%s", op.ID, operationDone(op), done, failed)
	}
	_, err = fmt.Fprintf(c.stdout, "operation %s completed: %d runs %s%s in %d batches\n", op.ID, operationDone(op), done, failed, op.Batches)
	return err
}

// operationDone is the runs op has done: cancelled (a cancel) or rerun (a rerun).
func operationDone(op *protocol.Operation) int64 {
	if op.Kind == protocol.Cancel {
		return op.Cancelled
	}
	return op.Done
}

func firstOperationError(op *protocol.Operation) string {
	if op.Errors == nil || len(*op.Errors) == 0 {
		return "no sample"
	}
	e := (*op.Errors)[0]
	return fmt.Sprintf("run %s: %s", e.RunID, e.Error)
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
	verb := "cancelled"
	if op.Kind == protocol.Rerun {
		verb = "rerun"
	}
	n := operationDone(op)
	failed := ""
	if op.Failed > 0 {
		failed = fmt.Sprintf(", %d failed", op.Failed)
	}
	if op.Matched == nil {
		return fmt.Sprintf("[%s] %d %s%s", strings.Repeat(".", 30), n, verb, failed)
	}
	total := max(*op.Matched, n+op.Failed, 1)
	done := int(30 * (n + op.Failed) / total)
	return fmt.Sprintf("[%s%s] %d/%d %s%s, %d batches", strings.Repeat("#", done), strings.Repeat(".", 30-done),
		n, *op.Matched, verb, failed, op.Batches)
}
