package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/stepgate/stepgate/protocol"
)

// defaultWait is how long "invoke --wait" waits when no duration is given.
const defaultWait = 30 * time.Second

// waitFlag is --wait [DURATION]: a flag whose value is optional. Alone it
// means defaultWait; --wait=false turns it off.
type waitFlag struct{ d time.Duration }

func (w *waitFlag) String() string {
	if w == nil || w.d == 0 {
		return ""
	}
	return w.d.String()
}

// IsBoolFlag lets the flag package accept --wait with no value.
func (w *waitFlag) IsBoolFlag() bool { return true }

func (w *waitFlag) Set(s string) error {
	switch s {
	case "true":
		w.d = defaultWait
		return nil
	case "false":
		w.d = 0
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return fmt.Errorf("want a positive duration such as 30s or 2m, got %q", s)
	}
	w.d = d
	return nil
}

// isDuration reports whether s parses as a time.Duration.
func isDuration(s string) bool {
	_, err := time.ParseDuration(s)
	return err == nil
}

// invokeOptions are the parsed arguments of "stepgate invoke".
type invokeOptions struct {
	client         *clientFlags
	name           string
	data           string
	wait           time.Duration
	idempotencyKey string
	delay          string     // a delayed start, a duration
	startAt        *time.Time // a delayed start, a time
	timeout        string     // the run's deadline, from now
	deadline       *time.Time // the run's deadline
	priority       int        // the run's priority, 1-4; 0: its function's
	messageTopic   string     // a message to send the run in the start's transaction
	messageData    string     // its data, JSON; "" for null
}

// parseInvoke parses "invoke NAME [--data ...] [--wait [DURATION]]
// [--idempotency-key K] [--message-topic T [--message-data JSON]]" with flags anywhere.
// A message needs --idempotency-key and takes none of the start's other options.
func (c *cli) parseInvoke(args []string) (*invokeOptions, error) {
	fs := c.newFlagSet("invoke", "NAME [--data JSON | --data @FILE | <FILE] [--wait [DURATION]] [--idempotency-key KEY] [--delay DURATION | --start-at TIME] [--timeout DURATION | --deadline TIME] [--priority 1-4] [--message-topic TOPIC [--message-data JSON]]")
	o := &invokeOptions{client: addClientFlags(fs, true)}
	fs.StringVar(&o.data, "data", "", "the run's input: `JSON`, @FILE, or - for standard input (default: standard input if piped, else {})")
	var wait waitFlag
	fs.Var(&wait, "wait", "wait for the result, up to `DURATION` (30s when given alone; the gateway allows up to 15m)")
	fs.StringVar(&o.idempotencyKey, "idempotency-key", "", "start at most one run per `KEY` (per tenant and function)")
	fs.StringVar(&o.delay, "delay", "", "start the run after `DURATION` (at most 8760h), scheduled until then")
	var startAt, deadline string
	fs.StringVar(&startAt, "start-at", "", "start the run at `TIME` (RFC 3339), scheduled until then")
	fs.StringVar(&o.timeout, "timeout", "", "fail the run (deadline_exceeded) if it has not ended after `DURATION`")
	fs.StringVar(&deadline, "deadline", "", "fail the run (deadline_exceeded) if it has not ended by `TIME` (RFC 3339)")
	fs.IntVar(&o.priority, "priority", 0, "the run's `PRIORITY` in the queue, 1 (first) to 4 (last) (default: its function's, else 2)")
	fs.StringVar(&o.messageTopic, "message-topic", "", "also send the run a message on `TOPIC`, in one transaction with its start (needs --idempotency-key: the run of the key gets it, started if there is none)")
	fs.StringVar(&o.messageData, "message-data", "", "the message's data, `JSON` (default null)")
	pos, err := parseCommand(fs, joinOptionalValue(args, "wait", isDuration), "NAME")
	if err != nil {
		return nil, err
	}
	o.name, o.wait = pos[0], wait.d
	switch {
	case o.messageTopic == "" && o.messageData != "":
		return nil, usagef("invoke: --message-data needs --message-topic")
	case o.messageTopic == "":
	case o.idempotencyKey == "":
		return nil, usagef("invoke: --message-topic needs --idempotency-key, which names the run that gets the message (and is the message's id)")
	case o.wait > 0 || o.delay != "" || startAt != "" || o.timeout != "" || deadline != "" || o.priority != 0:
		return nil, usagef("invoke: --message-topic takes none of --wait, --delay, --start-at, --timeout, --deadline and --priority")
	case o.messageData != "" && !json.Valid([]byte(o.messageData)):
		return nil, usagef("invoke: --message-data is not valid JSON: %s", truncate(o.messageData, 60))
	}
	for _, f := range []struct {
		flag, value string
		out         **time.Time
	}{{"start-at", startAt, &o.startAt}, {"deadline", deadline, &o.deadline}} {
		if f.value == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, f.value)
		if err != nil {
			return nil, fmt.Errorf("--%s %q is not an RFC 3339 time such as 2026-12-01T09:00:00Z", f.flag, f.value)
		}
		*f.out = &t
	}
	return o, nil
}

