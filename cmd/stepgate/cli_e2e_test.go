package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// devHelperEnv makes TestDevHelper run "stepgate dev" instead of testing, so
// that the end-to-end test can start a real gateway as a child process: the
// test binary itself, the way os/exec tests do.
const devHelperEnv = "STEPGATE_TEST_DEV_HELPER"

// TestDevHelper is not a test: run as a child of TestEndToEnd it is
// "stepgate dev" with the arguments after "--".
func TestDevHelper(t *testing.T) {
	if os.Getenv(devHelperEnv) != "1" {
		t.Skip("helper process for TestEndToEnd")
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, args, os.Getenv, os.Stdout, os.Stderr); err != nil {
		os.Exit(report(os.Stderr, err))
	}
	os.Exit(0)
}

// devGateway is a "stepgate dev" child process serving on a free port.
type devGateway struct {
	url         string
	token       string
	databaseURL string
	dir         string // its --dir
	publicKeys  string // the STEPGATE_PUBLIC_KEYS it printed
	appURL      string // where its example functions are served
}

// lockedBuffer collects a child's output from one goroutine for another.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startDev starts "stepgate dev" on a free port with its private Postgres
// in a temporary directory, waits for its token and for /healthz to be 200,
// and stops it (SIGINT, then kill) in Cleanup.
func startDev(t *testing.T) *devGateway {
	t.Helper()
	dir := t.TempDir()
	// The private Postgres runs as the postgres OS user when we are root; the
	// parent of t.TempDir is private to its owner.
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	cmd := exec.Command(os.Args[0], "-test.run=^TestDevHelper$", "--", "dev", "--addr", addr, "--dir", dir)
	cmd.Env = append(os.Environ(), devHelperEnv+"=1", "DATABASE_URL=")
	var stderr lockedBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	exited := make(chan struct{}) // closed when the child has exited; then waitErr is set
	var waitErr error
	tokens := make(chan string, 1)
	var out lockedBuffer
	var publicKeys, appURL atomic.Value
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			out.Write([]byte(line + "\n"))
			if k, ok := strings.CutPrefix(line, "STEPGATE_PUBLIC_KEYS="); ok {
				publicKeys.Store(strings.Fields(k)[0])
			}
			if i := strings.Index(line, "(served at "); i >= 0 {
				appURL.Store(strings.TrimSuffix(line[i+len("(served at "):], ")"))
			}
			if tok, ok := strings.CutPrefix(line, "STEPGATE_TOKEN="); ok {
				select {
				case tokens <- tok:
				default:
				}
			}
		}
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("stepgate dev stdout:\n%s\nstderr:\n%s", out.String(), stderr.String())
		}
	})

	g := &devGateway{
		url:         "http://" + addr,
		dir:         dir,
		databaseURL: (&url.URL{Scheme: "postgres", User: url.User("postgres"), Path: "/stepgate", RawQuery: url.Values{"host": {filepath.Join(dir, "pg")}, "port": {"5432"}, "sslmode": {"disable"}}.Encode()}).String(),
	}
	deadline := time.After(2 * time.Minute)
	select {
	case g.token = <-tokens:
	case <-exited:
		t.Fatalf("stepgate dev exited before printing its token: %v", waitErr)
	case <-deadline:
		t.Fatal("stepgate dev printed no token within 2 minutes")
	}

	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := http.Get(g.url + "/healthz")
		if err == nil {
			resp.Body.Close()
			keys, _ := publicKeys.Load().(string)
			app, _ := appURL.Load().(string)
			if resp.StatusCode == http.StatusOK && keys != "" && app != "" {
				g.publicKeys, g.appURL = keys, app
				return g
			}
		}
		select {
		case <-tick.C:
		case <-exited:
			t.Fatalf("stepgate dev exited: %v", waitErr)
		case <-deadline:
			t.Fatalf("GET %s/healthz is not 200 within 2 minutes", g.url)
		}
	}
}

