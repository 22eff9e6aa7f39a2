package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/examples"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

func TestMain(m *testing.M) { stack.Main(m) }

func ptr[T any](v T) *T { return &v }

// waitUntil checks cond, in the test's goroutine (so cond may use require), every 10ms
// until it holds, failing the test after within.
func waitUntil(t *testing.T, within time.Duration, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// startRun invokes name with input and waits up to 30s for the result.
func startRun(t *testing.T, c *protocol.ClientWithResponses, name, input string, params *protocol.StartRunParams) *protocol.StartRunResponse {
	t.Helper()
	if params == nil {
		params = &protocol.StartRunParams{Wait: ptr("30s")}
	}
	resp, err := c.StartRunWithBodyWithResponse(t.Context(), name, params, "application/json", strings.NewReader(input))
	require.NoError(t, err)
	return resp
}

func mustComplete(t *testing.T, c *protocol.ClientWithResponses, name, input string) protocol.RunResult {
	t.Helper()
	resp := startRun(t, c, name, input, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	require.Equal(t, protocol.RunStatusCompleted, resp.JSON200.Status, string(resp.Body))
	return *resp.JSON200
}

func getRun(t *testing.T, c *protocol.ClientWithResponses, id string) protocol.RunDetail {
	t.Helper()
	resp, err := c.GetRunWithResponse(t.Context(), id, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	return *resp.JSON200
}

func TestExamples(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Gateway: manyLongPolls})
	s.SyncExamples(t)
	c := s.Client(t, s.Token)

	t.Run("ACheckoutThatCannotShipIsUndone", func(t *testing.T) {
		t.Parallel()
		resp := startRun(t, c, "orders.checkout", `{"order_id":"o-undo","amount":500,"fail_ship":true}`, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Equal(t, protocol.RunStatusFailed, resp.JSON200.Status)
		require.Equal(t, "no carrier ships order o-undo", resp.JSON200.Error.Message, "the original error")
		var steps []string
		for _, e := range getRun(t, c, resp.JSON200.ID).Journal {
			steps = append(steps, e.Name)
		}
		require.Equal(t, []string{"reserve", "charge", "ship", "compensate refund", "compensate release"}, steps)
	})

	t.Run("QuoteAsksThreeSuppliersAtOnce", func(t *testing.T) {
		t.Parallel()
		res := mustComplete(t, c, "orders.quote", `{"sku":"book"}`)
		var out examples.QuoteOutput
		require.NoError(t, json.Unmarshal(*res.Output, &out))
		require.Len(t, out.Prices, 3)
		for _, p := range out.Prices {
			require.GreaterOrEqual(t, p, out.Prices[out.Best])
		}
		require.Equal(t, []string{"price from acme", "price from globex", "price from initech"}, entryNames(getRun(t, c, res.ID).Journal))
	})

	t.Run("FulfilAllChecksOutEveryOrder", func(t *testing.T) {
		t.Parallel()
		resp := startRun(t, c, "orders.fulfil_all", `{"orders":[{"order_id":"fa-1"},{"order_id":"fa-2","fail_ship":true},{"order_id":"fa-3"}]}`, nil)
		require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, resp.StatusCode(), string(resp.Body))
		id := ""
		if resp.JSON200 != nil {
			id = resp.JSON200.ID
		} else {
			id = resp.JSON202.ID
		}
		res := mustResult(t, c, id)
		require.Equal(t, protocol.RunStatusCompleted, res.Status, "%+v", res.Error)
		require.JSONEq(t, `{"results":["trk_fa-1","failed: no carrier ships order fa-2","trk_fa-3"]}`, string(*res.Output))
	})

	t.Run("HelloGreets", func(t *testing.T) {
		t.Parallel()
		res := mustComplete(t, c, "hello", `{"name":"Ada"}`)
		require.JSONEq(t, `{"greeting":"Hello, Ada!"}`, string(*res.Output))
	})

	t.Run("CheckoutJournalsThreeSteps", func(t *testing.T) {
		t.Parallel()
		res := mustComplete(t, c, "orders.checkout", `{"item":"book"}`)
		run := getRun(t, c, res.ID)
		require.Len(t, run.Journal, 3)
		for i, name := range []string{"reserve", "charge", "ship"} {
			require.Equal(t, i+1, run.Journal[i].Seq)
			require.Equal(t, name, run.Journal[i].Name)
			require.Equal(t, protocol.EntryKindStep, run.Journal[i].Kind)
			require.NotNil(t, run.Journal[i].Output)
		}
		require.Equal(t, "tester", run.Identity.Subject)
		require.Equal(t, auth.DefaultTenant, run.Identity.Tenant)
		require.Equal(t, 1, run.Invocations)
	})

	t.Run("CheckoutSleepsThenShips", func(t *testing.T) {
		t.Parallel()
		res := mustComplete(t, c, "orders.checkout", `{"sleep_ms":200}`)
		run := getRun(t, c, res.ID)
		require.Len(t, run.Journal, 4)
		sleep := run.Journal[2]
		require.Equal(t, protocol.EntryKindSleep, sleep.Kind)
		require.NotNil(t, sleep.Until)
		require.Equal(t, "ship", run.Journal[3].Name)
		// The last step ran after the wake time, by the database clock.
		require.False(t, run.Journal[3].FinishedAt.Before(*sleep.Until))
		require.Equal(t, 2, run.Invocations, "one invocation before the sleep, one after")
	})

	t.Run("ChainRunsTenSteps", func(t *testing.T) {
		t.Parallel()
		res := mustComplete(t, c, "chain", `{"steps":10}`)
		require.JSONEq(t, `{"sum":55}`, string(*res.Output))
		run := getRun(t, c, res.ID)
		require.Len(t, run.Journal, 10)
		require.Equal(t, "step-10", run.Journal[9].Name)
		require.Equal(t, 1, run.Invocations, "ten steps, one invocation")
	})

	t.Run("FlakyRetriesItsStep", func(t *testing.T) {
		t.Parallel()
		res := mustComplete(t, c, "flaky", `{"fail_times":2}`)
		run := getRun(t, c, res.ID)
		require.Len(t, run.Journal, 1)
		require.Equal(t, 3, *run.Journal[0].Attempt)
		require.Len(t, run.Failures, 2, "both failed attempts are kept")
		require.Equal(t, 1, run.Failures[0].Attempt)
		require.Equal(t, 2, run.Failures[1].Attempt)
		require.Equal(t, 3, run.Invocations, "each retry of the step is an invocation")
		require.Zero(t, run.FailedInvocations, "a step's failed attempts are not failed invocations")
	})

	t.Run("FlakyFailsPastItsAttempts", func(t *testing.T) {
		t.Parallel()
		resp := startRun(t, c, "flaky", `{"fail_times":5}`, nil)
		require.Equal(t, http.StatusOK, resp.StatusCode())
		require.Equal(t, protocol.RunStatusFailed, resp.JSON200.Status)
		require.NotNil(t, resp.JSON200.Error)
		require.Contains(t, resp.JSON200.Error.Message, "flaky")
	})

	t.Run("AsyncThenAttach", func(t *testing.T) {
		t.Parallel()
		resp := startRun(t, c, "orders.checkout", `{}`, &protocol.StartRunParams{})
		require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
		id := resp.JSON202.ID
		require.Equal(t, "/v1/runs/"+id+"/result", resp.HTTPResponse.Header.Get("Location"))
		res, err := c.GetRunResultWithResponse(t.Context(), id, &protocol.GetRunResultParams{Wait: ptr("30s")})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
		require.Equal(t, protocol.RunStatusCompleted, res.JSON200.Status)
	})

	t.Run("WaitRunsOutWith202", func(t *testing.T) {
		t.Parallel()
		resp := startRun(t, c, "orders.checkout", `{"sleep_ms":1000}`, &protocol.StartRunParams{Wait: ptr("100ms")})
		require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
		// Where it stands when the wait ran out (running, or asleep) depends on the
		// machine's speed; that it has not finished does not.
		require.Contains(t, []protocol.RunStatus{protocol.RunStatusRunning, protocol.RunStatusSuspended}, resp.JSON202.Status)
		res, err := c.GetRunResultWithResponse(t.Context(), resp.JSON202.ID, &protocol.GetRunResultParams{Wait: ptr("30s")})
		require.NoError(t, err)
		require.Equal(t, protocol.RunStatusCompleted, res.JSON200.Status)
	})
}

func TestIdempotency(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	c := s.Client(t, s.Token)

	first := startRun(t, c, "hello", `{"name":"a"}`, &protocol.StartRunParams{Wait: ptr("30s"), IdempotencyKey: ptr("k1")})
	require.Equal(t, http.StatusOK, first.StatusCode())
	again := startRun(t, c, "hello", `{ "name" : "a" }`, &protocol.StartRunParams{Wait: ptr("30s"), IdempotencyKey: ptr("k1")})
	require.Equal(t, http.StatusOK, again.StatusCode())
	require.Equal(t, first.JSON200.ID, again.JSON200.ID, "the same key and input return the same run")

	async := startRun(t, c, "hello", `{"name":"a"}`, &protocol.StartRunParams{IdempotencyKey: ptr("k1")})
	require.Equal(t, http.StatusOK, async.StatusCode(), "a finished run answers 200 even without wait")
	require.Equal(t, first.JSON200.ID, async.JSON200.ID)

	other := startRun(t, c, "hello", `{"name":"b"}`, &protocol.StartRunParams{Wait: ptr("30s"), IdempotencyKey: ptr("k1")})
	require.Equal(t, http.StatusConflict, other.StatusCode())
	require.Contains(t, other.ApplicationProblemJSON409.Detail, "different input")

	// Keys are per function.
	checkout := startRun(t, c, "orders.checkout", `{}`, &protocol.StartRunParams{Wait: ptr("30s"), IdempotencyKey: ptr("k1")})
	require.Equal(t, http.StatusOK, checkout.StatusCode())
	require.NotEqual(t, first.JSON200.ID, checkout.JSON200.ID)

	// Runs are found by their key, whatever their function.
	mustComplete(t, c, "hello", `{"name":"no key"}`)
	byKey, err := c.ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{IdempotencyKey: ptr("k1")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, byKey.StatusCode(), string(byKey.Body))
	var ids []string
	for _, r := range byKey.JSON200.Runs {
		ids = append(ids, r.ID)
	}
	require.ElementsMatch(t, []string{first.JSON200.ID, checkout.JSON200.ID}, ids)
}

func TestFunctions(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	ctx := t.Context()

	reg := func(name, url string, cfg *protocol.FunctionConfig) *protocol.RegisterFunctionResponse {
		resp, err := c.RegisterFunctionWithResponse(ctx, name, protocol.FunctionRegistration{URL: url, Config: cfg})
		require.NoError(t, err)
		return resp
	}
	r1 := reg("f1", "http://127.0.0.1:1/f1", nil)
	require.Equal(t, http.StatusOK, r1.StatusCode(), string(r1.Body))
	require.Equal(t, 1, r1.JSON200.Revision)
	r2 := reg("f1", "http://127.0.0.1:1/f1v2", &protocol.FunctionConfig{Timeout: ptr("10s"), Retries: &protocol.RetryPolicy{MaxAttempts: ptr(5)}})
	require.Equal(t, 2, r2.JSON200.Revision)

	got, err := c.GetFunctionWithResponse(ctx, "f1")
	require.NoError(t, err)
	require.Equal(t, 2, got.JSON200.Revision)
	require.Equal(t, "http://127.0.0.1:1/f1v2", got.JSON200.URL)
	require.Equal(t, "10s", *got.JSON200.Config.Timeout)

	list, err := c.ListFunctionsWithResponse(ctx)
	require.NoError(t, err)
	require.Len(t, list.JSON200.Functions, 1)

	for _, bad := range []struct{ name, url, timeout, want string }{
		{"-bad", "http://127.0.0.1:1/", "", "function name"},
		{"ok", "ftp://x/", "", `url scheme "ftp" is not supported`},
		{"ok", "/relative", "", "url must be absolute"},
		{"ok", "http://127.0.0.1:1/", "soon", "timeout"},
		{"ok", "http://169.254.169.254/latest/meta-data/", "", `url host "169.254.169.254" is a cloud metadata address, which this gateway does not dial`},
	} {
		var cfg *protocol.FunctionConfig
		if bad.timeout != "" {
			cfg = &protocol.FunctionConfig{Timeout: &bad.timeout}
		}
		resp := reg(bad.name, bad.url, cfg)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
		require.Contains(t, resp.ApplicationProblemJSON400.Detail, bad.want)
	}

	del, err := c.DeleteFunctionWithResponse(ctx, "f1")
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, del.StatusCode())
	gone, err := c.GetFunctionWithResponse(ctx, "f1")
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, gone.StatusCode())
	require.Contains(t, gone.ApplicationProblemJSON404.Detail, `"f1" is not registered`)
	require.Equal(t, http.StatusNotFound, startRun(t, c, "f1", `{}`, nil).StatusCode())

	r3 := reg("f1", "http://127.0.0.1:1/f1", nil)
	require.Equal(t, 3, r3.JSON200.Revision, "revisions go on after a delete")

	sync, err := c.SyncAppWithResponse(ctx, nil, protocol.AppSync{URL: "http://127.0.0.1:1/"})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadGateway, sync.StatusCode())
	require.Contains(t, sync.ApplicationProblemJSON502.Detail, "manifest")
}