// readInput returns a run's input: --data JSON, --data @FILE, --data - (or no
// --data with piped stdin) for standard input, else {}. stdin may be nil.
func readInput(data string, stdin io.Reader) (json.RawMessage, error) {
	var (
		raw  []byte
		from string
	)
	switch {
	case data == "-" || data == "@-" || (data == "" && stdin != nil):
		if stdin == nil {
			return nil, errors.New("--data -: standard input is not a pipe or a file")
		}
		b, err := io.ReadAll(stdin)
		if err != nil {
			return nil, fmt.Errorf("read input from standard input: %w", err)
		}
		raw, from = b, "standard input"
	case strings.HasPrefix(data, "@"):
		b, err := os.ReadFile(data[1:])
		if err != nil {
			return nil, fmt.Errorf("read input: %w", err)
		}
		raw, from = b, data[1:]
	default:
		raw, from = []byte(data), "--data"
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return json.RawMessage(`{}`), nil
	}
	if !json.Valid(raw) {
		return nil, fmt.Errorf("input from %s is not valid JSON: %s", from, truncate(string(raw), 60))
	}
	return raw, nil
}

// invoke runs "stepgate invoke NAME".
func (c *cli) invoke(ctx context.Context, args []string) error {
	o, err := c.parseInvoke(args)
	if err != nil {
		return err
	}
	var stdin io.Reader
	if c.stdin != nil {
		stdin = c.stdin()
	}
	input, err := readInput(o.data, stdin)
	if err != nil {
		return err
	}
	if o.messageTopic != "" {
		return c.invokeWithMessage(ctx, o, input)
	}
	cl, err := c.client(o.client, nil)
	if err != nil {
		return err
	}

	params := &protocol.StartRunParams{}
	if o.wait > 0 {
		w := o.wait.String()
		params.Wait = &w
	}
	if o.idempotencyKey != "" {
		params.IdempotencyKey = &o.idempotencyKey
	}
	if o.delay != "" {
		params.Delay = &o.delay
	}
	if o.priority != 0 {
		params.Priority = &o.priority
	}
	if o.timeout != "" {
		params.Timeout = &o.timeout
	}
	params.StartAt, params.Deadline = o.startAt, o.deadline
	ctx, cancel := context.WithTimeout(ctx, o.wait+requestTimeout)
	defer cancel()
	resp, err := cl.StartRunWithBodyWithResponse(ctx, o.name, params, "application/json", bytes.NewReader(input))
	if err != nil {
		return requestError("invoke "+o.name, err)
	}
	if err := expect(resp, http.StatusOK, http.StatusAccepted); err != nil {
		return err
	}
	res := resp.JSON200
	if res == nil {
		res = resp.JSON202
	}
	if cf := o.client; cf.json {
		if err := printRaw(c.stdout, resp.Body); err != nil {
			return err
		}
		return runOutcomeError(res)
	}
	if res == nil {
		return fmt.Errorf("invoke %s: unexpected response %q", o.name, resp.ContentType())
	}
	return writeInvokeResult(c.stdout, resp.StatusCode(), res)
}

