package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/stepgate/stepgate/protocol"
)

// schedules dispatches "stepgate schedules ...". With no subcommand (or only flags) it
// lists.
func (c *cli) schedules(ctx context.Context, args []string) error {
	if len(args) == 0 || isFlag(args[0]) {
		return c.schedulesList(ctx, args)
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "put", "create", "set":
		return c.schedulesPut(ctx, rest)
	case "list", "ls":
		return c.schedulesList(ctx, rest)
	case "get", "show":
		return c.schedulesGet(ctx, rest)
	case "delete", "rm":
		return c.schedulesDelete(ctx, rest)
	default:
		return usagef("unknown command \"schedules %s\" (want put, list, get or delete)", sub)
	}
}

// schedulesPut runs "stepgate schedules put NAME --function F --cron EXPR".
func (c *cli) schedulesPut(ctx context.Context, args []string) error {
	fs := c.newFlagSet("schedules put", "NAME --function F --cron EXPR [--input JSON | --input @FILE] [--timezone TZ] [--catchup skip|one|all] [--catchup-window D]")
	cf := addClientFlags(fs, true)
	function := fs.String("function", "", "the `FUNCTION` each tick starts a run of (required)")
	expr := fs.String("cron", "", `five cron fields ("0 9 * * MON-FRI") or a descriptor ("@hourly", "@every 1m") (required)`)
	input := fs.String("input", "", "each run's input: `JSON`, @FILE, or - for standard input (default null)")
	timezone := fs.String("timezone", "", "the IANA time `ZONE` the cron fields are read in (default UTC)")
	catchup := fs.String("catchup", "", "what ticks missed by more than the catch-up window start: `POLICY` skip, one or all (default one)")
	window := fs.String("catchup-window", "", "how late a tick may start and still count as on time: a `DURATION` from 1s to 24h (default 1m)")
	pos, err := parseCommand(fs, args, "NAME")
	if err != nil {
		return err
	}
	name := pos[0]
	if *function == "" || *expr == "" {
		return usagef("schedules put: --function and --cron are required")
	}
	spec := protocol.ScheduleSpec{Function: *function, Cron: *expr}
	if *timezone != "" {
		spec.Timezone = timezone
	}
	if *catchup != "" {
		spec.Catchup = (*protocol.ScheduleCatchup)(catchup)
	}
	if *window != "" {
		spec.CatchupWindow = window
	}
	if *input != "" {
		var stdin io.Reader
		switch {
		case *input == "-" || *input == "@-":
			if c.stdin != nil {
				stdin = c.stdin()
			}
		case !strings.HasPrefix(*input, "@") && !json.Valid([]byte(*input)):
			return usagef("schedules put: --input is not valid JSON: %s", truncate(*input, 60))
		}
		raw, err := readInput(*input, stdin)
		if err != nil {
			return err
		}
		in := protocol.AnyJSON(raw)
		spec.Input = &in
	}

	cl, err := c.client(cf, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := cl.PutScheduleWithResponse(ctx, name, spec)
	if err != nil {
		return requestError("put schedule "+name, err)
	}
	if err := expect(resp, http.StatusOK); err != nil {
		return err
	}
	if cf.json {
		return printRaw(c.stdout, resp.Body)
	}
	s := resp.JSON200
	if s == nil {
		return fmt.Errorf("put schedule %s: unexpected response %q", name, resp.ContentType())
	}
	_, err = fmt.Fprintf(c.stdout, "schedule %s: %s runs %s (%s); next tick %s\n",
		s.Name, s.Cron, s.Function, s.Timezone, formatTime(&s.NextAt, c.loc))
	return err
}

// schedulesList runs "stepgate schedules list".
func (c *cli) schedulesList(ctx context.Context, args []string) error {
	return singleRequest(ctx, c, args, "schedules list", "", "list schedules", []int{http.StatusOK},
		func(ctx context.Context, cl *protocol.ClientWithResponses, _ string) (*protocol.ListSchedulesResponse, error) {
			return cl.ListSchedulesWithResponse(ctx)
		},
		func(resp *protocol.ListSchedulesResponse, _ string) error {
			if resp.JSON200 == nil {
				return fmt.Errorf("list schedules: unexpected response %q", resp.ContentType())
			}
			if len(resp.JSON200.Schedules) == 0 {
				_, err := fmt.Fprintln(c.stdout, "no schedules (stepgate schedules put NAME --function F --cron EXPR)")
				return err
			}
			tw := newTable(c.stdout)
			fmt.Fprintln(tw, "NAME\tFUNCTION\tCRON\tTIMEZONE\tCATCHUP\tNEXT TICK\tLAST RUN")
			for _, s := range resp.JSON200.Schedules {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Function, s.Cron, s.Timezone,
					formatCatchup(s), formatTime(&s.NextAt, c.loc), orDash(deref(s.LastRunID)))
			}
			return tw.Flush()
		})
}

