package main

import (
	"context"
	"fmt"
	"io"
	"net/http"

	"github.com/stepgate/stepgate/protocol"
)

// functionsStats runs "stepgate functions stats NAME [--window 1h|1d]": the function's
// runs bucket by bucket over the last hour (per minute) or day (per 15 minutes), as the
// dashboard's charts show them (GET /v1/functions/{name}/stats).
func (c *cli) functionsStats(ctx context.Context, args []string) error {
	fs := c.newFlagSet("functions stats", "NAME [--window 1h|1d]")
	cf := addClientFlags(fs, true)
	var window string
	fs.StringVar(&window, "window", "1h", "`1h` (per minute) or 1d (per 15 minutes)")
	pos, err := parseCommand(fs, args, "NAME")
	if err != nil {
		return err
	}
	cl, err := c.client(cf, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	w := protocol.GetFunctionSeriesParamsWindow(window)
	resp, err := cl.GetFunctionSeriesWithResponse(ctx, pos[0], &protocol.GetFunctionSeriesParams{Window: &w})
	if err != nil {
		return requestError("get the stats of function "+pos[0], err)
	}
	if err := expect(resp, http.StatusOK); err != nil {
		return err
	}
	if resp.JSON200 == nil {
		return fmt.Errorf("get the stats of function %s: unexpected response %q", pos[0], resp.ContentType())
	}
	return writeSeries(c.stdout, resp.JSON200)
}

// writeSeries prints a series' buckets with any run in them (all of them are empty: a
// line that says so), oldest first.
func writeSeries(w io.Writer, s *protocol.FunctionSeries) error {
	tw := newTable(w)
	fmt.Fprintln(tw, "AT\tSTARTED\tCOMPLETED\tFAILED\tCANCELLED\tP50\tP95\tWAIT P50\tWAIT P95\tQUEUE")
	shown := 0
	for _, b := range s.Buckets {
		if b.Started+b.Completed+b.Failed+b.Cancelled+b.QueueDepth == 0 {
			continue
		}
		shown++
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%d\n", b.At.Local().Format("15:04"),
			b.Started, b.Completed, b.Failed, b.Cancelled, ms(b.P50Ms), ms(b.P95Ms), ms(b.WaitP50Ms), ms(b.WaitP95Ms), b.QueueDepth)
	}
	if shown == 0 {
		_, err := fmt.Fprintf(w, "no runs in the last %s\n", s.Window)
		return err
	}
	return tw.Flush()
}

// ms prints an optional duration in milliseconds, "-" when absent.
func ms(v *float32) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprintf("%.0fms", *v)
}
