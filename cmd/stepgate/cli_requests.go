package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/stepgate/stepgate/protocol"
)

// defaultRequestWait is how long "runs request" waits for the reply unless --wait says
// otherwise; the gateway allows up to 1m.
const defaultRequestWait = 30 * time.Second

// runsRequest runs "stepgate runs request ID NAME [JSON] [--wait 30s] [--id REQUEST_ID]":
// a request to a run (POST /v1/runs/{id}/requests), taken by the run's
// step.ReceiveRequest of NAME, waiting up to --wait for its reply. It prints the reply;
// a request still pending when the wait ends is printed with where to wait again, and
// exits 0. An error reply, and a request the run ended without replying to, exit
// non-zero.
func (c *cli) runsRequest(ctx context.Context, args []string) error {
	fs := c.newFlagSet("runs request", "ID NAME [JSON] [--wait DURATION] [--id REQUEST_ID]")
	cf := addClientFlags(fs, true)
	wait := fs.Duration("wait", defaultRequestWait, "wait up to `DURATION` for the reply, at most 1m (0: send without waiting)")
	id := fs.String("id", "", "the request's `ID`, which deduplicates it: sending it again waits again for the first one's reply (default: a new one)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) < 2:
		return usagef("runs request: missing %s", []string{"ID", "NAME"}[len(pos)])
	case len(pos) > 3:
		return usagef("runs request: unexpected argument %q", pos[3])
	case *wait < 0:
		return usagef("runs request: --wait must not be negative")
	}
	body := protocol.RequestSend{Name: pos[1]}
	if len(pos) == 3 {
		if body.Data, err = jsonArg("runs request", "request data", pos[2]); err != nil {
			return err
		}
	}
	if *id != "" {
		body.ID = id
	}
	var params protocol.SendRequestParams
	if *wait > 0 {
		params.Wait = new(wait.String())
	}
	cl, err := c.client(cf, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *wait+requestTimeout)
	defer cancel()
	what := "send request " + pos[1] + " to run " + pos[0]
	resp, err := cl.SendRequestWithResponse(ctx, pos[0], &params, body)
	if err != nil {
		return requestError(what, err)
	}
	if err := expect(resp, http.StatusOK, http.StatusAccepted); err != nil {
		return err
	}
	r := resp.JSON200
	if r == nil {
		r = resp.JSON202
	}
	if cf.json {
		if err := printRaw(c.stdout, resp.Body); err != nil {
			return err
		}
		return requestOutcomeError(r)
	}
	if r == nil {
		return fmt.Errorf("%s: unexpected response %q", what, resp.ContentType())
	}
	return c.writeRequestResult(r, *wait)
}

// writeRequestResult prints the answer to "runs request": the reply, or for a pending
// request its state and how to wait for it again (the same request, by its id).
func (c *cli) writeRequestResult(r *protocol.RunRequest, wait time.Duration) error {
	dup := ""
	if r.Duplicate != nil && *r.Duplicate {
		dup = " (a duplicate: the first request with this id)"
	}
	if r.Status == "pending" {
		state := "waits in the run's mailbox"
		if r.Received {
			state = "received by the run, not replied to yet"
		}
		_, err := fmt.Fprintf(c.stdout, "request %s (%s) to run %s is pending: %s%s\nwait again: stepgate runs request %s %s --id %s --wait %s\npoll: GET /v1/runs/%s/requests/%s?wait=30s\n",
			r.ID, r.Name, r.RunID, state, dup, r.RunID, r.Name, r.ID, cmpDuration(wait, defaultRequestWait), r.RunID, r.ID)
		return err
	}
	fmt.Fprintf(c.stdout, "request %s (%s) to run %s %s%s\n", r.ID, r.Name, r.RunID, r.Status, dup)
	if r.Reply != nil {
		fmt.Fprintf(c.stdout, "%s\n", bytes.TrimSpace(*r.Reply))
	}
	return requestOutcomeError(r)
}

// cmpDuration returns d, or def when d is zero.
func cmpDuration(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// requestOutcomeError returns an error for a request answered with an error (an error
// reply, or failed: the run ended without replying), nil otherwise.
func requestOutcomeError(r *protocol.RunRequest) error {
	if r == nil || (r.Error == nil && r.Status != "failed") {
		return nil
	}
	how := "was answered with an error"
	if r.Status == "failed" {
		how = "failed"
	}
	return fmt.Errorf("request %s (%s) to run %s %s: %s (details: stepgate runs requests %s)",
		r.ID, r.Name, r.RunID, how, formatError(r.Error), r.RunID)
}

// runsRequests runs "stepgate runs requests ID [--limit N] [--cursor C]": the run's
// requests with their status, newest first.
func (c *cli) runsRequests(ctx context.Context, args []string) error {
	fs := c.newFlagSet("runs requests", "ID [--limit N] [--cursor C]")
	cf := addClientFlags(fs, true)
	limit := fs.Int("limit", 0, "at most `N` requests, 1 to 500 (gateway default 100)")
	cursor := fs.String("cursor", "", "the next page after `CURSOR` (printed at the end of a page)")
	pos, err := parseCommand(fs, args, "ID")
	if err != nil {
		return err
	}
	var params protocol.ListRequestsParams
	if *limit != 0 {
		if *limit < 1 || *limit > 500 {
			return usagef("runs requests: --limit must be from 1 to 500")
		}
		params.Limit = limit
	}
	if *cursor != "" {
		params.Cursor = cursor
	}
	runID := pos[0]
	what := "list requests of run " + runID
	return doRequest(ctx, c, cf, what, []int{http.StatusOK},
		func(ctx context.Context, cl *protocol.ClientWithResponses) (*protocol.ListRequestsResponse, error) {
			return cl.ListRequestsWithResponse(ctx, runID, &params)
		}, func(resp *protocol.ListRequestsResponse) error {
			page := resp.JSON200
			if page == nil {
				return fmt.Errorf("%s: unexpected response %q", what, resp.ContentType())
			}
			if len(page.Requests) == 0 {
				_, err := fmt.Fprintln(c.stdout, "no requests")
				return err
			}
			tw := newTable(c.stdout)
			fmt.Fprintln(tw, "ID\tNAME\tSTATUS\tSENT\tREPLIED\tDATA\tREPLY")
			for _, r := range page.Requests {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Name, requestState(r),
					formatTime(&r.SentAt, c.loc), formatTime(r.RepliedAt, c.loc),
					compactJSON(jsonPtr(r.Data), cellJSONWidth), requestAnswer(r))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if page.NextCursor != nil && *page.NextCursor != "" {
				_, err := fmt.Fprintf(c.stdout, "\nmore: stepgate runs requests %s --cursor %s\n", runID, *page.NextCursor)
				return err
			}
			return nil
		})
}

// requestState is a request's status, telling apart a pending request the run has
// taken from one still in its mailbox.
func requestState(r protocol.RunRequest) string {
	if r.Status == "pending" && r.Received {
		return "pending (received)"
	}
	return string(r.Status)
}

// requestAnswer is a request's reply, or its error as "error type: message".
func requestAnswer(r protocol.RunRequest) string {
	if r.Error != nil {
		return truncate("error "+formatError(r.Error), cellJSONWidth)
	}
	return compactJSON(jsonPtr(r.Reply), cellJSONWidth)
}