func TestRunsList(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	c := s.Client(t, s.Token)
	var ids []string
	for i := range 5 {
		ids = append(ids, mustComplete(t, c, "hello", fmt.Sprintf(`{"name":"%d"}`, i)).ID)
	}
	mustComplete(t, c, "orders.checkout", `{}`)

	var seen []string
	params := &protocol.ListRunsParams{Function: ptr("hello"), Limit: ptr(2)}
	for {
		page, err := c.ListRunsWithResponse(t.Context(), params)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, page.StatusCode(), string(page.Body))
		for _, r := range page.JSON200.Runs {
			require.Equal(t, "hello", r.Function)
			seen = append(seen, r.ID)
		}
		if page.JSON200.NextCursor == nil {
			break
		}
		params.Cursor = page.JSON200.NextCursor
	}
	require.Len(t, seen, 5)
	for i := range ids {
		require.Equal(t, ids[len(ids)-1-i], seen[i], "newest first")
	}

	failed, err := c.ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{Status: ptr(protocol.RunStatusFailed)})
	require.NoError(t, err)
	require.Empty(t, failed.JSON200.Runs)

	future := time.Now().Add(time.Hour)
	none, err := c.ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{CreatedAfter: &future})
	require.NoError(t, err)
	require.Empty(t, none.JSON200.Runs)

	bad, err := c.ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{Cursor: ptr("garbage")})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, bad.StatusCode())
}