// invokeWithMessage runs "stepgate invoke NAME --message-topic T": it starts the run of
// the idempotency key unless there is one, and sends it the message, in one transaction
// (POST /v1/functions/{name}/runs/with-message).
func (c *cli) invokeWithMessage(ctx context.Context, o *invokeOptions, input json.RawMessage) error {
	body := protocol.StartWithMessage{Input: new(protocol.AnyJSON(input))}
	body.Message.Topic = o.messageTopic
	if o.messageData != "" {
		body.Message.Data = new(protocol.AnyJSON(o.messageData))
	}
	what := "invoke " + o.name + " with a message"
	return doRequest(ctx, c, o.client, what, []int{http.StatusAccepted},
		func(ctx context.Context, cl *protocol.ClientWithResponses) (*protocol.StartRunWithMessageResponse, error) {
			return cl.StartRunWithMessageWithResponse(ctx, o.name, &protocol.StartRunWithMessageParams{IdempotencyKey: o.idempotencyKey}, body)
		}, func(resp *protocol.StartRunWithMessageResponse) error {
			r := resp.JSON202
			if r == nil {
				return fmt.Errorf("%s: unexpected response %q", what, resp.ContentType())
			}
			started := "started"
			if !r.Created {
				started = "already there (the run of idempotency key " + o.idempotencyKey + ")"
			}
			state := "waits in the run's mailbox"
			if r.Message.Consumed {
				state = "received by the run"
			}
			if r.Message.Duplicate != nil && *r.Message.Duplicate {
				state += " (a duplicate: sent before under this key)"
			}
			_, err := fmt.Fprintf(c.stdout, "run %s is %s: %s\nmessage %s on topic %s: %s\nattach: stepgate runs get %s\n",
				r.ID, r.Status, started, r.Message.ID, r.Message.Topic, state, r.ID)
			return err
		})
}

// writeInvokeResult prints the answer to "invoke": a finished run's output,
// or how to attach to one that has not finished. A failed or cancelled run
// is an error, so that the exit status tells.
func writeInvokeResult(w io.Writer, status int, res *protocol.RunResult) error {
	if status == http.StatusAccepted || !isTerminal(res.Status) {
		_, err := fmt.Fprintf(w, "run %s is %s\nattach: stepgate runs get %s\n", res.ID, res.Status, res.ID)
		return err
	}
	fmt.Fprintf(w, "run %s %s\n", res.ID, res.Status)
	if res.Output != nil {
		fmt.Fprintf(w, "%s\n", bytes.TrimSpace(*res.Output))
	}
	return runOutcomeError(res)
}

// runOutcomeError returns an error for a failed or cancelled run, nil
// otherwise.
func runOutcomeError(res *protocol.RunResult) error {
	if res == nil || (res.Status != "failed" && res.Status != "cancelled") {
		return nil
	}
	msg := fmt.Sprintf("run %s %s", res.ID, res.Status)
	if res.Error != nil {
		msg += ": " + formatError(res.Error)
	}
	return fmt.Errorf("%s (details: stepgate runs get %s)", msg, res.ID)
}

// isTerminal reports whether a run in status s has finished for good.
func isTerminal(s protocol.RunStatus) bool {
	return s == "completed" || s == "failed" || s == "cancelled"
}

// runsListOptions are the parsed arguments of "stepgate runs list".
type runsListOptions struct {
	client *clientFlags
	params protocol.ListRunsParams
}

