package main

import (
	"context"
	"fmt"
	"net/http"
	"strconv"

	"github.com/stepgate/stepgate/protocol"
)

// failures dispatches "stepgate failures ...", the dead-letter view: with no
// subcommand (or only flags) it lists the groups of failed runs.
func (c *cli) failures(ctx context.Context, args []string) error {
	if len(args) == 0 || isFlag(args[0]) {
		return c.failuresList(ctx, args)
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "list", "ls":
		return c.failuresList(ctx, rest)
	case "dismiss":
		return c.failuresDismiss(ctx, rest)
	case "redrive", "rerun":
		return c.failuresRedrive(ctx, rest)
	default:
		return usagef("unknown command \"failures %s\" (want list, dismiss or redrive)", sub)
	}
}

// failuresList runs "stepgate failures [list] [--since 7d] [--limit N] [--all] [--hide-redriven]".
func (c *cli) failuresList(ctx context.Context, args []string) error {
	fs := c.newFlagSet("failures list", "[--since 7d] [--limit N] [--all] [--hide-redriven]")
	cf := addClientFlags(fs, true)
	since := fs.String("since", "", "the window back from now, like 90m, 36h or 7d (default 7d)")
	limit := fs.Int("limit", 0, "groups at most, 1 to 500 (default 100)")
	all := fs.Bool("all", false, "list dismissed groups too")
	hideRedriven := fs.Bool("hide-redriven", false, "leave out the groups every run of which was redriven successfully")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("failures list: unexpected argument %q", pos[0])
	}
	var p protocol.ListFailuresParams
	if *since != "" {
		p.Since = since
	}
	if *limit != 0 {
		p.Limit = limit
	}
	if *all {
		p.IncludeDismissed = all
	}
	if *hideRedriven {
		p.HideRedriven = hideRedriven
	}
	cl, err := c.client(cf, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := cl.ListFailuresWithResponse(ctx, &p)
	if err != nil {
		return requestError("list failures", err)
	}
	if err := expect(resp, http.StatusOK); err != nil {
		return err
	}
	if cf.json {
		return printRaw(c.stdout, resp.Body)
	}
	l := resp.JSON200
	if l == nil {
		return fmt.Errorf("list failures: unexpected response %q", resp.ContentType())
	}
	if len(l.Groups) == 0 {
		_, err := fmt.Fprintf(c.stdout, "no failed runs since %s\n", formatTime(&l.Since, c.loc))
		return err
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "GROUP\tFUNCTION\tERROR\tCOUNT\tREDRIVEN\tFIRST\tLAST\tSAMPLE RUN\tMESSAGE")
	for _, g := range l.Groups {
		count := strconv.FormatInt(g.Count, 10)
		if g.DismissedAt != nil {
			count += " (dismissed)"
		}
		// Redriven: how many were rerun, and how many of those have a rerun that completed.
		redriven := strconv.FormatInt(g.Redriven, 10)
		if g.Redriven > 0 {
			redriven += " (" + strconv.FormatInt(g.RedrivenCompleted, 10) + " ok)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Group, g.Function, g.ErrorType, count, redriven,
			formatTime(&g.FirstSeen, c.loc), formatTime(&g.LastSeen, c.loc), g.SampleRunID, truncate(g.Message, 80))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if l.Truncated {
		_, err = fmt.Fprintln(c.stdout, "\nmore groups: raise --limit or narrow --since")
	}
	return err
}

// failuresDismiss runs "stepgate failures dismiss GROUP".
func (c *cli) failuresDismiss(ctx context.Context, args []string) error {
	fs := c.newFlagSet("failures dismiss", "GROUP")
	cf := addClientFlags(fs, true)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("failures dismiss: give one GROUP (see stepgate failures)")
	}
	cl, err := c.client(cf, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := cl.DismissFailuresWithResponse(ctx, pos[0])
	if err != nil {
		return requestError("dismiss failures "+pos[0], err)
	}
	if err := expect(resp, http.StatusOK); err != nil {
		return err
	}
	if cf.json {
		return printRaw(c.stdout, resp.Body)
	}
	_, err = fmt.Fprintf(c.stdout, "group %s dismissed: hidden until one of its runs fails again\n", pos[0])
	return err
}

// failuresRedrive runs "stepgate failures redrive GROUP [--from failure]": a bulk
// rerun of the group's failed runs (runs rerun --error-group GROUP).
func (c *cli) failuresRedrive(ctx context.Context, args []string) error {
	fs := c.newFlagSet("failures redrive", "GROUP [--from start|failure|N] [--no-wait]")
	cf := addClientFlags(fs, true)
	from := fs.String("from", "", "where each new run starts: start (default), failure (the failing entry) or a seq `N`")
	of := addOperationFlags(fs)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("failures redrive: give one GROUP (see stepgate failures)")
	}
	body := protocol.RerunRunsRequest{Filter: protocol.CancelFilter{ErrorGroup: &pos[0]}}
	switch *from {
	case "", "start":
	case "failure":
		p := protocol.RerunRunsRequestFromFailure
		body.From = &p
	default:
		n, err := strconv.Atoi(*from)
		if err != nil {
			return usagef("failures redrive: --from: want start, failure or a seq; got %q", *from)
		}
		body.FromSeq = &n
	}
	cl, err := c.client(cf, nil)
	if err != nil {
		return err
	}
	return c.runsRerunBulk(ctx, cl, cf, of, body)
}