// TestEndToEnd drives a real "stepgate dev" gateway with the command line.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts stepgate dev with a private Postgres")
	}
	g := startDev(t)
	env := map[string]string{"STEPGATE_URL": g.url, "STEPGATE_TOKEN": g.token}
	cmd := func(t *testing.T, args ...string) (string, error) {
		t.Helper()
		c, stdout, _ := newTestCLI(env, "")
		err := c.run(t.Context(), args)
		return stdout.String(), err
	}

	t.Run("FunctionsList", func(t *testing.T) {
		t.Parallel()
		out, err := cmd(t, "functions", "list")
		require.NoError(t, err)
		require.Regexp(t, `(?m)^hello +\d+ +http://`, out)
		require.Regexp(t, `(?m)^orders\.checkout +\d+ +http://\S+ +30s$`, out)
	})

	t.Run("FunctionsQueue", func(t *testing.T) {
		t.Parallel()
		_, err := cmd(t, "invoke", "orders.fulfil", "--data", `{"customer_id":"c-e2e","order_id":"o-e2e"}`, "--wait", "20s")
		require.NoError(t, err)
		out, err := cmd(t, "functions", "queue", "orders.fulfil")
		require.NoError(t, err)
		require.Regexp(t, `^orders\.fulfil: \d+ running, \d+ queued, \d+ held\n`, out)
		_, err = cmd(t, "functions", "queue", "nope")
		require.EqualError(t, err, `404 Not Found: function "nope" is not registered`)
	})

	t.Run("FunctionsStats", func(t *testing.T) {
		t.Parallel()
		// hello.limited: no other subtest runs it, so its counts are these runs'.
		out, err := cmd(t, "functions", "stats", "hello.limited")
		require.NoError(t, err)
		require.Equal(t, "no runs in the last 1h\n", out)
		for range 2 {
			_, err = cmd(t, "invoke", "hello.limited", "--data", `{"name":"stats"}`, "--wait", "20s")
			require.NoError(t, err)
		}
		out, err = cmd(t, "functions", "stats", "hello.limited", "--window", "1d")
		require.NoError(t, err)
		require.Regexp(t, `^AT +STARTED +COMPLETED +FAILED +CANCELLED +P50 +P95 +WAIT P50 +WAIT P95 +QUEUE\n\d\d:\d\d +2 +2 +0 +0 +\d+ms +\d+ms +\d+ms +\d+ms +0\n$`, out)
		_, err = cmd(t, "functions", "stats", "hello.limited", "--window", "2h")
		require.ErrorContains(t, err, `window`)
		_, err = cmd(t, "functions", "stats", "nope")
		require.ErrorContains(t, err, `404 Not Found`)
	})

	t.Run("PoolSizedToTheCores", func(t *testing.T) {
		t.Parallel()
		// Its Postgres shares this machine: the pools hold localPoolSize connections.
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, g.url+"/metrics", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+g.token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		total := 0
		for _, m := range regexp.MustCompile(`(?m)^stepgate_db_pool_max_conns\{[^}]*\} (\d+)$`).FindAllStringSubmatch(string(body), -1) {
			n, err := strconv.Atoi(m[1])
			require.NoError(t, err)
			total += n
		}
		require.Equal(t, int(localPoolSize(runtime.NumCPU())), total, "the system and API pools' bounds")
	})

	t.Run("NotRegistered", func(t *testing.T) {
		t.Parallel()
		_, err := cmd(t, "invoke", "nope", "--wait")
		require.EqualError(t, err, `404 Not Found: function "nope" is not registered`)
	})

	t.Run("BadToken", func(t *testing.T) {
		t.Parallel()
		_, err := cmd(t, "functions", "list", "--token", "not-a-jwt")
		var aerr *apiError
		require.ErrorAs(t, err, &aerr)
		require.Equal(t, http.StatusUnauthorized, aerr.Status)
	})

	t.Run("InvokeAndReadTheJournal", func(t *testing.T) {
		t.Parallel()
		out, err := cmd(t, "invoke", "orders.checkout", "--data", `{"item":"book","sleep_ms":20}`, "--wait", "20s", "--idempotency-key", "e2e-"+t.Name())
		require.NoError(t, err)
		first, output, ok := strings.Cut(out, "\n")
		require.True(t, ok)
		fields := strings.Fields(first)
		require.Len(t, fields, 3, out)
		require.Equal(t, "completed", fields[2])
		require.Contains(t, output, `"tracking"`)

		out, err = cmd(t, "runs", "get", fields[1])
		require.NoError(t, err)
		require.Regexp(t, `(?m)^function +orders\.checkout@\d+$`, out)
		require.Regexp(t, `(?m)^identity +subject dev, tenant default, roles admin,stepgate-operator$`, out)
		require.Regexp(t, `(?m)^  1  step +reserve +\{"order_id":\S+ +attempt 1 `, out)
		require.Regexp(t, `(?m)^  3  sleep +cool-off +until `, out)
		require.Regexp(t, `(?m)^  4  step +ship `, out)
		// A clean run with a sleep: two invocations, none failed, no recovery.
		require.Regexp(t, `(?m)^status +completed\ninvocations +2\nfailed invocations +0\nrecoveries +0$`, out)

		out, err = cmd(t, "runs", "get", fields[1], "--json")
		require.NoError(t, err)
		var detail struct {
			Status  string            `json:"status"`
			Journal []json.RawMessage `json:"journal"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &detail))
		require.Equal(t, "completed", detail.Status)
		require.Len(t, detail.Journal, 4)

		out, err = cmd(t, "runs", "list", "--function", "orders.checkout", "--limit", "500")
		require.NoError(t, err)
		require.Regexp(t, `(?m)^`+fields[1]+` +orders\.checkout +completed +2 +\d`, out, "its invocations, none failed")
	})

	t.Run("Keys", func(t *testing.T) {
		out, err := cmd(t, "keys")
		require.NoError(t, err)
		require.Contains(t, out, "# tenant default: your functions verify the gateway's requests with\nSTEPGATE_PUBLIC_KEYS="+g.publicKeys+"\n",
			"the key stepgate dev printed")
		out, err = cmd(t, "keys", "secrets")
		require.NoError(t, err)
		require.Regexp(t, `(?m)^STEPGATE_HMAC_SECRETS=[A-Za-z0-9_-]{43}$`, out)
		out, err = cmd(t, "keys", "rotate", "--overlap", "1h")
		require.NoError(t, err)
		require.Regexp(t, `STEPGATE_PUBLIC_KEYS=[A-Za-z0-9_-]{43},`+g.publicKeys, out, "the new key first, the old one still signing")
		out, err = cmd(t, "invoke", "hello", "--data", `{"name":"rotated"}`, "--wait", "20s")
		require.NoError(t, err)
		require.Contains(t, out, "Hello, rotated!", "the examples follow the rotation")
		_, err = cmd(t, "keys", "rotate", "--overlap", "forever")
		require.Error(t, err)
	})

	t.Run("ExamplesServeASecondTenant", func(t *testing.T) {
		c, stdout, _ := newTestCLI(map[string]string{}, "")
		require.NoError(t, c.run(t.Context(), []string{"token", "create", "--sub", "sam", "--tenant", "second", "--role", "developer", "--dir", g.dir}))
		tok := strings.TrimSpace(strings.TrimPrefix(stdout.String(), "STEPGATE_TOKEN="))
		second := map[string]string{"STEPGATE_URL": g.url, "STEPGATE_TOKEN": tok}
		c, _, _ = newTestCLI(second, "")
		require.NoError(t, c.run(t.Context(), []string{"apps", "sync", g.appURL}))
		c, stdout, _ = newTestCLI(second, "")
		require.NoError(t, c.run(t.Context(), []string{"invoke", "hello", "--data", `{"name":"second"}`, "--wait", "20s"}))
		require.Contains(t, stdout.String(), "Hello, second!")
	})

	t.Run("InvokeWithoutWait", func(t *testing.T) {
		t.Parallel()
		out, err := cmd(t, "invoke", "hello", "--data", `{"name":"e2e"}`)
		require.NoError(t, err)
		require.Regexp(t, `^run \S+ is (queued|running|completed)\nattach: stepgate runs get \S+\n$`, out)
	})

	t.Run("Bench", func(t *testing.T) {
		t.Parallel()
		out, err := cmd(t, "bench", "--functions", "hello", "--concurrency", "2", "--duration", "300ms", "--warmup", "0s",
			"--floor-duration", "300ms", "--database-url", g.databaseURL, "--json")
		require.NoError(t, err)
		var rep struct {
			Floor *struct {
				Fsync   string `json:"fsync"`
				Latency struct {
					N int `json:"n"`
				} `json:"latency"`
			} `json:"floor"`
			Cells []struct {
				Runs          int     `json:"runs"`
				Errors        int     `json:"errors"`
				P50FloorRatio float64 `json:"p50_floor_ratio"`
			} `json:"cells"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &rep))
		require.NotNil(t, rep.Floor)
		require.NotEmpty(t, rep.Floor.Fsync)
		require.Positive(t, rep.Floor.Latency.N)
		require.Len(t, rep.Cells, 1)
		require.Positive(t, rep.Cells[0].Runs)
		require.Zero(t, rep.Cells[0].Errors)
		require.Positive(t, rep.Cells[0].P50FloorRatio)
	})
}
