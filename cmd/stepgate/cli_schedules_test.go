package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

const scheduleJSON = `{"name":"nightly","function":"report","cron":"0 3 * * *","timezone":"Europe/Paris",
	"input":{"format":"pdf"},"identity":{"subject":"ada","tenant":"acme","roles":["developer"]},"catchup":"all","catchup_window":"5m",
	"next_at":"2026-01-03T02:00:00Z","last_tick_at":"2026-01-02T02:00:00Z","last_run_id":"r9",
	"created_at":"2026-01-01T10:00:00Z","updated_at":"2026-01-01T10:00:00Z"}`

// fakeScheduleGateway answers the schedule endpoints with scheduleJSON and records each
// request as "METHOD path body".
func fakeScheduleGateway(t *testing.T) (*httptest.Server, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var seen []string
	mux := http.NewServeMux()
	answer := func(status int, body string) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			if status >= 400 {
				w.Header().Set("Content-Type", "application/problem+json")
			}
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		}
	}
	mux.Handle("PUT /v1/schedules/nightly", answer(200, scheduleJSON))
	mux.Handle("PUT /v1/schedules/bad", answer(400, `{"title":"Bad Request","status":400,"detail":"cron \"* *\": expected exactly 5 fields, found 2: [* *]"}`))
	mux.Handle("GET /v1/schedules", answer(200, `{"schedules":[`+scheduleJSON+`]}`))
	mux.Handle("GET /v1/schedules/nightly", answer(200, scheduleJSON))
	mux.Handle("DELETE /v1/schedules/nightly", answer(204, ""))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path+" "+string(body))
		mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

func TestSchedulesCommands(t *testing.T) {
	t.Parallel()
	srv, requests := fakeScheduleGateway(t)
	env := map[string]string{"STEPGATE_URL": srv.URL, "STEPGATE_TOKEN": "tok"}
	run := func(args ...string) (string, error) {
		t.Helper()
		c, stdout, _ := newTestCLI(env, "")
		err := c.run(t.Context(), args)
		return stdout.String(), err
	}

	out, err := run("schedules", "put", "nightly", "--function", "report", "--cron", "0 3 * * *",
		"--timezone", "Europe/Paris", "--input", `{"format":"pdf"}`, "--catchup", "all", "--catchup-window", "5m")
	require.NoError(t, err)
	require.Equal(t, "schedule nightly: 0 3 * * * runs report (Europe/Paris); next tick 2026-01-03 02:00:00\n", out)
	reqs := requests()
	require.Equal(t, "PUT /v1/schedules/nightly ", reqs[len(reqs)-1][:len("PUT /v1/schedules/nightly ")])
	require.JSONEq(t, `{"function":"report","cron":"0 3 * * *","timezone":"Europe/Paris","input":{"format":"pdf"},"catchup":"all","catchup_window":"5m"}`,
		reqs[len(reqs)-1][len("PUT /v1/schedules/nightly "):])

	out, err = run("schedules")
	require.NoError(t, err)
	require.Equal(t, ""+
		"NAME     FUNCTION  CRON       TIMEZONE      CATCHUP         NEXT TICK            LAST RUN\n"+
		"nightly  report    0 3 * * *  Europe/Paris  all, window 5m  2026-01-03 02:00:00  r9\n", out)

	out, err = run("schedules", "get", "nightly")
	require.NoError(t, err)
	require.Equal(t, ""+
		"name       nightly\n"+
		"function   report\n"+
		"cron       0 3 * * * (Europe/Paris)\n"+
		"input      {\"format\":\"pdf\"}\n"+
		"runs as    subject ada, tenant acme, roles developer\n"+
		"catchup    all, window 5m\n"+
		"next tick  2026-01-03 02:00:00\n"+
		"last tick  2026-01-02 02:00:00\n"+
		"last run   r9\n"+
		"created    2026-01-01 10:00:00\n"+
		"updated    2026-01-01 10:00:00\n", out)

	out, err = run("schedules", "delete", "nightly")
	require.NoError(t, err)
	require.Equal(t, "deleted schedule nightly (the runs it started are kept)\n", out)
	reqs = requests()
	require.Equal(t, "DELETE /v1/schedules/nightly ", reqs[len(reqs)-1])

	_, err = run("schedules", "put", "bad", "--function", "report", "--cron", "* *")
	require.EqualError(t, err, `400 Bad Request: cron "* *": expected exactly 5 fields, found 2: [* *]`)

	n := len(requests())
	_, err = run("schedules", "put", "nightly", "--cron", "@hourly")
	require.EqualError(t, err, "schedules put: --function and --cron are required")
	_, err = run("schedules", "put", "nightly", "--function", "report", "--cron", "@hourly", "--input", "{nope")
	require.EqualError(t, err, "schedules put: --input is not valid JSON: {nope")
	_, err = run("schedules", "pause", "nightly")
	require.EqualError(t, err, `unknown command "schedules pause" (want put, list, get or delete)`)
	require.Len(t, requests(), n, "nothing sent for a bad command line")
}