// rawRequest sends a request with full control of headers and body.
func rawRequest(t *testing.T, method, url, token, contentType string, body io.Reader) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, body)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	raw, _ := io.ReadAll(resp.Body)
	if len(raw) > 0 {
		require.NoError(t, json.Unmarshal(raw, &out), string(raw))
	}
	if resp.StatusCode >= 400 {
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
		require.NotEmpty(t, out["detail"])
	}
	return resp.StatusCode, out
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{MaxBodyBytes: 1024})
	s.SyncExamples(t)
	runs := s.URL + "/v1/functions/hello/runs"
	other := s.NewToken(t, auth.Identity{Subject: "x", Tenant: "other", Roles: []string{"admin"}})
	expired, err := auth.NewToken(s.JWTSecret, auth.Identity{Subject: "x", Tenant: auth.DefaultTenant}, -time.Hour)
	require.NoError(t, err)
	forged, err := auth.NewToken([]byte("another-secret-0123456789abcdef0123"), auth.Identity{Subject: "x", Tenant: auth.DefaultTenant}, time.Hour)
	require.NoError(t, err)

	for _, tc := range []struct {
		name, method, url, token, contentType, body string
		status                                      int
		detail                                      string
	}{
		{"MalformedJSON", "POST", runs, s.Token, "application/json", `{"name":`, 400, "not valid JSON"},
		{"NotJSONType", "POST", runs, s.Token, "application/xml", `<a/>`, 415, "must be JSON"},
		{"UnknownFunction", "POST", s.URL + "/v1/functions/nope/runs", s.Token, "", `{}`, 404, `"nope" is not registered`},
		{"MissingToken", "POST", runs, "", "", `{}`, 401, "missing Authorization"},
		{"GarbageToken", "POST", runs, "garbage", "", `{}`, 401, "malformed"},
		{"ExpiredToken", "GET", s.URL + "/v1/runs", expired, "", "", 401, "expired"},
		{"ForgedToken", "GET", s.URL + "/v1/functions", forged, "", "", 401, "signature is invalid"},
		{"TooLarge", "POST", runs, s.Token, "", `{"name":"` + strings.Repeat("x", 2048) + `"}`, 413, "larger than"},
		{"BadWait", "POST", runs + "?wait=forever", s.Token, "", `{}`, 400, "wait"},
		{"WaitTooLong", "POST", runs + "?wait=1h", s.Token, "", `{}`, 400, "maximum"},
		{"RunNotUUID", "GET", s.URL + "/v1/runs/xyz", s.Token, "", "", 404, "does not exist"},
		{"RunOfAnotherTenant", "GET", s.URL + "/v1/functions/hello", other, "", "", 404, "not registered"},
		{"NoSuchEndpoint", "GET", s.URL + "/v1/nothing", s.Token, "", "", 404, "no such endpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			status, body := rawRequest(t, tc.method, tc.url, tc.token, tc.contentType, strings.NewReader(tc.body))
			require.Equal(t, tc.status, status, body)
			require.Contains(t, body["detail"], tc.detail)
			if tc.token != "" {
				require.NotContains(t, fmt.Sprint(body), tc.token, "a problem never echoes the token")
			}
		})
	}

	t.Run("EmptyBodyIsNullInput", func(t *testing.T) {
		t.Parallel()
		status, body := rawRequest(t, "POST", runs+"?wait=30s", s.Token, "", nil)
		require.Equal(t, 200, status, body)
		require.Equal(t, "Hello, World!", body["output"].(map[string]any)["greeting"])
	})

	t.Run("HealthzNeedsNoToken", func(t *testing.T) {
		t.Parallel()
		status, body := rawRequest(t, "GET", s.URL+"/healthz", "", "", nil)
		require.Equal(t, 200, status)
		require.Equal(t, "ok", body["status"])
	})

	t.Run("TenantsDoNotSeeEachOthersRuns", func(t *testing.T) {
		t.Parallel()
		res := mustComplete(t, s.Client(t, s.Token), "hello", `{}`)
		status, _ := rawRequest(t, "GET", s.URL+"/v1/runs/"+res.ID, other, "", nil)
		require.Equal(t, 404, status)
		status, _ = rawRequest(t, "GET", s.URL+"/v1/runs/"+res.ID+"/result", other, "", nil)
		require.Equal(t, 404, status)
		status, body := rawRequest(t, "GET", s.URL+"/v1/runs", other, "", nil)
		require.Equal(t, 200, status)
		require.Empty(t, body["runs"])
	})
}

