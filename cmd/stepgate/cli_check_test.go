package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// TestAppsSyncCheck runs "stepgate apps sync URL --check" against a real gateway: a
// change that reorders two steps while a run is suspended between them is refused (the
// command fails, naming the run and the divergence, and registers nothing), --dry-run
// registers nothing and fails when the check is not ok (exit status 1, as --check's
// refusal), --force registers, and "functions get" shows the last check.
func TestAppsSyncCheck(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	token := s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}})
	api := s.Client(t, token)
	app := func(first, second string) string {
		a := s.NewApp()
		functions.Register(a, "order", func(ctx context.Context, _ struct{}) (string, error) {
			if _, err := step.Run(ctx, first, func(context.Context) (int, error) { return 1, nil }); err != nil {
				return "", err
			}
			if err := step.Sleep(ctx, "cool off", time.Hour); err != nil {
				return "", err
			}
			return step.Run(ctx, second, func(context.Context) (string, error) { return "ok", nil })
		})
		return s.ServeApp(t, a)
	}
	v1, v2 := app("reserve", "charge"), app("charge", "reserve")
	run := func(args ...string) (string, error) {
		c, stdout, _ := newTestCLI(map[string]string{"STEPGATE_URL": s.URL, "STEPGATE_TOKEN": token}, "")
		err := c.run(t.Context(), args)
		return stdout.String(), err
	}
	out, err := run("apps", "sync", v1, "--check")
	require.NoError(t, err)
	require.Contains(t, out, "check: ok: no live run would break")
	require.Contains(t, out, "synced 1 function from "+v1)

	started, err := api.StartRunWithBodyWithResponse(t.Context(), "order", &protocol.StartRunParams{}, "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, started.StatusCode(), string(started.Body))
	id := started.JSON202.ID
	stack.AwaitStatus(t, api, id, protocol.RunStatusSuspended)

	out, err = run("apps", "sync", v2, "--check")
	require.ErrorContains(t, err, "409 Conflict: nothing was registered")
	require.Contains(t, out, "check: NOT OK: live runs would break")
	require.Contains(t, out, "order run "+id+` (revision 1): at seq 1 the journal holds step "reserve", the new code asks for step "charge"`)
	require.NotContains(t, out, "synced")

	// A dry run answers 200 whatever it finds; the command fails when the check is not
	// ok, so that a CI step gates on its exit status, and succeeds when it is.
	out, err = run("apps", "sync", v2, "--dry-run", "--sample", "3")
	require.EqualError(t, err, "dry run: the check is not ok: the new code would break live runs (order: 1 of 1 live runs checked)")
	require.Equal(t, 1, report(io.Discard, err))
	require.Contains(t, out, "check: NOT OK: live runs would break")
	require.Contains(t, out, "dry run: nothing registered")
	out, err = run("functions", "get", "order")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^revision +1$`, out)
	require.Contains(t, out, "1 live, 1 checked, 0 clean, 1 broken, not registered")
	require.Contains(t, out, "order run "+id)

	out, err = run("apps", "sync", v2, "--check", "--dry-run", "--json")
	require.ErrorContains(t, err, "dry run: the check is not ok")
	require.Contains(t, out, `"ok":false`)
	out, err = run("apps", "sync", v1, "--check", "--dry-run")
	require.NoError(t, err)
	require.Contains(t, out, "check: ok: no live run would break")
	require.Contains(t, out, "dry run: nothing registered")

	// The process's exit status, as a CI step sees it.
	env := []string{"STEPGATE_URL=" + s.URL, "STEPGATE_TOKEN=" + token}
	code, stderr := runProcess(t, env, "apps", "sync", v2, "--check", "--dry-run")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "stepgate: dry run: the check is not ok")
	code, stderr = runProcess(t, env, "apps", "sync", v2, "--check")
	require.Equal(t, 1, code, stderr)
	require.Contains(t, stderr, "409 Conflict: nothing was registered")
	code, stderr = runProcess(t, env, "apps", "sync", v1, "--dry-run")
	require.Equal(t, 0, code, stderr)

	out, err = run("apps", "sync", v2, "--check", "--force")
	require.NoError(t, err) // it registered, as --force asked
	require.Contains(t, out, "check: NOT OK: live runs would break")
	require.Contains(t, out, "synced 1 function")
	out, err = run("functions", "get", "order")
	require.NoError(t, err)
	require.Contains(t, out, "registered with --force")

	_, err = run("apps", "sync", v2, "--force")
	require.ErrorContains(t, err, "400 Bad Request: force and check_sample go with check=true")
}

// runProcess runs the stepgate command line args in a child process (the test binary,
// as TestDevHelper) with env added to the test's environment, and returns its exit
// status and what it wrote to standard error.
func runProcess(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), os.Args[0], append([]string{"-test.run=^TestDevHelper$", "--"}, args...)...)
	cmd.Env = append(append(os.Environ(), devHelperEnv+"=1"), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), stderr.String()
	}
	require.NoError(t, err, stderr.String())
	return 0, stderr.String()
}