// parseRunsList parses "runs list [--function F] [--status S] [--limit N]
// [--cursor C]".
func (c *cli) parseRunsList(args []string) (*runsListOptions, error) {
	fs := c.newFlagSet("runs list", "[--function F] [--status S] [--limit N] [--cursor C]")
	o := &runsListOptions{client: addClientFlags(fs, true)}
	function := fs.String("function", "", "only runs of `FUNCTION`")
	status := fs.String("status", "", "only runs in `STATUS`: scheduled, queued, running, suspended, completed, failed or cancelled")
	limit := fs.Int("limit", 0, "at most `N` runs, 1 to 500 (gateway default 50)")
	cursor := fs.String("cursor", "", "the next page after `CURSOR` (printed at the end of a page)")
	if _, err := parseCommand(fs, args); err != nil {
		return nil, err
	}
	if *function != "" {
		o.params.Function = function
	}
	if *status != "" {
		s := protocol.RunStatus(*status)
		if !s.Valid() {
			return nil, usagef("runs list: unknown status %q (want scheduled, queued, running, suspended, completed, failed or cancelled)", *status)
		}
		o.params.Status = &s
	}
	if *limit != 0 {
		if *limit < 1 || *limit > 500 {
			return nil, usagef("runs list: --limit must be from 1 to 500")
		}
		o.params.Limit = limit
	}
	if *cursor != "" {
		o.params.Cursor = cursor
	}
	return o, nil
}

