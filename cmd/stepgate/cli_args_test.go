package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/protocol"
)

// newTestCLI returns a cli with env as its environment, stdin as piped input
// (none if empty), and buffers for its output, printing times in UTC.
func newTestCLI(env map[string]string, stdin string) (*cli, *bytes.Buffer, *bytes.Buffer) {
	var stdout, stderr bytes.Buffer
	c := &cli{
		getenv: func(k string) string { return env[k] },
		stdin: func() io.Reader {
			if stdin == "" {
				return nil
			}
			return strings.NewReader(stdin)
		},
		stdout: &stdout,
		stderr: &stderr,
		loc:    time.UTC,
	}
	return c, &stdout, &stderr
}

func TestParseArgs(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name     string
		args     []string
		wantPos  []string
		wantURL  string
		wantJSON bool
	}{
		{"FlagsFirst", []string{"--url", "http://x", "--json", "a", "b"}, []string{"a", "b"}, "http://x", true},
		{"FlagsAfterPositionals", []string{"a", "b", "--url=http://x", "--json"}, []string{"a", "b"}, "http://x", true},
		{"FlagsBetween", []string{"a", "-json", "b", "-url", "http://x"}, []string{"a", "b"}, "http://x", true},
		{"NoFlags", []string{"a"}, []string{"a"}, "", false},
		{"Nothing", nil, nil, "", false},
		{"DoubleDashEndsFlags", []string{"--json", "a", "--", "--url", "b"}, []string{"a", "--url", "b"}, "", true},
		{"SingleDashIsPositional", []string{"-", "--json"}, []string{"-"}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			fs := flag.NewFlagSet("test", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			u := fs.String("url", "", "")
			j := fs.Bool("json", false, "")
			pos, err := parseArgs(fs, tt.args)
			require.NoError(t, err)
			require.Equal(t, tt.wantPos, pos)
			require.Equal(t, tt.wantURL, *u)
			require.Equal(t, tt.wantJSON, *j)
		})
	}

	t.Run("UnknownFlagIsReported", func(t *testing.T) {
		t.Parallel()
		c, _, stderr := newTestCLI(nil, "")
		fs := c.newFlagSet("runs get", "ID")
		_, err := parseArgs(fs, []string{"id", "--nope"})
		require.ErrorIs(t, err, errFlagsReported)
		require.Contains(t, stderr.String(), "flag provided but not defined: -nope")
		require.Contains(t, stderr.String(), "Usage: stepgate runs get ID")
	})

	t.Run("HelpIsNotAnError", func(t *testing.T) {
		t.Parallel()
		c, _, stderr := newTestCLI(nil, "")
		require.NoError(t, c.run(t.Context(), []string{"runs", "get", "-h"}))
		require.Contains(t, stderr.String(), "Usage: stepgate runs get ID")
	})
}

func TestParseCommandArity(t *testing.T) {
	t.Parallel()

	c, _, _ := newTestCLI(nil, "")
	fs := c.newFlagSet("functions get", "NAME")
	_, err := parseCommand(fs, nil, "NAME")
	var uerr *usageError
	require.ErrorAs(t, err, &uerr)
	require.EqualError(t, err, "functions get: missing NAME")

	fs = c.newFlagSet("functions get", "NAME")
	_, err = parseCommand(fs, []string{"a", "b"}, "NAME")
	require.EqualError(t, err, `functions get: unexpected argument "b"`)
}

func TestJoinOptionalValue(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"DurationAfterSpace", []string{"hello", "--wait", "10s"}, []string{"hello", "--wait=10s"}},
		{"SingleDash", []string{"-wait", "1m", "hello"}, []string{"--wait=1m", "hello"}},
		{"NotADuration", []string{"--wait", "hello"}, []string{"--wait", "hello"}},
		{"Last", []string{"hello", "--wait"}, []string{"hello", "--wait"}},
		{"AlreadyJoined", []string{"--wait=5s"}, []string{"--wait=5s"}},
		{"StopsAtDoubleDash", []string{"--", "--wait", "5s"}, []string{"--", "--wait", "5s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, joinOptionalValue(tt.args, "wait", isDuration))
		})
	}
}