// badFunctions serves endpoints that misbehave in each way a function can.
func badFunctions(t *testing.T, hits *atomic.Int32) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/garbage", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte("this is not JSON"))
	})
	mux.HandleFunc("/status500", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "database on fire", http.StatusInternalServerError)
	})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		io.Copy(io.Discard, r.Body) // so the server notices the gateway hanging up
		<-r.Context().Done()
	})
	mux.HandleFunc("/badstatus", func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte(`{"status":"maybe"}`))
	})
	return mux
}

func TestMisbehavingFunctions(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	for _, tc := range []struct {
		path, errType, message string
		hits                   int32 // 3: retried per the policy; 1: failed at once
	}{
		{"garbage", "malformed_answer", "not a JSON protocol answer", 3},
		{"status500", "http_status", "HTTP 500: database on fire", 3},
		{"hang", "timeout", "did not answer within its timeout of 200ms", 3},
		{"badstatus", "bad_answer", `status "maybe" is not one of completed, failed, suspended`, 1},
	} {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			var hits atomic.Int32
			url := s.ServeApp(t, badFunctions(t, &hits)) + tc.path
			resp, err := c.RegisterFunctionWithResponse(t.Context(), tc.path, protocol.FunctionRegistration{URL: url, Config: &protocol.FunctionConfig{
				Timeout: ptr("200ms"),
				Retries: &protocol.RetryPolicy{MaxAttempts: ptr(3), InitialInterval: ptr("10ms"), MaxInterval: ptr("20ms")},
			}})
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode())

			run := startRun(t, c, tc.path, `{}`, nil)
			require.Equal(t, http.StatusOK, run.StatusCode(), string(run.Body))
			require.Equal(t, protocol.RunStatusFailed, run.JSON200.Status)
			require.Equal(t, tc.errType, run.JSON200.Error.Type)
			require.Contains(t, run.JSON200.Error.Message, tc.message)
			require.EqualValues(t, tc.hits, hits.Load())
			detail := getRun(t, c, run.JSON200.ID)
			require.Equal(t, int(tc.hits), detail.Invocations)
			require.Equal(t, int(tc.hits), detail.FailedInvocations, "each invocation failed")
			if tc.hits == 1 {
				require.Empty(t, detail.Failures, "an answer that can never be applied is not retried")
				return
			}
			require.Contains(t, run.JSON200.Error.Message, "attempt 3 of 3; giving up")
			require.Len(t, detail.Failures, 2, "the failed attempts before the last are kept")
		})
	}
}