// runsList runs "stepgate runs list".
func (c *cli) runsList(ctx context.Context, args []string) error {
	o, err := c.parseRunsList(args)
	if err != nil {
		return err
	}
	cl, err := c.client(o.client, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := cl.ListRunsWithResponse(ctx, &o.params)
	if err != nil {
		return requestError("list runs", err)
	}
	if err := expect(resp, http.StatusOK); err != nil {
		return err
	}
	if o.client.json {
		return printRaw(c.stdout, resp.Body)
	}
	page := resp.JSON200
	if page == nil {
		return fmt.Errorf("list runs: unexpected response %q", resp.ContentType())
	}
	if len(page.Runs) == 0 {
		_, err := fmt.Fprintln(c.stdout, "no runs")
		return err
	}
	if err := writeRunsTable(c.stdout, page.Runs, c.loc); err != nil {
		return err
	}
	if page.NextCursor != nil && *page.NextCursor != "" {
		_, err := fmt.Fprintf(c.stdout, "\nmore: stepgate runs list --cursor %s\n", *page.NextCursor)
		return err
	}
	return nil
}

// runsGet runs "stepgate runs get ID". It reads every page of the journal; --json prints
// the first page as the API answers it.
func (c *cli) runsGet(ctx context.Context, args []string) error {
	return singleRequest(ctx, c, args, "runs get", "ID", "get run", []int{http.StatusOK},
		func(ctx context.Context, cl *protocol.ClientWithResponses, id string) (*protocol.GetRunResponse, error) {
			first, err := cl.GetRunWithResponse(ctx, id, nil)
			if err != nil || first.JSON200 == nil {
				return first, err
			}
			for next := first.JSON200.JournalNextCursor; next != nil; {
				page, err := cl.GetRunWithResponse(ctx, id, &protocol.GetRunParams{JournalCursor: next})
				if err != nil {
					return nil, err
				}
				if page.JSON200 == nil {
					return page, nil
				}
				first.JSON200.Journal = append(first.JSON200.Journal, page.JSON200.Journal...)
				first.JSON200.Failures = append(first.JSON200.Failures, page.JSON200.Failures...)
				next = page.JSON200.JournalNextCursor
			}
			return first, nil
		},
		func(resp *protocol.GetRunResponse, id string) error {
			if resp.JSON200 == nil {
				return fmt.Errorf("get run %s: unexpected response %q", id, resp.ContentType())
			}
			return writeRunDetail(c.stdout, resp.JSON200, c.loc)
		})
}

// runsValues runs "stepgate runs values ID": the latest value of each of the run's keys.
func (c *cli) runsValues(ctx context.Context, args []string) error {
	return singleRequest(ctx, c, args, "runs values", "ID", "list values of run", []int{http.StatusOK},
		func(ctx context.Context, cl *protocol.ClientWithResponses, id string) (*protocol.ListRunValuesResponse, error) {
			return cl.ListRunValuesWithResponse(ctx, id)
		},
		func(resp *protocol.ListRunValuesResponse, id string) error {
			if resp.JSON200 == nil {
				return fmt.Errorf("list values of run %s: unexpected response %q", id, resp.ContentType())
			}
			if len(resp.JSON200.Values) == 0 {
				_, err := fmt.Fprintln(c.stdout, "no values")
				return err
			}
			tw := newTable(c.stdout)
			fmt.Fprintln(tw, "KEY\tVERSION\tSET\tVALUE")
			for _, v := range resp.JSON200.Values {
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", v.Key, v.Version, v.SetAt.In(c.loc).Format(time.DateTime), compactJSON(v.Value, 80))
			}
			return tw.Flush()
		})
}

// runsCallbacks runs "stepgate runs callbacks ID": the run's open callbacks with their
// whole URLs (GET /v1/runs/{id}/callbacks, runs:manage).
func (c *cli) runsCallbacks(ctx context.Context, args []string) error {
	return singleRequest(ctx, c, args, "runs callbacks", "ID", "list callbacks of run", []int{http.StatusOK},
		func(ctx context.Context, cl *protocol.ClientWithResponses, id string) (*protocol.ListRunCallbacksResponse, error) {
			return cl.ListRunCallbacksWithResponse(ctx, id)
		},
		func(resp *protocol.ListRunCallbacksResponse, id string) error {
			if resp.JSON200 == nil {
				return fmt.Errorf("list callbacks of run %s: unexpected response %q", id, resp.ContentType())
			}
			if len(resp.JSON200.Callbacks) == 0 {
				_, err := fmt.Fprintln(c.stdout, "no open callbacks")
				return err
			}
			tw := newTable(c.stdout)
			fmt.Fprintln(tw, "SEQ\tNAME\tAWAITED\tEXPIRES\tURL")
			for _, cb := range resp.JSON200.Callbacks {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", cb.Seq, cb.Name, yesNo(cb.Awaited != nil && *cb.Awaited),
					cb.ExpiresAt.In(c.loc).Format(time.DateTime), cb.URL)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if resp.JSON200.More {
				_, err := fmt.Fprintf(c.stdout, "(the first %d; the run has more)\n", len(resp.JSON200.Callbacks))
				return err
			}
			return nil
		})
}

// runsSend runs "stepgate runs send ID TOPIC [JSON] [--id ID]": a message to a run's
// mailbox, taken by the run's step.Receive of TOPIC.
func (c *cli) runsSend(ctx context.Context, args []string) error {
	fs := c.newFlagSet("runs send", "ID TOPIC [JSON] [--id MESSAGE_ID]")
	cf := addClientFlags(fs, true)
	id := fs.String("id", "", "the message's `ID`, which deduplicates the run's messages (default: a new one)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) < 2:
		return usagef("runs send: missing %s", []string{"ID", "TOPIC"}[len(pos)])
	case len(pos) > 3:
		return usagef("runs send: unexpected argument %q", pos[3])
	}
	m := protocol.MessageSend{Topic: pos[1]}
	if len(pos) == 3 {
		if m.Data, err = jsonArg("runs send", "message data", pos[2]); err != nil {
			return err
		}
	}
	if *id != "" {
		m.ID = id
	}
	what := "send message to run " + pos[0]
	return doRequest(ctx, c, cf, what, []int{http.StatusAccepted},
		func(ctx context.Context, cl *protocol.ClientWithResponses) (*protocol.SendMessageResponse, error) {
			return cl.SendMessageWithResponse(ctx, pos[0], m)
		}, func(resp *protocol.SendMessageResponse) error {
			return c.showMessageSent(resp, what)
		})
}

// showMessageSent prints what became of a message sent with runs send.
func (c *cli) showMessageSent(resp *protocol.SendMessageResponse, what string) error {
	r := resp.JSON202
	if r == nil {
		return fmt.Errorf("%s: unexpected response %q", what, resp.ContentType())
	}
	state := "waits in the run's mailbox"
	if r.Consumed {
		state = "received by the run"
	}
	if r.Duplicate != nil && *r.Duplicate {
		state += " (a duplicate: the first message with this id)"
	}
	_, err := fmt.Fprintf(c.stdout, "message %s on topic %s to run %s: %s\n", r.ID, r.Topic, r.RunID, state)
	return err
}

// runsRerun runs "stepgate runs rerun ID [--from N]": a new run of a finished run's
// function, with its input, as the caller; or, with filter flags and no ID,
// "stepgate runs rerun --function F --status failed --from failure" (a bulk rerun, a
// redrive, whose progress it prints until the operation ends, unless --no-wait).
func (c *cli) runsRerun(ctx context.Context, args []string) error {
	fs := c.newFlagSet("runs rerun", "ID [--from N] | [--function F] [--status S,...] [--error-type T] [--error-group G] [...] [--from start|failure|N] [--no-wait]")
	cf := addClientFlags(fs, true)
	from := fs.String("from", "", "rerun from seq `N`: replay the old run's entries before N, run N onwards again; bulk: also start (default) or failure (each run's failing entry)")
	ff := addFilterFlags(fs, "completed, failed, cancelled", true)
	of := addOperationFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	f, err := ff.filter("runs rerun")
	if err != nil {
		return err
	}
	bulk := f != (protocol.CancelFilter{})
	switch {
	case bulk && len(pos) > 0:
		return usagef("runs rerun: give a run ID or filter flags, not both")
	case !bulk && len(pos) < 1:
		return usagef("runs rerun: missing ID (or filter flags, --function, --status, ..., for a bulk rerun)")
	case len(pos) > 1:
		return usagef("runs rerun: unexpected argument %q", pos[1])
	}
	var fromSeq *int
	var fromPoint *protocol.RerunRunsRequestFrom
	switch *from {
	case "", "start":
	case "failure":
		if !bulk {
			return usagef("runs rerun: --from failure is for a bulk rerun; give a seq for one run (stepgate runs get ID shows its journal)")
		}
		p := protocol.RerunRunsRequestFromFailure
		fromPoint = &p
	default:
		n, err := strconv.Atoi(*from)
		if err != nil {
			return usagef("runs rerun: --from: want a seq, start or failure; got %q", *from)
		}
		fromSeq = &n
	}
	cl, err := c.client(cf, nil)
	if err != nil {
		return err
	}
	if bulk {
		return c.runsRerunBulk(ctx, cl, cf, of, protocol.RerunRunsRequest{Filter: f, From: fromPoint, FromSeq: fromSeq})
	}
	var body protocol.RerunRunJSONRequestBody
	if fromSeq != nil && *fromSeq != 0 {
		body.FromSeq = fromSeq
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	what := "rerun run " + pos[0]
	resp, err := cl.RerunRunWithResponse(ctx, pos[0], body)
	if err != nil {
		return requestError(what, err)
	}
	if err := expect(resp, http.StatusAccepted); err != nil {
		return err
	}
	if cf.json {
		return printRaw(c.stdout, resp.Body)
	}
	r := resp.JSON202
	if r == nil {
		return fmt.Errorf("%s: unexpected response %q", what, resp.ContentType())
	}
	if fromSeq != nil && *fromSeq > 1 {
		_, err = fmt.Fprintf(c.stdout, "run %s (%s) reruns %s from seq %d\n", r.ID, r.Status, pos[0], *fromSeq)
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "run %s (%s) reruns %s\n", r.ID, r.Status, pos[0])
	return err
}

// runsRerunBulk starts the bulk rerun body and follows it (followOperation).
func (c *cli) runsRerunBulk(ctx context.Context, cl *protocol.ClientWithResponses, cf *clientFlags, of *operationFlags, body protocol.RerunRunsRequest) error {
	rctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := cl.RerunRunsWithResponse(rctx, body)
	if err != nil {
		return requestError("rerun runs", err)
	}
	if err := expect(resp, http.StatusAccepted); err != nil {
		return err
	}
	if resp.JSON202 == nil {
		return fmt.Errorf("rerun runs: unexpected response %q", resp.ContentType())
	}
	return c.followOperation(ctx, cl, cf, of, resp.JSON202, resp.Body)
}
