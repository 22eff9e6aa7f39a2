package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/stepgate/stepgate/protocol"
)

// events dispatches "stepgate events ...".
func (c *cli) events(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef(`"events" needs a command (send)`)
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "send":
		return c.eventsSend(ctx, rest)
	default:
		return usagef("unknown command \"events %s\" (want send)", sub)
	}
}

// eventsSend runs "stepgate events send NAME [JSON] [--id ID]": an event of the caller's
// tenant, which starts the runs of the functions it triggers and resumes the runs that
// wait for it.
func (c *cli) eventsSend(ctx context.Context, args []string) error {
	fs := c.newFlagSet("events send", "NAME [JSON] [--id EVENT_ID]")
	cf := addClientFlags(fs, true)
	id := fs.String("id", "", "the event's `ID`, which deduplicates the tenant's events (default: a new one)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) < 1:
		return usagef("events send: missing NAME")
	case len(pos) > 2:
		return usagef("events send: unexpected argument %q", pos[2])
	}
	ev := protocol.EventSend{Name: pos[0]}
	if len(pos) == 2 {
		if ev.Data, err = jsonArg("events send", "event data", pos[1]); err != nil {
			return err
		}
	}
	if *id != "" {
		ev.ID = id
	}
	what := "send event " + pos[0]
	return doRequest(ctx, c, cf, what, []int{http.StatusAccepted},
		func(ctx context.Context, cl *protocol.ClientWithResponses) (*protocol.SendEventResponse, error) {
			return cl.SendEventWithResponse(ctx, ev)
		}, func(resp *protocol.SendEventResponse) error {
			return c.showEventSent(resp, what)
		})
}

// showEventSent prints what an event sent with events send started and resumed.
func (c *cli) showEventSent(resp *protocol.SendEventResponse, what string) error {
	r := resp.JSON202
	if r == nil {
		return fmt.Errorf("%s: unexpected response %q", what, resp.ContentType())
	}
	if r.Duplicate != nil && *r.Duplicate {
		_, err := fmt.Fprintf(c.stdout, "event %s (%s): a duplicate of the first event with this id; nothing new started\n", r.ID, r.Name)
		return err
	}
	resumed := []string{}
	if r.Resumed != nil {
		resumed = *r.Resumed
	}
	_, err := fmt.Fprintf(c.stdout, "event %s (%s): started %d run(s) %s, resumed %d waiting run(s) %s\n",
		r.ID, r.Name, len(r.Runs), strings.Join(r.Runs, " "), len(resumed), strings.Join(resumed, " "))
	return err
}