// schedulesGet runs "stepgate schedules get NAME".
func (c *cli) schedulesGet(ctx context.Context, args []string) error {
	return singleRequest(ctx, c, args, "schedules get", "NAME", "get schedule", []int{http.StatusOK},
		func(ctx context.Context, cl *protocol.ClientWithResponses, name string) (*protocol.GetScheduleResponse, error) {
			return cl.GetScheduleWithResponse(ctx, name)
		},
		func(resp *protocol.GetScheduleResponse, name string) error {
			if resp.JSON200 == nil {
				return fmt.Errorf("get schedule %s: unexpected response %q", name, resp.ContentType())
			}
			return writeSchedule(c.stdout, resp.JSON200, c.loc)
		})
}

// schedulesDelete runs "stepgate schedules delete NAME".
func (c *cli) schedulesDelete(ctx context.Context, args []string) error {
	return singleRequest(ctx, c, args, "schedules delete", "NAME", "delete schedule", []int{http.StatusNoContent, http.StatusOK},
		func(ctx context.Context, cl *protocol.ClientWithResponses, name string) (*protocol.DeleteScheduleResponse, error) {
			return cl.DeleteScheduleWithResponse(ctx, name)
		},
		func(_ *protocol.DeleteScheduleResponse, name string) error {
			_, err := fmt.Fprintf(c.stdout, "deleted schedule %s (the runs it started are kept)\n", name)
			return err
		})
}

// writeSchedule writes one schedule as "key  value" lines.
func writeSchedule(w io.Writer, s *protocol.Schedule, loc *time.Location) error {
	tw := newTable(w)
	fmt.Fprintf(tw, "name\t%s\n", s.Name)
	fmt.Fprintf(tw, "function\t%s\n", s.Function)
	fmt.Fprintf(tw, "cron\t%s (%s)\n", s.Cron, s.Timezone)
	fmt.Fprintf(tw, "input\t%s\n", compactJSON(s.Input, headerJSONWidth))
	fmt.Fprintf(tw, "runs as\t%s\n", formatIdentity(s.Identity))
	fmt.Fprintf(tw, "catchup\t%s\n", formatCatchup(*s))
	fmt.Fprintf(tw, "next tick\t%s\n", formatTime(&s.NextAt, loc))
	fmt.Fprintf(tw, "last tick\t%s\n", formatTime(s.LastTickAt, loc))
	fmt.Fprintf(tw, "last run\t%s\n", orDash(deref(s.LastRunID)))
	fmt.Fprintf(tw, "created\t%s\n", formatTime(&s.CreatedAt, loc))
	fmt.Fprintf(tw, "updated\t%s\n", formatTime(&s.UpdatedAt, loc))
	return tw.Flush()
}

// formatCatchup writes a schedule's catch-up policy and window: "one, window 1m".
func formatCatchup(s protocol.Schedule) string {
	if s.Catchup == "" {
		return "-" // an older gateway
	}
	return fmt.Sprintf("%s, window %s", s.Catchup, s.CatchupWindow)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