func TestParseInvoke(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name     string
		args     []string
		wantName string
		wantData string
		wantWait time.Duration
		wantKey  string
	}{
		{"NoWait", []string{"hello"}, "hello", "", 0, ""},
		{"WaitAloneMeans30s", []string{"hello", "--wait"}, "hello", "", 30 * time.Second, ""},
		{"WaitBeforeName", []string{"--wait", "hello"}, "hello", "", 30 * time.Second, ""},
		{"WaitWithSpace", []string{"hello", "--wait", "2m"}, "hello", "", 2 * time.Minute, ""},
		{"WaitWithEquals", []string{"--wait=5s", "hello"}, "hello", "", 5 * time.Second, ""},
		{"WaitFalse", []string{"hello", "--wait=false"}, "hello", "", 0, ""},
		{"AllAfterName", []string{"orders.checkout", "--data", `{"a":1}`, "--idempotency-key", "k1", "--wait", "10s"}, "orders.checkout", `{"a":1}`, 10 * time.Second, "k1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, _, _ := newTestCLI(nil, "")
			o, err := c.parseInvoke(tt.args)
			require.NoError(t, err)
			require.Equal(t, tt.wantName, o.name)
			require.Equal(t, tt.wantData, o.data)
			require.Equal(t, tt.wantWait, o.wait)
			require.Equal(t, tt.wantKey, o.idempotencyKey)
		})
	}

	t.Run("StartAndDeadline", func(t *testing.T) {
		t.Parallel()
		c, _, _ := newTestCLI(nil, "")
		o, err := c.parseInvoke([]string{"hello", "--delay", "10s", "--deadline", "2030-01-02T03:04:05Z"})
		require.NoError(t, err)
		require.Equal(t, "10s", o.delay)
		require.Equal(t, time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), *o.deadline)
		o, err = c.parseInvoke([]string{"hello", "--start-at", "2030-01-02T03:04:05Z", "--timeout", "1h"})
		require.NoError(t, err)
		require.Equal(t, "1h", o.timeout)
		require.Equal(t, time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC), *o.startAt)
		_, err = c.parseInvoke([]string{"hello", "--deadline", "tomorrow"})
		require.ErrorContains(t, err, "--deadline \"tomorrow\" is not an RFC 3339 time")
	})

	t.Run("BadWait", func(t *testing.T) {
		t.Parallel()
		c, _, stderr := newTestCLI(nil, "")
		_, err := c.parseInvoke([]string{"hello", "--wait=-1s"})
		require.ErrorIs(t, err, errFlagsReported)
		require.Contains(t, stderr.String(), "want a positive duration")
	})
}

