package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestProblemError(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		status int
		body   string
		want   string
	}{
		{"Problem", 404, `{"title":"Not Found","status":404,"detail":"function \"x\" is not registered"}`, `404 Not Found: function "x" is not registered`},
		{"ProblemWithoutDetail", 401, `{"title":"Unauthorized","status":401}`, `401 Unauthorized`},
		{"EchoMessage", 404, `{"message":"Not Found"}`, `404 Not Found`},
		{"EchoMessageDetail", 400, `{"message":"missing or malformed jwt"}`, `400 Bad Request: missing or malformed jwt`},
		{"PlainText", 502, "bad gateway\n  upstream down", `502 Bad Gateway: bad gateway upstream down`},
		{"Empty", 500, ``, `500 Internal Server Error`},
		{"UnknownStatus", 599, ``, `599 HTTP error`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.EqualError(t, problemError(tt.status, []byte(tt.body)), tt.want)
		})
	}
}

// fakeGateway is an httptest server that answers a few API calls with
// canned bodies and records the requests it saw.
type fakeGateway struct {
	*httptest.Server
	mu       sync.Mutex
	auth     []string
	bodies   []string
	idemKeys []string
	queries  []string
}

func newFakeGateway(t *testing.T) *fakeGateway {
	t.Helper()
	g := &fakeGateway{}
	problem := func(w http.ResponseWriter, status int, detail string) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"title": http.StatusText(status), "status": status, "detail": detail})
	}
	ok := func(w http.ResponseWriter, status int, body string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/functions", func(w http.ResponseWriter, r *http.Request) {
		ok(w, 200, `{"functions":[{"name":"hello","revision":2,"url":"http://fn/hello","config":{},"created_at":"2026-01-02T15:04:05Z"}]}`)
	})
	mux.HandleFunc("GET /v1/functions/{name}", func(w http.ResponseWriter, r *http.Request) {
		problem(w, 404, `function "`+r.PathValue("name")+`" is not registered`)
	})
	mux.HandleFunc("PUT /v1/functions/{name}", func(w http.ResponseWriter, r *http.Request) {
		ok(w, 200, `{"name":"`+r.PathValue("name")+`","revision":4,"url":"http://fn/x","config":{},"created_at":"2026-01-02T15:04:05Z"}`)
	})
	mux.HandleFunc("POST /v1/functions/{name}/runs", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("wait") == "" {
			ok(w, 202, `{"id":"r1","status":"queued"}`)
			return
		}
		ok(w, 200, `{"id":"r1","status":"completed","output":{"greeting":"hello bench"}}`)
	})
	mux.HandleFunc("GET /v1/runs", func(w http.ResponseWriter, r *http.Request) {
		ok(w, 200, `{"runs":[{"id":"r1","function":"hello","revision":2,"status":"failed","input":{},"identity":{"subject":"dev","tenant":"t","roles":[]},"invocations":3,"failed_invocations":3,"recoveries":0,"created_at":"2026-01-02T15:04:05Z","finished_at":"2026-01-02T15:04:06.5Z"}],"next_cursor":"c2"}`)
	})
	mux.HandleFunc("GET /v1/runs/{id}/values", func(w http.ResponseWriter, r *http.Request) {
		ok(w, 200, `{"values":[{"key":"progress","value":40,"version":3,"set_at":"2026-01-02T15:04:05Z"},{"key":"url","value":{"href":"https://pay.example/1"},"version":2,"set_at":"2026-01-02T15:04:04Z"}]}`)
	})
	mux.HandleFunc("POST /v1/events", func(w http.ResponseWriter, r *http.Request) {
		ok(w, 202, `{"id":"e1","name":"orders.paid","runs":["r1"],"resumed":["r2","r3"]}`)
	})
	mux.HandleFunc("POST /v1/runs/{id}/rerun", func(w http.ResponseWriter, r *http.Request) {
		ok(w, 202, `{"id":"r2","function":"hello","status":"queued","rerun_of":"`+r.PathValue("id")+`","created_at":"2026-01-02T15:04:05Z"}`)
	})
	mux.HandleFunc("POST /v1/runs/{id}/messages", func(w http.ResponseWriter, r *http.Request) {
		ok(w, 202, `{"id":"m1","run_id":"`+r.PathValue("id")+`","topic":"approval","consumed":true,"sent_at":"2026-01-02T15:04:05Z"}`)
	})
	var opReads atomic.Int32
	const opID = "01a22f70-0000-7000-8000-000000000001"
	mux.HandleFunc("POST /v1/runs/cancel", func(w http.ResponseWriter, r *http.Request) {
		ok(w, 202, `{"id":"`+opID+`","kind":"cancel","status":"running","filter":{"function":"hello"},"cancelled":0,"batches":0,"created_at":"2026-01-02T15:04:05Z","by":{"subject":"dev","tenant":"t","roles":[]}}`)
	})
	mux.HandleFunc("GET /v1/operations/{id}", func(w http.ResponseWriter, r *http.Request) {
		if opReads.Add(1) == 1 {
			ok(w, 200, `{"id":"`+opID+`","kind":"cancel","status":"running","filter":{"function":"hello"},"cancelled":1000,"matched":3000,"batches":1,"created_at":"2026-01-02T15:04:05Z","by":{"subject":"dev","tenant":"t","roles":[]}}`)
			return
		}
		ok(w, 200, `{"id":"`+opID+`","kind":"cancel","status":"completed","filter":{"function":"hello"},"cancelled":3000,"matched":3000,"batches":4,"created_at":"2026-01-02T15:04:05Z","finished_at":"2026-01-02T15:04:06Z","by":{"subject":"dev","tenant":"t","roles":[]}}`)
	})
	const rerunID = "01a22f70-0000-7000-8000-000000000002"
	var rerunReads atomic.Int32
	mux.HandleFunc("POST /v1/runs/rerun", func(w http.ResponseWriter, r *http.Request) {
		ok(w, 202, `{"id":"`+rerunID+`","kind":"rerun","status":"running","filter":{"function":"hello"},"cancelled":0,"done":0,"failed":0,"batches":0,"created_at":"2026-01-02T15:04:05Z","by":{"subject":"dev","tenant":"t","roles":[]}}`)
	})
	mux.HandleFunc("GET /v1/operations/"+rerunID, func(w http.ResponseWriter, r *http.Request) {
		if rerunReads.Add(1) == 1 {
			ok(w, 200, `{"id":"`+rerunID+`","kind":"rerun","status":"running","filter":{"function":"hello"},"cancelled":0,"done":500,"failed":0,"matched":1000,"batches":1,"created_at":"2026-01-02T15:04:05Z","by":{"subject":"dev","tenant":"t","roles":[]}}`)
			return
		}
		ok(w, 200, `{"id":"`+rerunID+`","kind":"rerun","status":"completed","filter":{"function":"hello"},"cancelled":0,"done":998,"failed":2,"errors":[{"run_id":"r9","error":"function hello is no longer registered"}],"matched":1000,"batches":2,"created_at":"2026-01-02T15:04:05Z","finished_at":"2026-01-02T15:04:06Z","by":{"subject":"dev","tenant":"t","roles":[]}}`)
	})
	mux.HandleFunc("GET /v1/failures", func(w http.ResponseWriter, r *http.Request) {
		ok(w, 200, `{"groups":[{"group":"0123456789abcdef","function":"hello","error_type":"http_status","message":"order <num> not found","sample_message":"order 7 not found","count":42,"redriven":40,"redriven_completed":38,"first_seen":"2026-01-02T15:04:05Z","last_seen":"2026-01-02T16:04:05Z","sample_run_id":"r7"}],"since":"2025-12-26T15:04:05Z","truncated":false}`)
	})
	mux.HandleFunc("POST /v1/failures/{group}/dismiss", func(w http.ResponseWriter, r *http.Request) {
		ok(w, 200, `{"group":"`+r.PathValue("group")+`","dismissed_at":"2026-01-02T15:04:05Z","by":{"subject":"dev","tenant":"t","roles":[]}}`)
	})
	g.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		g.mu.Lock()
		g.auth = append(g.auth, r.Header.Get("Authorization"))
		g.bodies = append(g.bodies, string(body))
		g.idemKeys = append(g.idemKeys, r.Header.Get("Idempotency-Key"))
		g.queries = append(g.queries, r.URL.RawQuery)
		g.mu.Unlock()
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(g.Close)
	return g
}