// TestReplayAfterDroppedConnection kills the first invocation in step 3, once step 2 is
// journaled (a step's entry is checkpointed when the next step starts): the retry
// replays steps 1 and 2 from the journal and runs step 3 to its end once.
func TestReplayAfterDroppedConnection(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	var ran [4]atomic.Int32
	kill := make(chan struct{}, 1)
	app := s.NewApp()
	functions.Register(app, "replay", func(ctx context.Context, _ struct{}) (string, error) {
		for i := 1; i <= 3; i++ {
			if _, err := step.Run(ctx, fmt.Sprintf("step%d", i), func(ctx context.Context) (int, error) {
				if i == 3 && functions.RunFrom(ctx).Attempt == 1 {
					kill <- struct{}{} // the wrapper drops the connection
					<-ctx.Done()
					return 0, ctx.Err()
				}
				return int(ran[i].Add(1)), nil
			}); err != nil {
				return "", err
			}
		}
		return "done", nil
	}, functions.InvocationAttempts(3), functions.InvocationBackoff(10*time.Millisecond, 10*time.Millisecond))

	dropper := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			app.ServeHTTP(w, r.WithContext(ctx))
		}()
		select {
		case <-done:
		case <-kill:
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			cancel() // a hijacked request's context is not cancelled by the close
			<-done
		}
	})
	s.Sync(t, s.ServeApp(t, dropper))

	c := s.Client(t, s.Token)
	res := mustComplete(t, c, "replay", `{}`)
	require.JSONEq(t, `"done"`, string(*res.Output))
	for i := 1; i <= 3; i++ {
		require.EqualValues(t, 1, ran[i].Load(), "step %d ran once", i)
	}
	run := getRun(t, c, res.ID)
	require.Equal(t, 2, run.Invocations)
	require.Len(t, run.Journal, 3)
	require.Equal(t, 1, run.FailedInvocations)
	require.Len(t, run.Failures, 1)
	require.Equal(t, "connection", run.Failures[0].Error.Type)
}

