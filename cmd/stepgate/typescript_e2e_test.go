package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// tsSDKDir is the TypeScript SDK, from this package's directory.
const tsSDKDir = "../../sdk/typescript"

// buildTypeScriptSDK compiles the TypeScript SDK and its examples into its dist/, or skips
// the test when Node 20 or later, or the SDK's devDependencies (npm ci), are missing.
func buildTypeScriptSDK(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("starts stepgate dev with a private Postgres and a Node server")
	}
	if os.Getenv("STEPGATE_SKIP_TS_E2E") == "1" {
		t.Skip("STEPGATE_SKIP_TS_E2E=1: test.sh runs it in a step of its own")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the TypeScript SDK's end-to-end test needs Node 20 or later")
	}
	out, err := exec.Command(node, "--version").Output()
	require.NoError(t, err)
	major, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(strings.TrimSpace(string(out)), "v"), ".", 2)[0])
	if major < 20 {
		t.Skipf("node %s is older than 20, which the TypeScript SDK needs", strings.TrimSpace(string(out)))
	}
	dir, err := filepath.Abs(tsSDKDir)
	require.NoError(t, err)
	tsc := filepath.Join(dir, "node_modules", ".bin", "tsc")
	if _, err := os.Stat(tsc); err != nil {
		t.Skipf("the TypeScript SDK's devDependencies are not installed: run npm ci in %s", dir)
	}
	build := exec.Command(tsc, "-p", dir)
	build.Dir = dir
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("tsc -p %s: %v\n%s", dir, err, out)
	}
	return dir
}

// startNodeExamples serves the TypeScript SDK's examples (examples/node-server.ts) on a
// free port, verifying the gateway's requests with publicKeys, and stops the process in
// Cleanup. It returns the app's URL.
func startNodeExamples(t *testing.T, dir, publicKeys string) string {
	url, _ := startNodeProcess(t, dir, "node-server.js", publicKeys)
	return url
}

// startNodeApp serves the compiled example file (under dist/examples) with Node on a free
// port (PORT), as startNodeExamples does.
func startNodeApp(t *testing.T, dir, file, publicKeys string) string {
	url, _ := startNodeProcess(t, dir, file, publicKeys)
	return url
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) *net.TCPAddr {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr)
}

// stopInCleanup interrupts the started cmd when t ends, and kills it if it has not
// exited (closing exited) 10s later.
func stopInCleanup(t *testing.T, cmd *exec.Cmd, exited <-chan struct{}) {
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
}

// startNodeProcess is startNodeApp, which also returns the process id; env adds
// variables (KEY=value) to the process's environment.
func startNodeProcess(t *testing.T, dir, file, publicKeys string, env ...string) (string, int) {
	t.Helper()
	port := freeAddr(t).Port
	cmd := exec.Command("node", filepath.Join(dir, "dist", "examples", file))
	cmd.Env = append(os.Environ(), "PORT="+strconv.Itoa(port), "STEPGATE_PUBLIC_KEYS="+publicKeys)
	cmd.Env = append(cmd.Env, env...)
	var output lockedBuffer
	cmd.Stderr = &output
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	ready := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			output.Write([]byte(sc.Text() + "\n"))
			if strings.Contains(sc.Text(), "serv") && strings.Contains(sc.Text(), "/api/stepgate") {
				close(ready)
			}
		}
		_ = cmd.Wait()
		close(exited)
	}()
	stopInCleanup(t, cmd, exited)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node examples server output:\n%s", output.String())
		}
	})
	select {
	case <-ready:
	case <-exited:
		t.Fatalf("the node examples server exited:\n%s", output.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the node examples server did not start within 30s:\n%s", output.String())
	}
	return fmt.Sprintf("http://127.0.0.1:%d/api/stepgate", port), cmd.Process.Pid
}

// journalEntry is what the test reads of a run's journal.
type journalEntry struct {
	Seq     int             `json:"seq"`
	Kind    string          `json:"kind"`
	Name    string          `json:"name"`
	Attempt int             `json:"attempt"`
	Output  json.RawMessage `json:"output"`
}

