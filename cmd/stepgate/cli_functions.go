package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/stepgate/stepgate/protocol"
)

// requestTimeout bounds every client request that does not wait for a run.
const requestTimeout = 30 * time.Second

// functionsRegister runs "stepgate functions register NAME --url URL".
func (c *cli) functionsRegister(ctx context.Context, args []string) error {
	fs := c.newFlagSet("functions register", "NAME --url URL [--timeout 30s] [--run-timeout 1h] [--max-invocation-duration 50s] [--max-attempts N] [--priority 1-4] [--gateway URL]")
	cf := addClientFlags(fs, false)
	fnURL := fs.String("url", "", "the function's http(s) `URL`, where the gateway POSTs invocations (required)")
	timeout := fs.Duration("timeout", 0, "how long one invocation may take (gateway default 5m)")
	maxAttempts := fs.Int("max-attempts", 0, "invocation attempts in all, the first included (gateway default 3)")
	runTimeout := fs.Duration("run-timeout", 0, "how long a whole run may take from its creation: its deadline (default none)")
	maxInvocation := fs.Duration("max-invocation-duration", 0, "what the SDK allows one invocation before it continues in a new one (default none)")
	priority := fs.Int("priority", 0, "the `PRIORITY` of its runs in the queue, 1 (first) to 4 (last) (gateway default 2)")
	pos, err := parseCommand(fs, args, "NAME")
	if err != nil {
		return err
	}
	name := pos[0]
	if *fnURL == "" {
		return usagef("functions register: missing --url, the function's URL")
	}
	if *timeout < 0 || *maxAttempts < 0 || *runTimeout < 0 || *maxInvocation < 0 {
		return usagef("functions register: --timeout, --run-timeout, --max-invocation-duration and --max-attempts must not be negative")
	}
	reg := protocol.FunctionRegistration{URL: *fnURL}
	if *timeout > 0 || *maxAttempts > 0 || *runTimeout > 0 || *maxInvocation > 0 || *priority != 0 {
		reg.Config = &protocol.FunctionConfig{}
		if *priority != 0 {
			reg.Config.Priority = priority // the gateway checks it
		}
		if *runTimeout > 0 {
			reg.Config.RunTimeout = new(runTimeout.String())
		}
		if *maxInvocation > 0 {
			reg.Config.MaxInvocationDuration = new(maxInvocation.String())
		}
		if *timeout > 0 {
			t := timeout.String()
			reg.Config.Timeout = &t
		}
		if *maxAttempts > 0 {
			reg.Config.Retries = &protocol.RetryPolicy{MaxAttempts: maxAttempts}
		}
	}

	cl, err := c.client(cf, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := cl.RegisterFunctionWithResponse(ctx, name, reg)
	if err != nil {
		return requestError("register function "+name, err)
	}
	if err := expect(resp, http.StatusOK); err != nil {
		return err
	}
	if cf.json {
		return printRaw(c.stdout, resp.Body)
	}
	f := resp.JSON200
	if f == nil {
		return fmt.Errorf("register function %s: unexpected response %q", name, resp.ContentType())
	}
	_, err = fmt.Fprintf(c.stdout, "registered %s revision %d -> %s\n", f.Name, f.Revision, f.URL)
	return err
}

// functionsList runs "stepgate functions list".
func (c *cli) functionsList(ctx context.Context, args []string) error {
	return singleRequest(ctx, c, args, "functions list", "", "list functions", []int{http.StatusOK},
		func(ctx context.Context, cl *protocol.ClientWithResponses, _ string) (*protocol.ListFunctionsResponse, error) {
			return cl.ListFunctionsWithResponse(ctx)
		},
		func(resp *protocol.ListFunctionsResponse, _ string) error {
			if resp.JSON200 == nil {
				return fmt.Errorf("list functions: unexpected response %q", resp.ContentType())
			}
			if len(resp.JSON200.Functions) == 0 {
				_, err := fmt.Fprintln(c.stdout, "no functions registered (stepgate functions register NAME --url URL, or stepgate apps sync URL)")
				return err
			}
			return writeFunctionsTable(c.stdout, resp.JSON200.Functions)
		})
}

// functionsGet runs "stepgate functions get NAME".
func (c *cli) functionsGet(ctx context.Context, args []string) error {
	return singleRequest(ctx, c, args, "functions get", "NAME", "get function", []int{http.StatusOK},
		func(ctx context.Context, cl *protocol.ClientWithResponses, name string) (*protocol.GetFunctionResponse, error) {
			return cl.GetFunctionWithResponse(ctx, name)
		},
		func(resp *protocol.GetFunctionResponse, name string) error {
			if resp.JSON200 == nil {
				return fmt.Errorf("get function %s: unexpected response %q", name, resp.ContentType())
			}
			return writeFunction(c.stdout, resp.JSON200, c.loc)
		})
}

// functionsDelete runs "stepgate functions delete NAME".
func (c *cli) functionsDelete(ctx context.Context, args []string) error {
	return singleRequest(ctx, c, args, "functions delete", "NAME", "delete function", []int{http.StatusNoContent, http.StatusOK},
		func(ctx context.Context, cl *protocol.ClientWithResponses, name string) (*protocol.DeleteFunctionResponse, error) {
			return cl.DeleteFunctionWithResponse(ctx, name)
		},
		func(_ *protocol.DeleteFunctionResponse, name string) error {
			_, err := fmt.Fprintf(c.stdout, "deleted function %s (its runs and revisions are kept)\n", name)
			return err
		})
}

// appsSync runs "stepgate apps sync URL [--check [--force] [--sample N]] [--dry-run]".
// A check that is not ok fails the command (exit status 1), so that a CI step can
// gate on it: with --check the gateway refuses the sync (409), and with --dry-run,
// which the gateway answers 200 whatever it finds, dryRunError says so. With --force
// a sync that registered exits 0.
func (c *cli) appsSync(ctx context.Context, args []string) error {
	fs := c.newFlagSet("apps sync", "URL")
	cf := addClientFlags(fs, true)
	check := fs.Bool("check", false, "replay the functions' live runs against the new code first, and register nothing if one would break")
	force := fs.Bool("force", false, "with --check, register even if runs would break")
	dryRun := fs.Bool("dry-run", false, "check only (as --check), register nothing")
	sample := fs.Int("sample", 0, "with --check, the live runs replayed per function, `N` from 1 to 100 (gateway default 20)")
	pos, err := parseCommand(fs, args, "URL")
	if err != nil {
		return err
	}
	cl, err := c.client(cf, nil)
	if err != nil {
		return err
	}
	params := &protocol.SyncAppParams{}
	if *check {
		params.Check = check
	}
	if *force {
		params.Force = force
	}
	if *dryRun {
		params.DryRun = dryRun
	}
	if *sample != 0 {
		params.CheckSample = sample
	}
	timeout := requestTimeout
	if *check || *dryRun {
		timeout += 90 * time.Second // a check takes at most a minute on the gateway
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := cl.SyncAppWithResponse(ctx, params, protocol.AppSync{URL: pos[0]})
	if err != nil {
		return requestError("sync app "+pos[0], err)
	}
	if resp.ApplicationProblemJSON409 != nil {
		if cf.json {
			if err := printRaw(c.stdout, resp.Body); err != nil {
				return err
			}
		} else if chk := resp.ApplicationProblemJSON409.Check; chk != nil { // none: another check was running
			if err := writeAppCheck(c.stdout, chk); err != nil {
				return err
			}
		}
		return problemError(resp.StatusCode(), resp.Body)
	}
	if err := expect(resp, http.StatusOK); err != nil {
		return err
	}
	if cf.json {
		if err := printRaw(c.stdout, resp.Body); err != nil {
			return err
		}
		if resp.JSON200 != nil {
			return dryRunError(resp.JSON200.Check)
		}
		return nil
	}
	if resp.JSON200 == nil {
		return fmt.Errorf("sync app %s: unexpected response %q", pos[0], resp.ContentType())
	}
	if chk := resp.JSON200.Check; chk != nil {
		if err := writeAppCheck(c.stdout, chk); err != nil {
			return err
		}
		if !chk.Registered {
			if _, err := fmt.Fprintf(c.stdout, "dry run: nothing registered\n"); err != nil {
				return err
			}
			return dryRunError(chk)
		}
	}
	fns := resp.JSON200.Functions
	changed := 0
	for _, f := range fns {
		if f.Changed {
			changed++
		}
	}
	fmt.Fprintf(c.stdout, "synced %s from %s: %d changed (new revision), %d unchanged\n",
		plural(len(fns), "function", "functions"), pos[0], changed, len(fns)-changed)
	if len(fns) == 0 {
		return nil
	}
	return writeSyncedTable(c.stdout, fns)
}

// dryRunError is the error of a dry run whose check c is not ok (nil when it is ok,
// or when there was no check): the command then exits 1 as a refused check does.
func dryRunError(c *protocol.AppCheck) error {
	if c == nil || c.Ok || c.Registered {
		return nil
	}
	if c.Reason != nil {
		return fmt.Errorf("dry run: the check is not ok: %s", *c.Reason)
	}
	var parts []string
	for _, f := range c.Functions {
		if len(f.Broken) > 0 {
			parts = append(parts, fmt.Sprintf("%s: %d of %d live runs checked", f.Function, len(f.Broken), f.Checked))
		}
	}
	return fmt.Errorf("dry run: the check is not ok: the new code would break live runs (%s)", strings.Join(parts, "; "))
}