func TestReadInput(t *testing.T) {
	t.Parallel()

	file := filepath.Join(t.TempDir(), "in.json")
	require.NoError(t, os.WriteFile(file, []byte("{\"from\": \"file\"}\n"), 0o600))

	tests := []struct {
		name  string
		data  string
		stdin string
		want  string
	}{
		{"Literal", `{"a":1}`, "", `{"a":1}`},
		{"LiteralWinsOverStdin", `[1]`, `{"b":2}`, `[1]`},
		{"File", "@" + file, "", `{"from": "file"}`},
		{"PipedStdin", "", " {\"b\":2}\n", `{"b":2}`},
		{"DashIsStdin", "-", `"s"`, `"s"`},
		{"NothingIsEmptyObject", "", "", `{}`},
		{"EmptyStdinIsEmptyObject", "", "   ", `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var stdin io.Reader
			if tt.stdin != "" {
				stdin = strings.NewReader(tt.stdin)
			}
			got, err := readInput(tt.data, stdin)
			require.NoError(t, err)
			require.Equal(t, tt.want, string(got))
		})
	}

	t.Run("InvalidJSON", func(t *testing.T) {
		t.Parallel()
		_, err := readInput(`{name: 1}`, nil)
		require.EqualError(t, err, "input from --data is not valid JSON: {name: 1}")
	})
	t.Run("MissingFile", func(t *testing.T) {
		t.Parallel()
		_, err := readInput("@"+filepath.Join(t.TempDir(), "nope.json"), nil)
		require.ErrorIs(t, err, os.ErrNotExist)
	})
	t.Run("DashWithoutStdin", func(t *testing.T) {
		t.Parallel()
		_, err := readInput("-", nil)
		require.Error(t, err)
	})
}

func TestParseRunsList(t *testing.T) {
	t.Parallel()

	c, _, _ := newTestCLI(nil, "")
	o, err := c.parseRunsList([]string{"--function", "hello", "--status", "failed", "--limit", "10", "--cursor", "abc"})
	require.NoError(t, err)
	status := protocol.RunStatus("failed")
	require.Equal(t, protocol.ListRunsParams{
		Function: ptr("hello"),
		Status:   &status,
		Limit:    ptr(10),
		Cursor:   ptr("abc"),
	}, o.params)

	o, err = c.parseRunsList(nil)
	require.NoError(t, err)
	require.Equal(t, protocol.ListRunsParams{}, o.params)

	_, err = c.parseRunsList([]string{"--status", "done"})
	require.ErrorContains(t, err, `unknown status "done"`)
	_, err = c.parseRunsList([]string{"--limit", "501"})
	require.ErrorContains(t, err, "--limit must be from 1 to 500")
}

func TestParseBench(t *testing.T) {
	t.Parallel()

	c, _, _ := newTestCLI(map[string]string{"DATABASE_URL": "postgres://env"}, "")
	o, err := c.parseBench(nil)
	require.NoError(t, err)
	require.Equal(t, []string{"hello", "orders.checkout", "chain"}, o.functions)
	require.Equal(t, []int{1, 16}, o.concurrency)
	require.Equal(t, 10*time.Second, o.duration)
	require.Equal(t, time.Second, o.warmup)
	require.Equal(t, 2*time.Second, o.floor)
	require.Equal(t, "postgres://env", o.databaseURL)
	require.Zero(t, o.sleepE2E, "--sleep-e2e is off by default")
	require.False(t, o.async, "--async is off by default")

	o, err = c.parseBench([]string{"--functions", " a, ,b ", "--concurrency=4,8", "--duration", "2s", "--warmup=0s", "--database-url", "postgres://flag"})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, o.functions)
	require.Equal(t, []int{4, 8}, o.concurrency)
	require.Equal(t, 2*time.Second, o.duration)
	require.Zero(t, o.warmup)
	require.Equal(t, "postgres://flag", o.databaseURL)

	o, err = c.parseBench([]string{"--async", "--sleep-e2e", "1s", "--sleep-runs", "7"})
	require.NoError(t, err)
	require.True(t, o.async)
	require.Equal(t, time.Second, o.sleepE2E)
	require.Equal(t, 7, o.sleepRuns)
	_, err = c.parseBench([]string{"--sleep-e2e", "15m"})
	require.ErrorContains(t, err, "--sleep-e2e must be from 0s to 14m30s")
	_, err = c.parseBench([]string{"--sleep-e2e", "-1s"})
	require.ErrorContains(t, err, "--sleep-e2e must be from 0s")

	_, err = c.parseBench([]string{"--concurrency", "0"})
	require.ErrorContains(t, err, `"0" is not a positive integer`)
	_, err = c.parseBench([]string{"--functions", ","})
	require.ErrorContains(t, err, "names no function")
	_, err = c.parseBench([]string{"--duration", "0s"})
	require.ErrorContains(t, err, "--duration and --floor-duration must be positive")
}

func TestDispatch(t *testing.T) {
	t.Parallel()

	t.Run("Help", func(t *testing.T) {
		t.Parallel()
		for _, arg := range []string{"help", "-h", "--help"} {
			c, stdout, _ := newTestCLI(nil, "")
			require.NoError(t, c.run(t.Context(), []string{arg}))
			require.Contains(t, stdout.String(), "functions register NAME --url URL")
		}
	})
	t.Run("NoCommand", func(t *testing.T) {
		t.Parallel()
		c, _, stderr := newTestCLI(nil, "")
		err := c.run(t.Context(), nil)
		var uerr *usageError
		require.ErrorAs(t, err, &uerr)
		require.Contains(t, stderr.String(), "Usage:")
	})
	t.Run("UnknownCommand", func(t *testing.T) {
		t.Parallel()
		c, _, _ := newTestCLI(nil, "")
		require.EqualError(t, c.run(t.Context(), []string{"frobnicate"}), `unknown command "frobnicate"`)
		require.EqualError(t, c.run(t.Context(), []string{"runs", "frob"}), `unknown command "runs frob" (want list, get, values, callbacks, send, request, requests, cancel, rerun or export)`)
	})
	t.Run("BadGatewayURL", func(t *testing.T) {
		t.Parallel()
		c, _, _ := newTestCLI(map[string]string{"STEPGATE_URL": "localhost:8080"}, "")
		require.ErrorContains(t, c.run(t.Context(), []string{"functions", "list"}), `gateway url "localhost:8080": want http://host:port`)
	})
	t.Run("RegisterNeedsFunctionURL", func(t *testing.T) {
		t.Parallel()
		c, _, _ := newTestCLI(nil, "")
		require.EqualError(t, c.run(t.Context(), []string{"functions", "register", "hello"}), "functions register: missing --url, the function's URL")
	})
}

func TestReport(t *testing.T) {
	t.Parallel()

	var b bytes.Buffer
	require.Equal(t, 1, report(&b, &apiError{Status: 404, Title: "Not Found", Detail: `function "x" is not registered`}))
	require.Equal(t, "stepgate: 404 Not Found: function \"x\" is not registered\n", b.String())

	b.Reset()
	require.Equal(t, 2, report(&b, usagef("runs get: missing ID")))
	require.Equal(t, "stepgate: runs get: missing ID\nRun 'stepgate help' for usage.\n", b.String())

	b.Reset()
	require.Equal(t, 2, report(&b, errFlagsReported))
	require.Empty(t, b.String())

	b.Reset()
	require.Equal(t, 1, report(&b, errors.New("boom")))
	require.Equal(t, "stepgate: boom\n", b.String())
}

func ptr[T any](v T) *T { return &v }