// TestTypeScriptSDK follows the TypeScript SDK's README on a real gateway: it serves the
// README's tour and the SDK's examples with Node, registers them with `stepgate apps sync`, invokes them and
// reads their journals: three steps and a sleep, a step's retry, a child run, the
// caller's identity, parallel steps, waits combined by step.waitFirst and step.waitAll,
// an invocation time limit (continue), a stream,
// compensations, a patch, a sleep waited out in the process, a step whose result is
// durable before step.run resolves though the process dies right after, and an oversized
// body refused with 413 without being buffered.
func TestTypeScriptSDK(t *testing.T) {
	dir := buildTypeScriptSDK(t)
	g := startDev(t)
	appURL := startNodeExamples(t, dir, g.publicKeys)

	env := map[string]string{"STEPGATE_URL": g.url, "STEPGATE_TOKEN": g.token}
	cmd := func(t *testing.T, args ...string) string {
		t.Helper()
		c, stdout, _ := newTestCLI(env, "")
		require.NoError(t, c.run(t.Context(), args), "stepgate %s", strings.Join(args, " "))
		return stdout.String()
	}
	// invoke runs fn with input, waits for it to complete and returns its output and run id.
	invoke := func(t *testing.T, fn, input string) (string, string) {
		t.Helper()
		out := cmd(t, "invoke", fn, "--data", input, "--wait", "60s")
		first, output, _ := strings.Cut(out, "\n")
		fields := strings.Fields(first)
		require.Len(t, fields, 3, out)
		require.Equal(t, "completed", fields[2], out)
		return strings.TrimSpace(output), fields[1]
	}
	journal := func(t *testing.T, id string) []journalEntry {
		t.Helper()
		var detail struct {
			Status  string         `json:"status"`
			Journal []journalEntry `json:"journal"`
		}
		require.NoError(t, json.Unmarshal([]byte(cmd(t, "runs", "get", id, "--json")), &detail))
		require.Equal(t, "completed", detail.Status)
		return detail.Journal
	}
	kinds := func(j []journalEntry) []string {
		var out []string
		for _, e := range j {
			out = append(out, fmt.Sprintf("%d %s %s", e.Seq, e.Kind, e.Name))
		}
		return out
	}

	out := cmd(t, "apps", "sync", appURL)
	require.Contains(t, out, "synced 19 functions from "+appURL)
	out = cmd(t, "functions", "list")
	require.Regexp(t, `(?m)^ts\.checkout +\d+ +`+regexp.QuoteMeta(appURL+"/ts.checkout")+` +30s$`, out)

	t.Run("AnOversizedBodyIsRefusedUnbuffered", func(t *testing.T) {
		t.Parallel()
		requireBodyBound(t, dir)
	})

	t.Run("TheREADMETour", func(t *testing.T) {
		// sdk/typescript/README.md's five-minute tour, whose code is examples/tour.ts.
		t.Parallel()
		tourURL := startNodeApp(t, dir, "tour.js", g.publicKeys)
		require.Contains(t, cmd(t, "apps", "sync", tourURL), "synced 1 function from "+tourURL)
		output, id := invoke(t, "checkout", `{"item":"book"}`)
		require.JSONEq(t, `{"order":"o-book","charged":42,"tracking":"TRACK-o-book","by":"dev"}`, output)
		out := cmd(t, "runs", "get", id)
		require.Regexp(t, `(?m)^  1  step +reserve +\{"id":"o-book"\} +attempt 1 `, out)
		require.Regexp(t, `(?m)^  2  sleep +cool-off +until `, out)
		require.Regexp(t, `(?m)^  4  step +ship +"TRACK-o-book" `, out)
		require.Equal(t, []string{"1 step reserve", "2 sleep cool-off", "3 step charge", "4 step ship"}, kinds(journal(t, id)))
	})

	t.Run("ThreeStepsAndASleep", func(t *testing.T) {
		t.Parallel()
		output, id := invoke(t, "ts.checkout", `{"item":"book","sleep_ms":300}`)
		require.JSONEq(t, `{"orderId":"o-book","charged":42,"tracking":"TRACK-o-book"}`, output)
		j := journal(t, id)
		require.Equal(t, []string{"1 step reserve", "2 step charge", "3 sleep cool-off", "4 step ship"}, kinds(j))
		require.JSONEq(t, `{"orderId":"o-book","item":"book"}`, string(j[0].Output))
	})

	t.Run("BadInputFailsTheRun", func(t *testing.T) {
		t.Parallel()
		c, stdout, _ := newTestCLI(env, "")
		err := c.run(t.Context(), []string{"invoke", "ts.checkout", "--data", `{"sleep_ms":1}`, "--wait", "60s"})
		require.Error(t, err)
		require.Contains(t, stdout.String()+err.Error(), "item is required")
	})

	t.Run("Retry", func(t *testing.T) {
		t.Parallel()
		output, id := invoke(t, "ts.flaky", `{}`)
		require.JSONEq(t, `{"succeededOnAttempt":2}`, output)
		j := journal(t, id)
		require.Equal(t, []string{"1 step call-partner"}, kinds(j))
		require.Equal(t, 2, j[0].Attempt)
	})

	t.Run("ChildRun", func(t *testing.T) {
		t.Parallel()
		output, id := invoke(t, "ts.parent", `{"n":21}`)
		require.JSONEq(t, `{"doubled":42}`, output)
		j := journal(t, id)
		require.Equal(t, []string{"1 invoke double", "2 event ts.doubled"}, kinds(j))
		require.JSONEq(t, `42`, string(j[0].Output))
		out := cmd(t, "runs", "list", "--function", "ts.double")
		require.Contains(t, out, "completed")
	})

	t.Run("Identity", func(t *testing.T) {
		t.Parallel()
		output, id := invoke(t, "ts.whoami", `{}`)
		var who struct {
			Subject, Tenant, RunID, At, ID string
			Roles                          []string
		}
		require.NoError(t, json.Unmarshal([]byte(output), &who))
		require.Equal(t, "dev", who.Subject)
		require.Equal(t, "default", who.Tenant)
		require.Contains(t, who.Roles, "admin")
		require.Equal(t, id, who.RunID)
		j := journal(t, id)
		require.Equal(t, []string{"1 step at", "2 step id"}, kinds(j))
		require.JSONEq(t, strconv.Quote(who.ID), string(j[1].Output))
	})

	t.Run("ParallelSteps", func(t *testing.T) {
		t.Parallel()
		output, id := invoke(t, "ts.parallel", `{}`)
		require.JSONEq(t, `"ABC"`, output)
		require.Equal(t, []string{"1 step part-a", "2 step part-b", "3 step part-c", "4 step join"}, kinds(journal(t, id)))
	})

	t.Run("WaitForEvent", func(t *testing.T) {
		t.Parallel()
		out := cmd(t, "invoke", "ts.await_payment", "--data", `{"order_id":"o-e2e"}`)
		m := regexp.MustCompile(`^run (\S+) is`).FindStringSubmatch(out)
		require.NotNil(t, m, out)
		id := m[1]
		// status polls the run until it is status (a deadline, no sleeps to wait).
		status := func(want string) {
			t.Helper()
			deadline := time.Now().Add(30 * time.Second)
			for {
				var detail struct {
					Status string `json:"status"`
				}
				require.NoError(t, json.Unmarshal([]byte(cmd(t, "runs", "get", id, "--json")), &detail))
				if detail.Status == want {
					return
				}
				require.True(t, time.Now().Before(deadline), "run %s is %s, not %s, after 30s", id, detail.Status, want)
				select {
				case <-t.Context().Done():
					t.Fatal(t.Context().Err())
				case <-time.After(50 * time.Millisecond):
				}
			}
		}
		status("suspended")
		cmd(t, "events", "send", "ts.payment", `{"order_id":"o-other","amount":1}`)
		cmd(t, "events", "send", "ts.payment", `{"order_id":"o-e2e","amount":5}`)
		status("completed")
		j := journal(t, id)
		require.Equal(t, []string{"1 wait_event payment"}, kinds(j))
		var detail struct {
			Output json.RawMessage `json:"output"`
		}
		require.NoError(t, json.Unmarshal([]byte(cmd(t, "runs", "get", id, "--json")), &detail))
		require.JSONEq(t, `{"paid":5,"by":"dev"}`, string(detail.Output), "the event of its order, not the other one")
	})

	t.Run("Waits", func(t *testing.T) {
		t.Parallel()
		// start starts a run of fn with input without waiting, and returns its id.
		start := func(t *testing.T, fn, input string) string {
			out := cmd(t, "invoke", fn, "--data", input)
			m := regexp.MustCompile(`^run (\S+) is`).FindStringSubmatch(out)
			require.NotNil(t, m, out)
			return m[1]
		}
		// get reads the run id until it is status (a deadline, no sleeps to wait), and returns its output.
		get := func(t *testing.T, id, status string) json.RawMessage {
			deadline := time.Now().Add(30 * time.Second)
			for {
				var detail struct {
					Status string          `json:"status"`
					Output json.RawMessage `json:"output"`
				}
				require.NoError(t, json.Unmarshal([]byte(cmd(t, "runs", "get", id, "--json")), &detail))
				if detail.Status == status {
					return detail.Output
				}
				require.True(t, time.Now().Before(deadline), "run %s is %s, not %s, after 30s", id, detail.Status, status)
				select {
				case <-t.Context().Done():
					t.Fatal(t.Context().Err())
				case <-time.After(50 * time.Millisecond):
				}
			}
		}

		t.Run("AnEventBeforeTheTimer", func(t *testing.T) {
			t.Parallel()
			id := start(t, "ts.pay_or_expire", `{"order_id":"o-first"}`)
			get(t, id, "suspended")
			cmd(t, "events", "send", "ts.payment", `{"order_id":"o-first","amount":7}`)
			require.JSONEq(t, `{"paid":7,"by":"dev"}`, string(get(t, id, "completed")))
			// One wait_any at one seq; the chosen event took none.
			require.Equal(t, []string{"1 wait_any paid-or-expired"}, kinds(journal(t, id)))
		})

		t.Run("TheTimerWins", func(t *testing.T) {
			t.Parallel()
			output, id := invoke(t, "ts.pay_or_expire", `{"order_id":"o-never","timeout_ms":1000}`)
			require.JSONEq(t, `{"expired":true}`, output)
			require.Equal(t, []string{"1 wait_any paid-or-expired"}, kinds(journal(t, id)))
		})

		t.Run("AMessageBeforeTheCallback", func(t *testing.T) {
			t.Parallel()
			id := start(t, "ts.approval", `{}`)
			get(t, id, "suspended")
			cmd(t, "runs", "send", id, "cancel", `{"why":"changed my mind"}`)
			require.JSONEq(t, `{"cancelled":"changed my mind"}`, string(get(t, id, "completed")))
			require.Equal(t, []string{"1 callback approve", "2 value callback", "3 wait_any approve-or-cancel"}, kinds(journal(t, id)))
		})

		t.Run("TheCallbackBeforeAMessage", func(t *testing.T) {
			t.Parallel()
			id := start(t, "ts.approval", `{}`)
			get(t, id, "suspended")
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, g.url+"/v1/runs/"+id+"/values/callback", nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+g.token)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			var v struct {
				Value string `json:"value"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&v))
			_ = resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			cmd(t, "callbacks", "resolve", v.Value, `{"ok":true}`)
			require.JSONEq(t, `{"approved":true}`, string(get(t, id, "completed")))
			require.Equal(t, []string{"1 callback approve", "2 value callback", "3 wait_any approve-or-cancel"}, kinds(journal(t, id)))
		})

		t.Run("TwoChildRunsStartAtOnce", func(t *testing.T) {
			t.Parallel()
			output, id := invoke(t, "ts.fanout", `{"a":1,"b":2}`)
			require.JSONEq(t, `{"a":2,"b":4}`, output)
			// One invoke_all: both children at consecutive seqs, named by the first.
			j := journal(t, id)
			require.Equal(t, []string{"1 invoke double-a", "2 invoke double-a"}, kinds(j))
			require.JSONEq(t, `2`, string(j[0].Output))
			require.JSONEq(t, `4`, string(j[1].Output))
		})

		t.Run("ParallelStepsRaceAndAReplayPicksTheSame", func(t *testing.T) {
			t.Parallel()
			output, id := invoke(t, "ts.race", `{}`)
			var got struct {
				First  int    `json:"first"`
				Winner string `json:"winner"`
			}
			require.NoError(t, json.Unmarshal([]byte(output), &got))
			require.Equal(t, []string{"slow", "fast"}[got.First], got.Winner)
			// The choice is the step "pick"; the run went on after a sleep, in a new
			// invocation that replayed it.
			j := journal(t, id)
			require.Equal(t, []string{"1 step slow", "2 step fast", "3 step pick", "4 sleep settle"}, kinds(j))
			require.JSONEq(t, strconv.Itoa(got.First), string(j[2].Output))
		})

		t.Run("Requests", func(t *testing.T) {
			t.Parallel()
			id := start(t, "ts.counter", `{"n":2}`)
			get(t, id, "suspended")
			// request sends the request "add" with data and returns the run's answer to it.
			request := func(data string) (status string, reply json.RawMessage, rerr *struct{ Type, Message string }) {
				body := strings.NewReader(`{"name":"add","data":` + data + `}`)
				req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, g.url+"/v1/runs/"+id+"/requests?wait=30s", body)
				require.NoError(t, err)
				req.Header.Set("Authorization", "Bearer "+g.token)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				var got struct {
					Status string                          `json:"status"`
					Reply  json.RawMessage                 `json:"reply"`
					Error  *struct{ Type, Message string } `json:"error"`
				}
				require.NoError(t, json.NewDecoder(resp.Body).Decode(&got))
				require.Equal(t, http.StatusOK, resp.StatusCode, "%+v", got)
				return got.Status, got.Reply, got.Error
			}
			status, reply, rerr := request(`{"add":2}`)
			require.Equal(t, "replied", status)
			require.JSONEq(t, `{"total":2,"from":"dev"}`, string(reply))
			require.Nil(t, rerr)
			status, reply, rerr = request(`{"add":-1}`)
			require.Equal(t, "replied", status)
			require.Nil(t, reply)
			require.Equal(t, &struct{ Type, Message string }{"error", "cannot add a negative number"}, rerr)
			require.JSONEq(t, `2`, string(get(t, id, "completed")))
			// Each reply is named after the request its receive took.
			j := journal(t, id)
			require.Len(t, j, 4)
			require.Equal(t, []string{"1 receive request:add", "2 reply " + jsonID(t, j[0]), "3 receive request:add", "4 reply " + jsonID(t, j[2])}, kinds(j))
		})
	})

	t.Run("Stream", func(t *testing.T) {
		t.Parallel()
		output, id := invoke(t, "ts.tokens", `{}`)
		require.JSONEq(t, `{"words":2}`, output)
		require.Equal(t, []string{"1 step answer"}, kinds(journal(t, id)))
		// The failed attempt's chunks, then the retry's; nothing twice from the replays.
		chunks, end := readStream(t, g.url+"/v1/runs/"+id+"/streams/tokens", g.token)
		require.Equal(t, []string{`"thinking"`, `"Hel"`, `"lo"`, `"Hel"`, `"lo"`, `"!"`}, chunks)
		require.JSONEq(t, `{"length":6,"reason":"closed"}`, end)
	})

	t.Run("Compensation", func(t *testing.T) {
		t.Parallel()
		output, id := invoke(t, "ts.saga", `{}`)
		require.JSONEq(t, `{"tracking":"TRACK-1"}`, output)
		require.Equal(t, []string{"1 step reserve", "2 step charge", "3 step ship"}, kinds(journal(t, id)))

		c, stdout, _ := newTestCLI(env, "")
		err := c.run(t.Context(), []string{"invoke", "ts.saga", "--data", `{"fail_ship":true}`, "--wait", "60s"})
		require.Error(t, err)
		m := regexp.MustCompile(`run (\S+) failed`).FindStringSubmatch(stdout.String() + err.Error())
		require.NotNil(t, m, stdout.String()+err.Error())
		var detail struct {
			Status  string                         `json:"status"`
			Error   struct{ Type, Message string } `json:"error"`
			Journal []journalEntry                 `json:"journal"`
		}
		require.NoError(t, json.Unmarshal([]byte(cmd(t, "runs", "get", m[1], "--json")), &detail))
		require.Equal(t, "failed", detail.Status)
		require.Equal(t, "non_retryable", detail.Error.Type)
		require.Equal(t, "no courier", detail.Error.Message)
		// The undos ran newest first, each a journaled step.
		require.Equal(t, []string{"1 step reserve", "2 step charge", "3 step ship", "4 step compensate refund", "5 step compensate release"}, kinds(detail.Journal))
	})

	t.Run("Patch", func(t *testing.T) {
		t.Parallel()
		output, id := invoke(t, "ts.patched", `{}`)
		require.JSONEq(t, `{"total":10}`, output)
		require.Equal(t, []string{"1 patch fix-rounding", "2 step total-v2"}, kinds(journal(t, id)))
	})

	t.Run("SleepInProcess", func(t *testing.T) {
		t.Parallel()
		// ts.nap waits its 300ms sleep out in its process: the step after it runs in the
		// same invocation (attempt) as the one before it, and the sleep is journaled with
		// its wake time.
		output, id := invoke(t, "ts.nap", `{"sleep_ms":300}`)
		require.JSONEq(t, `{"before":1,"after":1}`, output)
		require.Equal(t, []string{"1 step before", "2 sleep nap", "3 step after"}, kinds(journal(t, id)))
		require.Regexp(t, `(?m)^  2  sleep +nap +until `, cmd(t, "runs", "get", id))
	})

	t.Run("AStepIsDurableBeforeRunResolves", func(t *testing.T) {
		// test/crash-server.ts: the process dies after step "charge" returned and before
		// step "ship" starts, on the run's first invocation; a supervisor serves the app
		// again on the same port, and the gateway retries the run. By default charge was
		// journaled before step.run resolved, so the retry replays it and its body ran
		// once. With lazyCheckpoints it was held for the next step or the answer, lost with
		// the process, and runs again: the window the opt-in documents.
		t.Parallel()
		counters := t.TempDir()
		crashURL, _ := startNodeProcess(t, dir, "../test/crash-server.js", g.publicKeys, "STEPGATE_CRASH_DIR="+counters)
		require.Contains(t, cmd(t, "apps", "sync", crashURL), "synced 2 functions from "+crashURL)
		for _, c := range []struct {
			fn      string
			charges int
		}{{"crash.eager", 1}, {"crash.lazy", 2}} {
			// One at a time: a crash kills the process that serves both.
			output, id := invoke(t, c.fn, `{}`)
			require.JSONEq(t, fmt.Sprintf(`{"charged":42,"shipped":"shipped","charges":%d}`, c.charges), output, c.fn)
			require.Equal(t, []string{"1 step charge", "2 step ship"}, kinds(journal(t, id)), c.fn)
			charged, err := os.ReadFile(filepath.Join(counters, id))
			require.NoError(t, err)
			require.Equal(t, strings.Repeat("charge\n", c.charges), string(charged), "%s: how often charge's body ran", c.fn)
		}
	})

	t.Run("ACapturedInvocationRunsNowhereTwice", func(t *testing.T) {
		// test/capture-server.ts behind a proxy that records what the gateway sends. Once
		// the run has finished, its captured invocation, sent again within the
		// signature's 5 minutes to a new process of the app (an empty replay memory, as a
		// new serverless instance has), runs no step: the SDK asks the gateway first
		// whether the invocation still owns its run. Sent to another function of the app,
		// it is refused: the signature binds the path.
		t.Parallel()
		counters := t.TempDir()
		appURL, _ := startNodeProcess(t, dir, "../test/capture-server.js", g.publicKeys, "STEPGATE_CAPTURE_DIR="+counters)
		target, err := url.Parse(appURL)
		require.NoError(t, err)
		var mu sync.Mutex
		var captured []*http.Request
		var bodies [][]byte
		rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost {
				b, _ := io.ReadAll(r.Body)
				r.Body = io.NopCloser(bytes.NewReader(b))
				mu.Lock()
				captured, bodies = append(captured, r.Clone(context.Background())), append(bodies, b)
				mu.Unlock()
			}
			rp.ServeHTTP(w, r)
		}))
		defer proxy.Close()
		proxyURL := proxy.URL + target.Path
		require.Contains(t, cmd(t, "apps", "sync", proxyURL), "synced 2 functions from "+proxyURL)
		output, id := invoke(t, "capture.charge", `{}`)
		require.JSONEq(t, `"charge"`, output)
		charges := func() string {
			b, err := os.ReadFile(filepath.Join(counters, "charge-"+id))
			require.NoError(t, err)
			return string(b)
		}
		require.Equal(t, "charge\n", charges())
		mu.Lock()
		require.Len(t, captured, 1)
		sig, body := captured[0].Header.Get("Stepgate-Signature"), bodies[0]
		mu.Unlock()

		freshURL, _ := startNodeProcess(t, dir, "../test/capture-server.js", g.publicKeys, "STEPGATE_CAPTURE_DIR="+counters)
		resend := func(url string) (int, map[string]any) {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Stepgate-Signature", sig)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			var out map[string]any
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
			return resp.StatusCode, out
		}
		code, out := resend(freshURL + "/capture.charge")
		require.Equal(t, http.StatusOK, code, out)
		require.Equal(t, "failed", out["status"], out)
		require.Equal(t, "superseded", out["error"].(map[string]any)["type"], out)
		require.Equal(t, "charge\n", charges(), "the charge's body ran once")

		// To a process that never saw it: not refused as a replay, but as another path's.
		otherURL, _ := startNodeProcess(t, dir, "../test/capture-server.js", g.publicKeys, "STEPGATE_CAPTURE_DIR="+counters)
		code, out = resend(otherURL + "/capture.refund")
		require.Equal(t, http.StatusUnauthorized, code, out)
		require.Equal(t, "signature", out["type"])
		require.Equal(t, "signature: no signature matches", out["message"])
		refunds, err := filepath.Glob(filepath.Join(counters, "refund-*"))
		require.NoError(t, err)
		require.Empty(t, refunds, "the refund never ran")
	})

	t.Run("ACapturedInvocationInFlight", func(t *testing.T) {
		// test/capture-server.ts serving one function whose step is counted, held in
		// its first process (before its step, or in its step body) until the test opens
		// the gate, behind a proxy that records what the gateway sends. The captured
		// invocation, sent to a new process of the app while the invocation it copies
		// is still the run's current one, is answered by the gateway's one claim per
		// invocation: exactly one of the two processes runs the step body.
		t.Parallel()
		type deployment struct {
			origin, proxied string // the first process (its own root, for /gate/open); the proxy's app URL
			counters        string
			mu              sync.Mutex
			sig             string
			body            []byte
		}
		// openGate lets the held invocations of d's first process go on.
		openGate := func(t *testing.T, d *deployment) {
			// Not t's context: a cleanup calls it too, once that is done.
			req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, d.origin+"/gate/open", nil)
			require.NoError(t, err)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			_ = resp.Body.Close()
			require.Equal(t, http.StatusNoContent, resp.StatusCode)
		}
		deploy := func(t *testing.T, name, gates string) *deployment {
			d := &deployment{counters: t.TempDir()}
			appURL, _ := startNodeProcess(t, dir, "../test/capture-server.js", g.publicKeys,
				"STEPGATE_CAPTURE_DIR="+d.counters, "STEPGATE_CAPTURE_GATED="+name, "STEPGATE_CAPTURE_GATES="+gates)
			target, err := url.Parse(appURL)
			require.NoError(t, err)
			d.origin = target.Scheme + "://" + target.Host
			rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: target.Scheme, Host: target.Host})
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodPost {
					b, _ := io.ReadAll(r.Body)
					r.Body = io.NopCloser(bytes.NewReader(b))
					d.mu.Lock()
					if d.body == nil {
						d.sig, d.body = r.Header.Get("Stepgate-Signature"), b
					}
					d.mu.Unlock()
				}
				rp.ServeHTTP(w, r)
			}))
			// Cleanups run last first: the gate opens before the proxy closes, so that a
			// failed test leaves no invocation held.
			t.Cleanup(proxy.Close)
			t.Cleanup(func() { openGate(t, d) })
			d.proxied = proxy.URL + target.Path
			require.Contains(t, cmd(t, "apps", "sync", d.proxied), "synced 1 function from "+d.proxied)
			return d
		}
		fresh := func(t *testing.T, d *deployment, name string) string {
			u, _ := startNodeProcess(t, dir, "../test/capture-server.js", g.publicKeys, "STEPGATE_CAPTURE_DIR="+d.counters, "STEPGATE_CAPTURE_GATED="+name)
			return u + "/" + name
		}
		start := func(t *testing.T, name string) string {
			out := cmd(t, "invoke", name, "--data", "{}")
			fields := strings.Fields(out)
			require.GreaterOrEqual(t, len(fields), 2, out)
			return fields[1]
		}
		reached := func(t *testing.T, d *deployment, where, id string) {
			require.Eventually(t, func() bool {
				_, err := os.Stat(filepath.Join(d.counters, "reached-"+where+"-"+id))
				return err == nil
			}, 30*time.Second, 20*time.Millisecond, "the function did not reach its gate %s", where)
		}
		charges := func(t *testing.T, d *deployment, name, id string) int {
			b, err := os.ReadFile(filepath.Join(d.counters, name+"-"+id))
			if os.IsNotExist(err) {
				return 0
			}
			require.NoError(t, err)
			return strings.Count(string(b), "charge\n")
		}
		captured := func(t *testing.T, d *deployment) (string, []byte) {
			d.mu.Lock()
			defer d.mu.Unlock()
			require.NotNil(t, d.body, "no invocation was captured")
			return d.sig, d.body
		}
		send := func(t *testing.T, url, sig string, body []byte) map[string]any {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, bytes.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Stepgate-Signature", sig)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			var out map[string]any
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
			require.Equal(t, http.StatusOK, resp.StatusCode, out)
			return out
		}
		result := func(t *testing.T, id string) map[string]any {
			req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, g.url+"/v1/runs/"+id+"/result?wait=60s", nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+g.token)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			var out map[string]any
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
			require.Equal(t, http.StatusOK, resp.StatusCode, out)
			return out
		}

		t.Run("WhileTheOriginalRunsItsStep", func(t *testing.T) {
			t.Parallel()
			const name = "capture.blocked"
			d := deploy(t, name, "inside")
			id := start(t, name)
			reached(t, d, "inside", id)
			sig, body := captured(t, d)
			out := send(t, fresh(t, d, name), sig, body)
			require.Equal(t, "failed", out["status"], out)
			require.Equal(t, "superseded", out["error"].(map[string]any)["type"], out)
			require.Equal(t, 1, charges(t, d, name, id), "the copy ran no step body")
			openGate(t, d)
			r := result(t, id)
			require.Equal(t, "completed", r["status"], r)
			require.Equal(t, 1, charges(t, d, name, id), "the charge ran once")
		})

		t.Run("TheCopyAsksFirst", func(t *testing.T) {
			t.Parallel()
			const name = "capture.first"
			d := deploy(t, name, "before")
			id := start(t, name)
			reached(t, d, "before", id)
			sig, body := captured(t, d)
			out := send(t, fresh(t, d, name), sig, body)
			require.Equal(t, "completed", out["status"], out)
			require.Equal(t, 1, charges(t, d, name, id))
			// The original is refused the run and answers superseded: a failed invocation,
			// whose retry replays the charge the copy journaled.
			openGate(t, d)
			r := result(t, id)
			require.Equal(t, "completed", r["status"], r)
			require.Equal(t, 1, charges(t, d, name, id), "exactly one of the two ran the step body")
		})

		t.Run("OneNonceClaimsTheInvocation", func(t *testing.T) {
			t.Parallel()
			const name = "capture.nonce"
			d := deploy(t, name, "before")
			id := start(t, name)
			reached(t, d, "before", id)
			_, body := captured(t, d)
			var req struct {
				Checkpoint struct{ URL, Token string } `json:"checkpoint"`
			}
			require.NoError(t, json.Unmarshal(body, &req))
			ask := func(body string) int {
				r, err := http.NewRequestWithContext(t.Context(), http.MethodPost, req.Checkpoint.URL+"/current", strings.NewReader(body))
				require.NoError(t, err)
				r.Header.Set("Content-Type", "application/json")
				r.Header.Set("Authorization", "Bearer "+req.Checkpoint.Token)
				resp, err := http.DefaultClient.Do(r)
				require.NoError(t, err)
				_ = resp.Body.Close()
				return resp.StatusCode
			}
			mine := strings.Repeat("0123456789abcdef", 2)
			require.Equal(t, http.StatusOK, ask(`{"nonce":"`+mine+`"}`))
			require.Equal(t, http.StatusOK, ask(`{"nonce":"`+mine+`"}`), "the same nonce again")
			require.Equal(t, http.StatusConflict, ask(`{"nonce":"`+strings.Repeat("e", 32)+`"}`), "another nonce")
			require.Equal(t, http.StatusBadRequest, ask(`{"nonce":"`+strings.Repeat("e", 31)+`"}`), "a short nonce")
			require.Equal(t, http.StatusBadRequest, ask(`{"nonce":"`+strings.ToUpper(mine)+`"}`), "an uppercase nonce")
			// The original's nonce is refused; its next invocation is claimed afresh.
			openGate(t, d)
			r := result(t, id)
			require.Equal(t, "completed", r["status"], r)
			require.Equal(t, 1, charges(t, d, name, id))
		})
	})

	t.Run("MaxInvocationDuration", func(t *testing.T) {
		t.Parallel()
		// Four steps of 400ms under a 1s limit: each invocation stops after two (at 800ms,
		// past four fifths of the limit) and the gateway calls again (continue).
		output, id := invoke(t, "ts.long", `{"steps":4,"step_ms":400}`)
		require.JSONEq(t, `{"steps":4}`, output)
		j := journal(t, id)
		require.Equal(t, []string{"1 step work-1", "2 step work-2", "3 step work-3", "4 step work-4"}, kinds(j))
		// Each step's output is the invocation attempt it ran in: more than one.
		attempts := map[string]bool{}
		for _, e := range j {
			attempts[string(e.Output)] = true
		}
		require.Greater(t, len(attempts), 1, "the run continued in a new invocation: %s", kinds(j))
	})
}

// readStream reads a finished run's stream at url (server-sent events) to its end, and
// returns its chunks' data and the end event's.
func readStream(t *testing.T, url, token string) ([]string, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var chunks []string
	event := ""
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: ") && event == "chunk":
			chunks = append(chunks, strings.TrimPrefix(line, "data: "))
		case strings.HasPrefix(line, "data: ") && event == "end":
			return chunks, strings.TrimPrefix(line, "data: ")
		}
	}
	t.Fatalf("the stream ended without an end event (%v): %q", sc.Err(), chunks)
	return nil, ""
}

// TestTypeScriptSDKOverhead measures the TypeScript SDK's cost per step against the Go
// SDK's on one gateway: runs of chain (Go) and ts.chain (TypeScript) with 0 and N steps,
// one at a time, alternating, and reports per step (median(N) - median(0)) / N for each.
// It is a measurement, not a test: it runs only with STEPGATE_TS_BENCH=1 (see
// docs/benchmarks-history.md, "The TypeScript SDK's cost per step, against the Go SDK's").
func TestTypeScriptSDKOverhead(t *testing.T) {
	if os.Getenv("STEPGATE_TS_BENCH") != "1" {
		t.Skip("a measurement: set STEPGATE_TS_BENCH=1")
	}
	dir := buildTypeScriptSDK(t)
	g := startDev(t)
	appURL, nodePID := startNodeProcess(t, dir, "node-server.js", g.publicKeys)
	c, _, _ := newTestCLI(map[string]string{"STEPGATE_URL": g.url, "STEPGATE_TOKEN": g.token}, "")
	require.NoError(t, c.run(t.Context(), []string{"apps", "sync", appURL}))
	// stepgate dev serves the Go examples inside the gateway's process; the Node app is a
	// process of its own. For a fair comparison, serve the Go examples from a process of
	// their own too (cmd/stepgate-examples), as a function author's app is, and sync them:
	// chain then points at it.
	goApp, goPID := startGoExamples(t, g.publicKeys)
	c, _, _ = newTestCLI(map[string]string{"STEPGATE_URL": g.url, "STEPGATE_TOKEN": g.token}, "")
	require.NoError(t, c.run(t.Context(), []string{"apps", "sync", goApp}))

	steps, _ := strconv.Atoi(os.Getenv("STEPGATE_TS_BENCH_STEPS"))
	if steps <= 0 {
		steps = 50
	}
	rounds, _ := strconv.Atoi(os.Getenv("STEPGATE_TS_BENCH_ROUNDS"))
	if rounds <= 0 {
		rounds = 30
	}
	client := &http.Client{Timeout: time.Minute}
	runOnce := func(fn string, n int) time.Duration {
		req, err := http.NewRequest(http.MethodPost, g.url+"/v1/functions/"+fn+"/runs?wait=60s", strings.NewReader(fmt.Sprintf(`{"steps":%d}`, n)))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+g.token)
		req.Header.Set("Content-Type", "application/json")
		start := time.Now()
		resp, err := client.Do(req)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.True(t, bytes.Contains(body, []byte(`"completed"`)), string(body))
		return d
	}
	type cell struct {
		fn string
		n  int
	}
	cells := []cell{{"chain", 0}, {"ts.chain", 0}, {"chain", steps}, {"ts.chain", steps}}
	for _, c := range cells { // warm up connections and code paths
		runOnce(c.fn, c.n)
	}
	times := map[cell][]time.Duration{}
	for r := range rounds {
		for i := range cells {
			c := cells[(i+r)%len(cells)] // alternate which goes first
			times[c] = append(times[c], runOnce(c.fn, c.n))
		}
	}
	median := func(ds []time.Duration) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[len(s)/2]
	}
	perStep := func(fn string) time.Duration {
		return (median(times[cell{fn, steps}]) - median(times[cell{fn, 0}])) / time.Duration(steps)
	}
	goStep, tsStep := perStep("chain"), perStep("ts.chain")
	for _, c := range cells {
		t.Logf("%-9s steps=%-3d median %v", c.fn, c.n, median(times[c]))
	}
	t.Logf("per step (checkpoint round trip included): Go %v, TypeScript %v, TypeScript - Go %v (%d rounds of %d steps)",
		goStep, tsStep, tsStep-goStep, rounds, steps)

	// The CPU each app's process spends per step, which the machine's load does not
	// change as much: blocks of runs with N steps and with none, one after the other.
	cpuPerStep := func(fn string, pid int) time.Duration {
		before := cpuTime(t, pid)
		for range rounds {
			runOnce(fn, steps)
		}
		mid := cpuTime(t, pid)
		for range rounds {
			runOnce(fn, 0)
		}
		return ((mid - before) - (cpuTime(t, pid) - mid)) / time.Duration(rounds*steps)
	}
	goCPU, tsCPU := cpuPerStep("chain", goPID), cpuPerStep("ts.chain", nodePID)
	t.Logf("app CPU per step: Go %v, TypeScript %v, TypeScript - Go %v (%d runs of %d steps each)", goCPU, tsCPU, tsCPU-goCPU, rounds, steps)
}

// startGoExamples builds and serves cmd/stepgate-examples on a free port, verifying with
// publicKeys, and stops it in Cleanup. It returns the app's URL.
func startGoExamples(t *testing.T, publicKeys string) (string, int) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "stepgate-examples")
	build := exec.Command("go", "build", "-o", bin, "../stepgate-examples")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ../stepgate-examples: %v\n%s", err, out)
	}
	addr := freeAddr(t).String()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "ADDR="+addr, "STEPGATE_PUBLIC_KEYS="+publicKeys)
	var output lockedBuffer
	cmd.Stdout, cmd.Stderr = &output, &output
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	stopInCleanup(t, cmd, exited)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(output.String(), "example functions serving") {
		select {
		case <-exited:
			t.Fatalf("stepgate-examples exited:\n%s", output.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("stepgate-examples did not start within 30s:\n%s", output.String())
		}
	}
	return "http://" + addr + "/", cmd.Process.Pid
}

// cpuTime returns the CPU time (user and system, all threads) process pid has used, from
// /proc/<pid>/stat, in clock ticks of 10ms.
func cpuTime(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	// The fields after the command (in parentheses, which may hold spaces).
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// requireBodyBound sends a Node examples server of its own (serveNode, whose
// maxBodyBytes is 32 MiB by default) an unsigned 400 MiB body, chunked, made as it is
// sent: the answer is a 413 naming the bound before the body has all been sent, and the
// process's peak memory stays far below the body's size, for nothing past the bound is
// read or buffered.
func requireBodyBound(t *testing.T, dir string) {
	t.Helper()
	// Any tenant's key: the body is refused before its signature is looked at.
	appURL, pid := startNodeProcess(t, dir, "node-server.js", "A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg")
	peak := func() int64 {
		t.Helper()
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if os.IsNotExist(err) {
			t.Skip("reads the process's peak memory from /proc (Linux)")
		}
		require.NoError(t, err)
		m := regexp.MustCompile(`(?m)^VmHWM:\s+(\d+) kB$`).FindSubmatch(status)
		require.NotNil(t, m, string(status))
		kb, err := strconv.ParseInt(string(m[1]), 10, 64)
		require.NoError(t, err)
		return kb << 10
	}
	before := peak()

	u, err := url.Parse(appURL + "/ts.checkout")
	require.NoError(t, err)
	conn, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(time.Minute))) // a hung server fails, not hangs, the test
	answered := make(chan struct{})
	var sent atomic.Int64
	const total = 400 << 20
	go func() {
		// Writes stop when the server answers and closes the connection.
		_, err := fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n", u.Path, u.Host)
		chunk := append(append([]byte(fmt.Sprintf("%x\r\n", 64<<10)), bytes.Repeat([]byte("x"), 64<<10)...), "\r\n"...)
		for err == nil && sent.Load() < total {
			select {
			case <-answered:
				return
			default:
			}
			_, err = conn.Write(chunk)
			sent.Add(64 << 10)
		}
		if err == nil {
			_, _ = io.WriteString(conn, "0\r\n\r\n")
		}
	}()
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	atSent := sent.Load()
	close(answered)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode, string(body))
	require.JSONEq(t, `{"type":"too_large","message":"the body is larger than 33554432 bytes"}`, string(body))
	after := peak()
	t.Logf("peak memory of the Node process: %d MiB before, %d MiB after a %d MiB body", before>>20, after>>20, total>>20)
	require.Less(t, after, int64(200<<20), "the Node process's peak memory, after a %d MiB body", total>>20)
	require.Less(t, atSent, int64(total), "the answer came before the body was all sent")
}

// jsonID is the id of the request a receive entry took.
func jsonID(t *testing.T, e journalEntry) string {
	t.Helper()
	var out struct {
		Message struct {
			ID string `json:"id"`
		} `json:"message"`
	}
	require.NoError(t, json.Unmarshal(e.Output, &out))
	return out.Message.ID
}

// TestTypeScriptClient runs the TypeScript SDK's client tests (test/client.e2e.ts) with
// node --test against a real gateway: a typed run, start and attach, cancel, an event
// resuming a waiting run, a message, a start with a message (and its refusals for a
// second tenant and a token without events:send), a request's reply, values and a
// stream, and a start retried after a 503 that starts one run.
func TestTypeScriptClient(t *testing.T) {
	dir := buildTypeScriptSDK(t)
	g := startDev(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	// A second tenant's token, and one of the dev tenant with runs:invoke alone (no
	// events:send), for startWithMessage's refusals.
	token := func(args ...string) string {
		c, stdout, _ := newTestCLI(map[string]string{}, "")
		require.NoError(t, c.run(ctx, append([]string{"token", "create", "--dir", g.dir}, args...)))
		return strings.TrimSpace(strings.TrimPrefix(stdout.String(), "STEPGATE_TOKEN="))
	}
	cmd := exec.CommandContext(ctx, "node", "--test", "--test-reporter=spec", filepath.Join(dir, "dist", "test", "client.e2e.js"))
	cmd.Env = append(os.Environ(), "STEPGATE_URL="+g.url, "STEPGATE_TOKEN="+g.token, "STEPGATE_PUBLIC_KEYS="+g.publicKeys,
		"STEPGATE_SECOND_TENANT_TOKEN="+token("--sub", "sam", "--tenant", "second", "--role", "admin"),
		"STEPGATE_INVOKE_ONLY_TOKEN="+token("--sub", "ivy", "--role", "runs:invoke"))
	out, err := cmd.CombinedOutput()
	t.Logf("node --test dist/test/client.e2e.js:\n%s", out)
	require.NoError(t, err)
	// Every test ran: none was skipped for want of a gateway.
	require.Contains(t, string(out), "skipped 0")
	require.Contains(t, string(out), "fail 0")
}
