package gateway_test

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// The function process of TestStepDurableBeforeRunReturns, run as this test binary
// again (the os/exec tests' helper-process pattern) with these variables set.
const (
	envFunctionAddr = "STEPGATE_TEST_FUNCTION_ADDR" // where it serves
	envFunctionKey  = "STEPGATE_TEST_FUNCTION_KEY"  // the tenant's public key, hex
	envFunctionLog  = "STEPGATE_TEST_FUNCTION_LOG"  // the file its steps' functions append to
)

// TestStepDurableBeforeRunReturns kills a function's process with SIGKILL after
// step.Run returned a step's output and before the next step starts: the moment code
// after the step has seen its result (guarantee 4). The retried invocation, in a new
// process, replays the step: its function ran once. The step's entry must have been
// journaled before Run returned, since the process that held it is gone; with lazy
// checkpoints (functions.LazyCheckpoints, step.Lazy) it is not, and the step runs again,
// which the subtests of the opt-ins show.
func TestStepDurableBeforeRunReturns(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	keys, err := s.Keys.Keys(t.Context(), auth.DefaultTenant)
	require.NoError(t, err)
	key := hex.EncodeToString(keys[0].PublicKey)

	for _, tt := range []struct {
		function string
		runs     int // how many times the charge's function runs
	}{
		{"durable.charge", 1},
		{"durable.charge_lazy_step", 2},
		{"durable.charge_lazy_function", 2},
	} {
		// One after another: each subtest syncs the app of its own process, which
		// registers every durable.* function at its URL.
		t.Run(tt.function, func(t *testing.T) {
			fp := startFunctionProcess(t, key)
			s.Sync(t, fp.url)

			c := s.Client(t, s.Token)
			started, err := c.StartRunWithResponse(t.Context(), tt.function, nil, protocol.AnyJSON(`{"order":"42"}`))
			require.NoError(t, err)
			require.NotNil(t, started.JSON202, "%d %s", started.StatusCode(), started.Body)
			id := started.JSON202.ID

			// The first invocation's process kills itself after Run returned; a new
			// process serves the retry on the same address.
			fp.awaitExit(t)
			fp.restart(t)

			run := stack.AwaitStatus(t, c, id, protocol.RunStatusCompleted)
			require.JSONEq(t, `"ch_42"`, string(*run.Output))
			require.Equal(t, tt.runs, strings.Count(fp.log(t), "charge\n"), "how often charge's function ran: %q", fp.log(t))
			require.Equal(t, 1, strings.Count(fp.log(t), "ship\n"), fp.log(t))
		})
	}
}

// functionProcess is the helper process serving the durable.* functions.
type functionProcess struct {
	addr, url, key, logPath string
	cmd                     *exec.Cmd
	exited                  chan error
}

func startFunctionProcess(t *testing.T, key string) *functionProcess {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	fp := &functionProcess{addr: addr, url: "http://" + addr + "/", key: key, logPath: filepath.Join(t.TempDir(), "steps.log")}
	fp.restart(t)
	return fp
}

// restart starts the process (again) and waits until it serves.
func (fp *functionProcess) restart(t *testing.T) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFunctionProcess$")
	cmd.Env = append(os.Environ(), envFunctionAddr+"="+fp.addr, envFunctionKey+"="+fp.key, envFunctionLog+"="+fp.logPath)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	fp.cmd, fp.exited = cmd, exited
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	require.Eventually(t, func() bool {
		resp, err := http.Get(fp.url)
		if err == nil {
			resp.Body.Close()
		}
		return err == nil
	}, 30*time.Second, 10*time.Millisecond, "the function process never served")
}

// awaitExit waits for the process to kill itself.
func (fp *functionProcess) awaitExit(t *testing.T) {
	t.Helper()
	select {
	case err := <-fp.exited:
		fp.exited <- err // for the cleanup
		var ee *exec.ExitError
		require.True(t, errors.As(err, &ee), "the function process ended with %v, not a signal", err)
		require.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal())
	case <-time.After(60 * time.Second):
		t.Fatal("the function process was not killed within 60 s")
	}
}

func (fp *functionProcess) log(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(fp.logPath)
	require.NoError(t, err)
	return string(b)
}

// TestFunctionProcess is not a test: it is the function process of
// TestStepDurableBeforeRunReturns, and returns at once unless that test started it.
func TestFunctionProcess(t *testing.T) {
	addr := os.Getenv(envFunctionAddr)
	if addr == "" {
		return
	}
	key, err := hex.DecodeString(os.Getenv(envFunctionKey))
	if err != nil || len(key) != ed25519.PublicKeySize {
		t.Fatalf("bad %s: %v", envFunctionKey, err)
	}
	logPath := os.Getenv(envFunctionLog)
	app := functions.New(functions.Config{PublicKeys: []ed25519.PublicKey{key}})
	charge := func(lazy bool) func(ctx context.Context, in map[string]string) (string, error) {
		return func(ctx context.Context, in map[string]string) (string, error) {
			var opts []step.Option
			if lazy {
				opts = append(opts, step.Lazy())
			}
			id, err := step.Run(ctx, "charge", func(ctx context.Context) (string, error) {
				appendLine(logPath, "charge")
				return "ch_" + in["order"], nil
			}, opts...)
			if err != nil {
				return "", err
			}
			if functions.RunFrom(ctx).Attempt == 1 {
				// Code after the step has its result; the process dies here.
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {}
			}
			_, err = step.Run(ctx, "ship", func(ctx context.Context) (bool, error) {
				appendLine(logPath, "ship")
				return true, nil
			})
			return id, err
		}
	}
	// Invocations refused while the process restarts are retried, soon and often.
	quick := []functions.Option{functions.InvocationAttempts(100), functions.InvocationBackoff(20*time.Millisecond, 250*time.Millisecond)}
	functions.Register(app, "durable.charge", charge(false), quick...)
	functions.Register(app, "durable.charge_lazy_step", charge(true), quick...)
	functions.Register(app, "durable.charge_lazy_function", charge(false), append(quick, functions.LazyCheckpoints())...)
	srv := &http.Server{Addr: addr, Handler: app, ReadHeaderTimeout: 10 * time.Second}
	t.Fatal(srv.ListenAndServe())
}

// appendLine appends line to the file at path, durably before it returns.
func appendLine(path, line string) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY|os.O_SYNC, 0o644)
	if err != nil {
		panic(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		panic(err)
	}
}