// last returns the last request's Authorization, body, Idempotency-Key and
// query.
func (g *fakeGateway) last() (auth, body, idemKey, query string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := len(g.auth) - 1
	return g.auth[n], g.bodies[n], g.idemKeys[n], g.queries[n]
}

func TestClientCommands(t *testing.T) {
	t.Parallel()

	t.Run("ListWithTokenFromEnv", func(t *testing.T) {
		t.Parallel()
		g := newFakeGateway(t)
		c, stdout, _ := newTestCLI(map[string]string{"STEPGATE_URL": g.URL, "STEPGATE_TOKEN": "env-token"}, "")
		require.NoError(t, c.run(t.Context(), []string{"functions", "list"}))
		auth, _, _, _ := g.last()
		require.Equal(t, "Bearer env-token", auth)
		require.Equal(t, ""+
			"NAME   REVISION  URL              TIMEOUT\n"+
			"hello  2         http://fn/hello  -\n", stdout.String())
	})

	t.Run("FlagsOverrideEnv", func(t *testing.T) {
		t.Parallel()
		g := newFakeGateway(t)
		c, stdout, _ := newTestCLI(map[string]string{"STEPGATE_URL": "http://127.0.0.1:1", "STEPGATE_TOKEN": "env-token"}, "")
		require.NoError(t, c.run(t.Context(), []string{"functions", "--json", "--url", g.URL, "--token", "flag-token"}))
		auth, _, _, _ := g.last()
		require.Equal(t, "Bearer flag-token", auth)
		require.JSONEq(t, `{"functions":[{"name":"hello","revision":2,"url":"http://fn/hello","config":{},"created_at":"2026-01-02T15:04:05Z"}]}`, stdout.String())
	})

	t.Run("NotFoundIsAProblemError", func(t *testing.T) {
		t.Parallel()
		g := newFakeGateway(t)
		c, stdout, _ := newTestCLI(map[string]string{"STEPGATE_URL": g.URL}, "")
		err := c.run(t.Context(), []string{"functions", "get", "x"})
		var aerr *apiError
		require.ErrorAs(t, err, &aerr)
		require.EqualError(t, err, `404 Not Found: function "x" is not registered`)
		require.Empty(t, stdout.String())
		auth, _, _, _ := g.last()
		require.Empty(t, auth, "no token, no Authorization header")
	})

	t.Run("RegisterUsesURLForTheFunction", func(t *testing.T) {
		t.Parallel()
		g := newFakeGateway(t)
		c, stdout, _ := newTestCLI(nil, "")
		require.NoError(t, c.run(t.Context(), []string{"functions", "register", "x", "--url", "http://fn/x", "--gateway", g.URL, "--timeout", "30s", "--max-attempts", "5"}))
		_, body, _, _ := g.last()
		require.JSONEq(t, `{"url":"http://fn/x","config":{"timeout":"30s","retries":{"max_attempts":5}}}`, body)
		require.Equal(t, "registered x revision 4 -> http://fn/x\n", stdout.String())
	})

	t.Run("InvokeWithoutWaitPrintsHowToAttach", func(t *testing.T) {
		t.Parallel()
		g := newFakeGateway(t)
		c, stdout, _ := newTestCLI(map[string]string{"STEPGATE_URL": g.URL}, `{"name":"piped"}`)
		require.NoError(t, c.run(t.Context(), []string{"invoke", "hello", "--idempotency-key", "k1"}))
		_, body, key, query := g.last()
		require.JSONEq(t, `{"name":"piped"}`, body)
		require.Equal(t, "k1", key)
		require.Empty(t, query)
		require.Equal(t, "run r1 is queued\nattach: stepgate runs get r1\n", stdout.String())
	})

	t.Run("InvokeWait", func(t *testing.T) {
		t.Parallel()
		g := newFakeGateway(t)
		c, stdout, _ := newTestCLI(map[string]string{"STEPGATE_URL": g.URL}, "")
		require.NoError(t, c.run(t.Context(), []string{"invoke", "hello", "--wait", "--data", `{"name":"Ada"}`}))
		_, body, _, query := g.last()
		require.JSONEq(t, `{"name":"Ada"}`, body)
		require.Equal(t, "wait=30s", query)
		require.Equal(t, "run r1 completed\n{\"greeting\":\"hello bench\"}\n", stdout.String())
	})

	t.Run("RunsListPrintsTheNextCursor", func(t *testing.T) {
		t.Parallel()
		g := newFakeGateway(t)
		c, stdout, _ := newTestCLI(map[string]string{"STEPGATE_URL": g.URL}, "")
		require.NoError(t, c.run(t.Context(), []string{"runs", "--status", "failed", "--limit", "5"}))
		_, _, _, query := g.last()
		q, err := url.ParseQuery(query)
		require.NoError(t, err)
		require.Equal(t, url.Values{"limit": {"5"}, "status": {"failed"}}, q)
		require.Equal(t, ""+
			"ID  FUNCTION  STATUS  INVOCATIONS   CREATED              DURATION\n"+
			"r1  hello     failed  3 (3 failed)  2026-01-02 15:04:05  1.5s\n"+
			"\n"+
			"more: stepgate runs list --cursor c2\n", stdout.String())
	})

	t.Run("RunsCancelByFilterPrintsProgress", func(t *testing.T) {
		t.Parallel()
		g := newFakeGateway(t)
		c, stdout, _ := newTestCLI(map[string]string{"STEPGATE_URL": g.URL}, "")
		require.NoError(t, c.run(t.Context(), []string{"runs", "cancel", "--function", "hello", "--status", "queued,suspended", "--every", "1ms"}))
		_, body, _, _ := g.last()
		require.JSONEq(t, `{"function":"hello","status":["queued","suspended"]}`, g.bodies[0], "the filter: %s", body)
		require.Equal(t, ""+
			"operation 01a22f70-0000-7000-8000-000000000001: cancelling\n"+
			"[##########....................] 1000/3000 cancelled, 1 batches\n"+
			"[##############################] 3000/3000 cancelled, 4 batches\n"+
			"operation 01a22f70-0000-7000-8000-000000000001 completed: 3000 runs cancelled in 4 batches\n", stdout.String())
	})

	t.Run("RunsRerunByFilterPrintsProgress", func(t *testing.T) {
		t.Parallel()
		g := newFakeGateway(t)
		c, stdout, _ := newTestCLI(map[string]string{"STEPGATE_URL": g.URL}, "")
		require.NoError(t, c.run(t.Context(), []string{"runs", "rerun", "--function", "hello", "--status", "failed", "--from", "failure", "--every", "1ms"}))
		require.JSONEq(t, `{"filter":{"function":"hello","status":["failed"]},"from":"failure"}`, g.bodies[0])
		require.Equal(t, ""+
			"operation 01a22f70-0000-7000-8000-000000000002: rerunning\n"+
			"[###############...............] 500/1000 rerun, 1 batches\n"+
			"[##############################] 998/1000 rerun, 2 failed, 2 batches\n"+
			"operation 01a22f70-0000-7000-8000-000000000002 completed: 998 runs rerun, 2 could not be (run r9: function hello is no longer registered) in 2 batches\n",
			stdout.String())
		require.Error(t, c.run(t.Context(), []string{"runs", "rerun", "r1", "--from", "failure"}), "--from failure is a bulk rerun's")
		require.Error(t, c.run(t.Context(), []string{"runs", "rerun", "r1", "--function", "hello"}), "an ID or a filter")
	})

	t.Run("Failures", func(t *testing.T) {
		t.Parallel()
		g := newFakeGateway(t)
		c, stdout, _ := newTestCLI(map[string]string{"STEPGATE_URL": g.URL, "TZ": "UTC"}, "")
		require.NoError(t, c.run(t.Context(), []string{"failures", "--since", "7d"}))
		_, _, _, query := g.last()
		require.Equal(t, "since=7d", query)
		require.Contains(t, stdout.String(), "0123456789abcdef  hello     http_status  42     40 (38 ok)")
		require.Contains(t, stdout.String(), "order <num> not found")

		require.NoError(t, c.run(t.Context(), []string{"failures", "--hide-redriven"}))
		_, _, _, query = g.last()
		require.Equal(t, "hide_redriven=true", query)

		stdout.Reset()
		require.NoError(t, c.run(t.Context(), []string{"failures", "dismiss", "0123456789abcdef"}))
		require.Equal(t, "group 0123456789abcdef dismissed: hidden until one of its runs fails again\n", stdout.String())

		stdout.Reset()
		require.NoError(t, c.run(t.Context(), []string{"failures", "redrive", "0123456789abcdef", "--from", "failure", "--no-wait"}))
		_, body, _, _ := g.last()
		require.JSONEq(t, `{"filter":{"error_group":"0123456789abcdef"},"from":"failure"}`, body)
		require.Contains(t, stdout.String(), "operation 01a22f70-0000-7000-8000-000000000002 started")
	})

	t.Run("RunValues", func(t *testing.T) {
		t.Parallel()
		g := newFakeGateway(t)
		c, stdout, _ := newTestCLI(map[string]string{"STEPGATE_URL": g.URL}, "")
		require.NoError(t, c.run(t.Context(), []string{"runs", "values", "r1"}))
		require.Equal(t, ""+
			"KEY       VERSION  SET                  VALUE\n"+
			"progress  3        2026-01-02 15:04:05  40\n"+
			"url       2        2026-01-02 15:04:04  {\"href\":\"https://pay.example/1\"}\n", stdout.String())
	})

	t.Run("RunsSendPostsAMessage", func(t *testing.T) {
		t.Parallel()
		g := newFakeGateway(t)
		c, stdout, _ := newTestCLI(map[string]string{"STEPGATE_URL": g.URL}, "")
		require.NoError(t, c.run(t.Context(), []string{"runs", "send", "0193a3c2-0000-7000-8000-000000000001", "approval", `{"ok":true}`, "--id", "m1"}))
		_, body, _, _ := g.last()
		require.JSONEq(t, `{"topic":"approval","data":{"ok":true},"id":"m1"}`, body)
		require.Equal(t, "message m1 on topic approval to run 0193a3c2-0000-7000-8000-000000000001: received by the run\n", stdout.String())
		require.Error(t, c.run(t.Context(), []string{"runs", "send", "r1"}), "a topic is needed")
		require.Error(t, c.run(t.Context(), []string{"runs", "send", "r1", "t", "{nope"}), "the data is JSON")
	})

	t.Run("EventsSendPostsAnEvent", func(t *testing.T) {
		t.Parallel()
		g := newFakeGateway(t)
		c, stdout, _ := newTestCLI(map[string]string{"STEPGATE_URL": g.URL}, "")
		require.NoError(t, c.run(t.Context(), []string{"events", "send", "orders.paid", `{"order_id":"o-1"}`, "--id", "e1"}))
		_, body, _, _ := g.last()
		require.JSONEq(t, `{"name":"orders.paid","data":{"order_id":"o-1"},"id":"e1"}`, body)
		require.Equal(t, "event e1 (orders.paid): started 1 run(s) r1, resumed 2 waiting run(s) r2 r3\n", stdout.String())
		require.Error(t, c.run(t.Context(), []string{"events", "send"}), "a name is needed")
		require.Error(t, c.run(t.Context(), []string{"events", "send", "e", "{nope"}), "the data is JSON")
	})

	t.Run("RunsRerunFromAStep", func(t *testing.T) {
		t.Parallel()
		g := newFakeGateway(t)
		c, stdout, _ := newTestCLI(map[string]string{"STEPGATE_URL": g.URL}, "")
		require.NoError(t, c.run(t.Context(), []string{"runs", "rerun", "r1", "--from", "3"}))
		_, body, _, _ := g.last()
		require.JSONEq(t, `{"from_seq":3}`, body)
		require.Equal(t, "run r2 (queued) reruns r1 from seq 3\n", stdout.String())
		stdout.Reset()
		require.NoError(t, c.run(t.Context(), []string{"runs", "rerun", "r1"}))
		_, body, _, _ = g.last()
		require.JSONEq(t, `{}`, body, "no --from: from the start")
		require.Equal(t, "run r2 (queued) reruns r1\n", stdout.String())
		require.Error(t, c.run(t.Context(), []string{"runs", "rerun"}), "an id is needed")
	})

	t.Run("ConnectionRefusedHints", func(t *testing.T) {
		t.Parallel()
		g := newFakeGateway(t)
		gatewayURL := g.URL
		g.Close()
		c, _, _ := newTestCLI(map[string]string{"STEPGATE_URL": gatewayURL}, "")
		err := c.run(t.Context(), []string{"runs", "get", "r1"})
		require.ErrorContains(t, err, "is the gateway running?")
	})
}