// TestNondeterminism fails a run whose code asks for another step than its journal holds.
func TestNondeterminism(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	app := s.NewApp()
	functions.Register(app, "fickle", func(ctx context.Context, _ struct{}) (string, error) {
		name := "first-name"
		if functions.RunFrom(ctx).Attempt > 1 {
			name = "second-name"
		}
		if _, err := step.Run(ctx, name, func(ctx context.Context) (int, error) { return 1, nil }); err != nil {
			return "", err
		}
		if functions.RunFrom(ctx).Attempt == 1 {
			return "", fmt.Errorf("transient failure") // retried: a 500
		}
		return "ok", nil
	}, functions.InvocationAttempts(3), functions.InvocationBackoff(time.Millisecond, time.Millisecond))
	s.Sync(t, s.ServeApp(t, app))
	c := s.Client(t, s.Token)
	resp := startRun(t, c, "fickle", `{}`, nil)
	require.Equal(t, protocol.RunStatusFailed, resp.JSON200.Status, string(resp.Body))
	require.Equal(t, "nondeterminism", resp.JSON200.Error.Type)
	require.Contains(t, resp.JSON200.Error.Message, "first-name")
	require.Contains(t, resp.JSON200.Error.Message, "second-name")
}

func TestCheckpoint(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	ctx := t.Context()
	run, created, err := journal.CreateRun(ctx, s.Pool, journal.NewRun{
		ID: "01a22695-0000-7000-8000-000000000001", Tenant: auth.DefaultTenant, Function: "hello",
		Input: json.RawMessage(`{}`), Identity: journal.Identity{Subject: "t", Tenant: auth.DefaultTenant}, Claim: true, Lease: time.Minute,
	})
	require.NoError(t, err)
	require.True(t, created)
	url := s.URL + "/v1/runs/" + run.ID + "/checkpoint"
	token := s.Tokens.Issue(t.Context(), run.ID, 1, time.Now().Add(time.Minute))
	post := func(token, body string) (int, map[string]any) {
		return rawRequest(t, "POST", url, token, "application/json", bytes.NewBufferString(body))
	}

	status, body := post(token, `{"seq":1,"kind":"step","name":"a","output":{"x":1}}`)
	require.Equal(t, 200, status, body)
	status, body = post(token, `{"seq":1,"kind":"step","name":"a","output":{ "x" : 1 }}`)
	require.Equal(t, 200, status, "an identical repeat is a harmless retry: %v", body)
	status, body = post(token, `{"seq":1,"kind":"step","name":"b","output":1}`)
	require.Equal(t, 409, status)
	require.Equal(t, "nondeterminism", body["type"])

	status, _ = post(s.Token, `{"seq":2,"kind":"step","name":"c"}`)
	require.Equal(t, 401, status, "a user token is not an invocation token")
	status, _ = post(s.Tokens.Issue(t.Context(), "01a22695-0000-7000-8000-000000000002", 1, time.Now().Add(time.Minute)), `{"seq":2,"kind":"step","name":"c"}`)
	require.Equal(t, 401, status, "a token of another run")
	status, _ = post(s.Tokens.Issue(t.Context(), run.ID, 1, time.Now().Add(-time.Minute)), `{"seq":2,"kind":"step","name":"c"}`)
	require.Equal(t, 401, status, "an expired token")
	status, body = post(s.Tokens.Issue(t.Context(), run.ID, 2, time.Now().Add(time.Minute)), `{"seq":2,"kind":"step","name":"c"}`)
	require.Equal(t, 409, status, "a token of another invocation")
	require.Equal(t, "superseded", body["type"])
	status, _ = post(token, `{"seq":0,"kind":"step","name":"c"}`)
	require.Equal(t, 400, status)
}
