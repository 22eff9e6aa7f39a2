package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/helpers/egress"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/protocol"
)

// rawFunction is a function written without the SDK, by someone who means harm: answer
// decides each answer from the invocation (and may checkpoint first). It counts its
// invocations.
type rawFunction struct {
	calls  atomic.Int32
	answer func(req *protocol.InvocationRequest, checkpoint func(entry string) (int, string)) string
}

func (f *rawFunction) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.calls.Add(1)
	var req protocol.InvocationRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	checkpoint := func(entry string) (int, string) {
		hreq, _ := http.NewRequestWithContext(context.WithoutCancel(r.Context()), "POST", req.Checkpoint.URL, strings.NewReader(entry))
		hreq.Header.Set("Authorization", "Bearer "+req.Checkpoint.Token)
		resp, err := http.DefaultClient.Do(hreq)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, f.answer(&req, checkpoint))
}

// register registers h, served on loopback, as function name with config.
func register(t *testing.T, s *stack.Stack, c *protocol.ClientWithResponses, name string, h http.Handler, config *protocol.FunctionConfig) {
	t.Helper()
	resp, err := c.RegisterFunctionWithResponse(t.Context(), name, protocol.FunctionRegistration{URL: s.ServeApp(t, h), Config: config})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
}

// mustFail starts a run of name and returns its error, after checking that it failed.
func mustFail(t *testing.T, c *protocol.ClientWithResponses, name string) protocol.ErrorInfo {
	t.Helper()
	resp := startRun(t, c, name, `{}`, nil)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	require.Equal(t, protocol.RunStatusFailed, resp.JSON200.Status, string(resp.Body))
	return *resp.JSON200.Error
}

var fastRetries = &protocol.FunctionConfig{Retries: &protocol.RetryPolicy{MaxAttempts: ptr(3), InitialInterval: ptr("1ms"), MaxInterval: ptr("2ms")}}

// TestBadAnswers: an answer that can never be applied fails the run at once, without a
// retry, with an error that says what was wrong; nothing of it is journaled.
func TestBadAnswers(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	for _, tc := range []struct {
		name, answer, typ, message string
	}{
		{"NulInOutput", `{"status":"completed","output":{"a":"x\u0000y"}}`, "bad_answer", `output contains the escape \u0000`},
		{"LoneSurrogate", `{"status":"completed","output":"\ud800"}`, "bad_answer", "unpaired UTF-16 surrogate"},
		{"NulInError", `{"status":"failed","error":{"type":"x","message":"a\u0000"}}`, "bad_answer", "error.message"},
		{"HugeNumber", `{"status":"completed","output":1e999999}`, "bad_answer", "output has a number with more than 131072 digits"},
		{"UnknownStatus", `{"status":"maybe"}`, "bad_answer", `status "maybe"`},
		{"UnknownAwait", `{"status":"suspended","await":{"type":"teleport","seq":1,"name":"x"}}`, "bad_answer", `await type "teleport"`},
		{"AwaitWithoutName", `{"status":"suspended","await":{"type":"sleep","seq":1,"name":"","duration":"1s"}}`, "bad_answer", "await name"},
		{"LongName", `{"status":"suspended","await":{"type":"sleep","seq":1,"name":"` + strings.Repeat("n", 256) + `","duration":"1s"}}`, "bad_answer", "1 to 255 bytes"},
		{"SleepForAges", `{"status":"suspended","await":{"type":"sleep","seq":1,"name":"z","duration":"876000h"}}`, "bad_answer", "sleep duration"},
		{"SleepPastYear9999", `{"status":"suspended","await":{"type":"sleep","seq":1,"name":"z","until":"9999-12-31T00:00:00Z"}}`, "bad_answer", "sleep until"},
		{"GapInSteps", `{"status":"completed","steps":[{"seq":2,"kind":"step","name":"b","output":1}]}`, "bad_answer", "seq 2 is not the journal's next"},
		{"GapInAwait", `{"status":"suspended","await":{"type":"sleep","seq":3,"name":"z","duration":"1s"}}`, "bad_answer", "seq 3 is not the journal's next"},
		{"SeqBeyondInt32", `{"status":"completed","steps":[{"seq":4294967296,"kind":"step","name":"b","output":1}]}`, "limit_exceeded", "past the journal's limit of 1000 entries"},
		{"WaitWithoutEvent", `{"status":"suspended","await":{"type":"wait_event","seq":1,"name":"w"}}`, "bad_answer", "a wait_event needs an event"},
		{"WaitMatchObject", `{"status":"suspended","await":{"type":"wait_event","seq":1,"name":"w","event":"e","match":{"data.a":{"b":1}}}}`, "bad_answer", `match "data.a" is not a string, a number, a boolean or null`},
		{"AwaitRunNotARunID", `{"status":"suspended","await":{"type":"await_run","seq":1,"name":"r","run_id":"../../runs"}}`, "bad_answer", `await_run run_id "../../runs" is not a run id (a UUID)`},
		{"WaitMatchArray", `{"status":"suspended","await":{"type":"wait_event","seq":1,"name":"w","event":"e","match":{"data.a":[1]}}}`, "bad_answer", "is not a string"},
		{"WaitMatchPath", `{"status":"suspended","await":{"type":"wait_event","seq":1,"name":"w","event":"e","match":{"identity.subject":"x"}}}`, "bad_answer", `match path "identity.subject"`},
		{"WaitMatchEmptySegment", `{"status":"suspended","await":{"type":"wait_event","seq":1,"name":"w","event":"e","match":{"data..a":"x"}}}`, "bad_answer", `match path "data..a"`},
		{"WaitManyPaths", `{"status":"suspended","await":{"type":"wait_event","seq":1,"name":"w","event":"e","match":{"data.a":1,"data.b":1,"data.c":1,"data.d":1,"data.e":1,"data.f":1,"data.g":1,"data.h":1,"data.i":1}}}`, "limit_exceeded", "9 paths, more than the limit of 8"},
		{"WaitLongMatch", `{"status":"suspended","await":{"type":"wait_event","seq":1,"name":"w","event":"e","match":{"data.a":"` + strings.Repeat("x", 1100) + `"}}}`, "limit_exceeded", "more than the limit of 1024"},
		{"WaitTimeoutTooShort", `{"status":"suspended","await":{"type":"wait_event","seq":1,"name":"w","event":"e","timeout":"10ms"}}`, "bad_answer", `timeout "10ms" is not a duration from 1s`},
		{"AnyWithoutAlternatives", `{"status":"suspended","await":{"type":"wait_any","seq":1,"name":"w"}}`, "bad_answer", "a wait_any needs its alternatives in of"},
		{"AnyOfASleep", `{"status":"suspended","await":{"type":"wait_any","seq":1,"name":"w","of":[{"type":"sleep","seq":1,"name":"w","duration":"1s"}]}}`, "bad_answer", `wait_any of[0] is a "sleep"`},
		{"AnyOfAnotherSeq", `{"status":"suspended","await":{"type":"wait_any","seq":1,"name":"w","of":[{"type":"wait_event","seq":2,"name":"w","event":"e"}]}}`, "bad_answer", "an alternative has its wait_any's (1, \"w\")"},
		{"AnyAlternativeTimeout", `{"status":"suspended","await":{"type":"wait_any","seq":1,"name":"w","of":[{"type":"receive","seq":1,"name":"w","topic":"t","timeout":"1h"}]}}`, "bad_answer", "the wait_any's timeout is the alternatives'"},
		{"AnyBadAlternative", `{"status":"suspended","await":{"type":"wait_any","seq":1,"name":"w","of":[{"type":"wait_event","seq":1,"name":"w","event":"e","match":{"data.a":[1]}}]}}`, "bad_answer", "is not a string"},
		{"AnyReceivesATopicTwice", `{"status":"suspended","await":{"type":"wait_any","seq":1,"name":"w","of":[{"type":"receive","seq":1,"name":"w","topic":"t"},{"type":"receive","seq":1,"name":"w","topic":"t"}]}}`, "bad_answer", `of[1] receives topic "t", as an earlier alternative does`},
		{"AnyOfNine", `{"status":"suspended","await":{"type":"wait_any","seq":1,"name":"w","of":[` + strings.TrimSuffix(strings.Repeat(`{"type":"wait_event","seq":1,"name":"w","event":"e"},`, 9), ",") + `]}}`, "limit_exceeded", "9 alternatives, more than the limit of 8"},
		{"StepsHoldASleep", `{"status":"completed","steps":[{"seq":1,"kind":"sleep","name":"b"}]}`, "bad_answer", "only hold finished steps"},
		{"StepsHoldASend", `{"status":"completed","steps":[{"seq":1,"kind":"send","name":"t","output":{"run_id":"0193a3c2-0000-7000-8000-000000000001"}}]}`, "bad_answer", "only hold finished steps"},
		{"ReceiveWithoutTopic", `{"status":"suspended","await":{"type":"receive","seq":1,"name":"r"}}`, "bad_answer", "a receive needs a topic"},
		{"ReceiveEmptyTopic", `{"status":"suspended","await":{"type":"receive","seq":1,"name":"r","topic":""}}`, "bad_answer", "receive: topic"},
		{"ReceiveLongTopic", `{"status":"suspended","await":{"type":"receive","seq":1,"name":"r","topic":"` + strings.Repeat("t", 256) + `"}}`, "bad_answer", "1 to 255 bytes"},
		{"ReceiveTimeoutTooShort", `{"status":"suspended","await":{"type":"receive","seq":1,"name":"r","topic":"t","timeout":"10ms"}}`, "bad_answer", `receive timeout "10ms" is not a duration from 1s`},
		{"StepsHoldACallback", `{"status":"completed","steps":[{"seq":1,"kind":"callback","name":"b","output":{"url":"u","token":"t"}}]}`, "bad_answer", "only hold finished steps"},
		{"CallbackWithoutSeq", `{"status":"suspended","await":{"type":"await_callback","seq":1,"name":"c"}}`, "bad_answer", "an await_callback needs a callback_seq"},
		{"CallbackSeqNotBefore", `{"status":"suspended","await":{"type":"await_callback","seq":1,"name":"c","callback_seq":1}}`, "bad_answer", "callback_seq 1 is not a seq before the await's (1)"},
		{"CallbackTimeoutTooLong", `{"status":"suspended","await":{"type":"await_callback","seq":2,"name":"c","callback_seq":1,"timeout":"9000h"}}`, "bad_answer", `timeout "9000h" is not a duration from 1s to 8760h`},
		{"CallbackSeqIsAStep", `{"status":"suspended","steps":[{"seq":1,"kind":"step","name":"a","output":1}],"await":{"type":"await_callback","seq":2,"name":"c","callback_seq":1}}`, "bad_answer", "names seq 1, which is not a callback of this run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &rawFunction{answer: func(*protocol.InvocationRequest, func(string) (int, string)) string { return tc.answer }}
			register(t, s, c, "bad."+tc.name, f, fastRetries)
			e := mustFail(t, c, "bad."+tc.name)
			require.Equal(t, tc.typ, e.Type, e.Message)
			require.Contains(t, e.Message, tc.message)
			require.EqualValues(t, 1, f.calls.Load(), "not retried")
		})
	}
}

// TestCheckpointRefusals: a checkpoint the journal could never hold is a 400 naming the
// field, and loses nothing already journaled.
func TestCheckpointRefusals(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	type outcome struct {
		code int
		body string
	}
	results := make(chan []outcome, 1)
	entries := []string{
		`{"seq":1,"kind":"step","name":"a","output":1}`,
		`{"seq":4294967296,"kind":"step","name":"b","output":1}`,
		`{"seq":2,"kind":"step","name":"b","output":"\u0000"}`,
		`{"seq":2,"kind":"step","name":"b\u0000","output":1}`,
		`{"seq":2,"kind":"step","name":"b","error":{"type":"t","message":"a\u0000"}}`,
		`{"seq":3,"kind":"step","name":"c","output":1}`,
		`{"seq":2,"kind":"sleep","name":"b"}`,
		`{"seq":2,"kind":"sleep","name":"b","output":{"duration":"1s"},"until":"2030-01-01T00:00:00Z"}`,
		`{"seq":2,"kind":"sleep","name":"b","output":{"duration":"-1s"}}`,
		`{"seq":2,"kind":"sleep","name":"b","output":{"duration":"2h"}}`,
		`{"seq":2,"kind":"sleep","name":"b","output":{"for":"1s"}}`,
		`{"seq":2,"kind":"sleep","name":"b","error":{"type":"t","message":"m"}}`,
		`{"seq":2,"kind":"wait_event","name":"b"}`,
		`{"seq":2,"kind":"step","name":"b","output":2,"attempt":-1}`,
		`{"seq":2,"kind":"send","name":"t","output":{"run_id":"nope","topic":"t"}}`,
		`{"seq":2,"kind":"send","name":"t","output":{"run_id":"0193a3c2-0000-7000-8000-000000000001","topic":"u"}}`,
		`{"seq":2,"kind":"send","name":"t"}`,
		`{"seq":2,"kind":"step","name":"b","output":2}`,
	}
	f := &rawFunction{answer: func(req *protocol.InvocationRequest, checkpoint func(string) (int, string)) string {
		var got []outcome
		for _, e := range entries {
			code, body := checkpoint(e)
			got = append(got, outcome{code, body})
		}
		results <- got
		return `{"status":"completed","output":"ok"}`
	}}
	register(t, s, c, "refused", f, nil)
	res := mustComplete(t, c, "refused", `{}`)
	got := <-results
	for i, want := range []struct {
		code   int
		detail string
	}{
		{200, ""},
		{400, "seq 4294967296 is not from 1 to 2147483647"},
		{400, `output contains the escape \u0000`},
		{400, "name"},
		{400, "error.message"},
		{400, "seq 3 is not the journal's next (seq 2 is not journaled)"},
		{400, `a sleep has until or output {"duration": "<duration>"}`},
		{400, `a sleep has until or output {"duration"}, not both`},
		{400, `duration "-1s" is not a duration of 0s or more`},
		{400, `a sleep of 2h0m0s in the function's process is longer than the limit of 1h0m0s`},
		{400, `a sleep's output is {"duration": "<duration>"}`},
		{400, "a sleep has no error"},
		{400, `kind "callback", "event", "patch", "reply", "send", "sleep", "step" or "value", not "wait_event"`},
		{400, "attempt -1"},
		{400, `run_id "nope" is not a run id`},
		{400, `named after its topic: "u", not "t"`},
		{400, "a send entry's output is the message"},
		{200, ""},
	} {
		require.Equal(t, want.code, got[i].code, "%s: %s", entries[i], got[i].body)
		var p protocol.Problem
		if want.code != 200 {
			require.NoError(t, json.Unmarshal([]byte(got[i].body), &p))
		}
		require.Contains(t, p.Detail, want.detail, entries[i])
	}
	run := getRun(t, c, res.ID)
	require.Len(t, run.Journal, 2, "the refusals journaled nothing")
	require.JSONEq(t, `2`, string(*run.Journal[1].Output))
}

// TestBadRequestValues: values Postgres cannot store are 400s naming the field, never
// 500s.
func TestBadRequestValues(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	for _, tc := range []struct {
		name, method, path, header, body, detail string
	}{
		{"InputNul", "POST", "/v1/functions/hello/runs", "", `{"name":"\u0000"}`, `input contains the escape \u0000`},
		{"InputSurrogate", "POST", "/v1/functions/hello/runs", "", `{"name":"\udfff"}`, "input contains an unpaired UTF-16 surrogate"},
		{"InputNumber", "POST", "/v1/functions/hello/runs", "", `{"n":1e200000}`, "input has a number"},
		{"LongIdempotencyKey", "POST", "/v1/functions/hello/runs", strings.Repeat("k", 256), `{}`, "Idempotency-Key"},
		{"EventDataNul", "POST", "/v1/events", "", `{"name":"e","data":"\u0000"}`, "data contains the escape"},
		{"EventNameNul", "POST", "/v1/events", "", `{"name":"e\u0000"}`, "event name"},
		{"EventIDTooLong", "POST", "/v1/events", "", `{"name":"e","id":"` + strings.Repeat("i", 300) + `"}`, "event id"},
		{"ScheduleInputNul", "PUT", "/v1/schedules/nightly", "", `{"function":"hello","cron":"@daily","input":"\u0000"}`, "input contains the escape"},
		{"ConfigRoleNul", "PUT", "/v1/functions/x", "", `{"url":"http://127.0.0.1:1/x","config":{"invoke_roles":["a\u0000"]}}`, "config contains the escape"},
		{"CancelKeyPrefixNul", "POST", "/v1/runs/cancel", "", `{"idempotency_key_prefix":"a\u0000"}`, "idempotency_key_prefix contains a NUL byte at byte 1"},
		{"CancelFunctionNul", "POST", "/v1/runs/cancel", "", `{"function":"a\u0000"}`, "function"},
		{"RerunKeyPrefixNul", "POST", "/v1/runs/rerun", "", `{"filter":{"idempotency_key_prefix":"\u0000"}}`, "filter.idempotency_key_prefix contains a NUL byte at byte 0"},
		{"RerunErrorTypeNul", "POST", "/v1/runs/rerun", "", `{"filter":{"error_type":"x\u0000"}}`, "filter.error_type contains a NUL byte at byte 1"},
		{"RerunFunctionNul", "POST", "/v1/runs/rerun", "", `{"filter":{"function":"\u0000"}}`, "filter.function"},
		{"RerunErrorGroupNul", "POST", "/v1/runs/rerun", "", `{"filter":{"error_group":"\u0000"}}`, "filter.error_group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req, err := http.NewRequestWithContext(t.Context(), tc.method, s.URL+tc.path, strings.NewReader(tc.body))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+s.Token)
			if tc.header != "" {
				req.Header.Set("Idempotency-Key", tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			var p protocol.Problem
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, p.Detail)
			require.Contains(t, p.Detail, tc.detail)
		})
	}
}

// TestJournalLimits: a run whose journal passes a bound fails with limit_exceeded naming
// it, whether the function checkpoints or answers, and the gateway keeps nothing past it.
func TestJournalLimits(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Limits: invoker.Limits{MaxOutputBytes: 1000, MaxEntries: 5, MaxJournalBytes: 2500}})
	c := s.Client(t, s.Token)

	app := s.NewApp()
	functions.Register(app, "big", func(ctx context.Context, in struct{ Size int }) (string, error) {
		return step.Run(ctx, "big", func(context.Context) (string, error) { return strings.Repeat("x", in.Size), nil })
	})
	functions.Register(app, "many", func(ctx context.Context, in struct{ Steps, Size int }) (int, error) {
		for i := range in.Steps {
			if _, err := step.Run(ctx, fmt.Sprint("s", i), func(context.Context) (string, error) { return strings.Repeat("y", in.Size), nil }); err != nil {
				return 0, err
			}
		}
		return in.Steps, nil
	})
	functions.Register(app, "loud", func(ctx context.Context, _ struct{}) (string, error) { return strings.Repeat("z", 2000), nil })
	s.Sync(t, s.ServeApp(t, app))

	for _, tc := range []struct {
		name, function, input, message string
		journaled                      int
	}{
		{"Output", "big", `{"Size":2000}`, "limit of 1000 (STEPGATE_MAX_OUTPUT_BYTES)", 0},
		{"Entries", "many", `{"Steps":6,"Size":1}`, "entry 6 is past the journal's limit of 5 entries (STEPGATE_MAX_JOURNAL_ENTRIES)", 5},
		{"Bytes", "many", `{"Steps":4,"Size":900}`, "more than its limit of 2500 bytes (STEPGATE_MAX_JOURNAL_BYTES)", 2},
		{"RunOutput", "loud", `{}`, "the answer's output is 2002 bytes, more than the limit of 1000", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp := startRun(t, c, tc.function, tc.input, nil)
			require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
			require.Equal(t, protocol.RunStatusFailed, resp.JSON200.Status, string(resp.Body))
			require.Equal(t, "limit_exceeded", resp.JSON200.Error.Type)
			require.Contains(t, resp.JSON200.Error.Message, tc.message)
			run := getRun(t, c, resp.JSON200.ID)
			require.Len(t, run.Journal, tc.journaled)
			require.Equal(t, 1, run.Invocations, "a limit is not retried")
		})
	}

	t.Run("WithinTheLimits", func(t *testing.T) {
		t.Parallel()
		res := mustComplete(t, c, "many", `{"Steps":5,"Size":400}`)
		require.JSONEq(t, `5`, string(*res.Output))
	})
}

// TestFunctionConfigCaps: a config past the gateway's caps is a 400 naming the cap.
func TestFunctionConfigCaps(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Limits: invoker.Limits{MinBackoff: 100 * 1e6}})
	c := s.Client(t, s.Token)
	roles := make([]string, 101)
	for i := range roles {
		roles[i] = fmt.Sprint("r", i)
	}
	for _, tc := range []struct {
		name   string
		config protocol.FunctionConfig
		detail string
	}{
		{"Timeout", protocol.FunctionConfig{Timeout: ptr("16m")}, "config.timeout 16m0s is longer than the gateway's limit of 15m0s (STEPGATE_MAX_FUNCTION_TIMEOUT)"},
		{"Attempts", protocol.FunctionConfig{Retries: &protocol.RetryPolicy{MaxAttempts: ptr(101)}}, "config.retries.max_attempts 101 is more than the gateway's limit of 100 (STEPGATE_MAX_ATTEMPTS)"},
		{"BackoffFloor", protocol.FunctionConfig{Retries: &protocol.RetryPolicy{InitialInterval: ptr("10ms")}}, "config.retries.initial_interval 10ms is shorter than the gateway's floor of 100ms (STEPGATE_MIN_BACKOFF)"},
		{"MaxInterval", protocol.FunctionConfig{Retries: &protocol.RetryPolicy{MaxInterval: ptr("48h")}}, "config.retries.max_interval 48h0m0s is longer than the gateway's limit of 24h0m0s"},
		{"Roles", protocol.FunctionConfig{InvokeRoles: &roles}, "config.invoke_roles has 101 roles, more than the limit of 100"},
		{"RoleName", protocol.FunctionConfig{InvokeRoles: &[]string{strings.Repeat("r", 256)}}, "config.invoke_roles[0]"},
		{"ResumeRoles", protocol.FunctionConfig{ResumeRoles: &roles}, "config.resume_roles has 101 roles, more than the limit of 100"},
		{"ResumeRoleName", protocol.FunctionConfig{ResumeRoles: &[]string{"ok", ""}}, "config.resume_roles[1]"},
		{"TriggerName", protocol.FunctionConfig{Triggers: &[]protocol.EventTrigger{{Event: strings.Repeat("e", 256)}}}, "config.triggers[0].event"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			resp, err := c.RegisterFunctionWithResponse(t.Context(), "capped", protocol.FunctionRegistration{URL: "http://127.0.0.1:1/x", Config: &tc.config})
			require.NoError(t, err)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
			require.Contains(t, resp.ApplicationProblemJSON400.Detail, tc.detail)
		})
	}
	ok, err := c.RegisterFunctionWithResponse(t.Context(), "capped", protocol.FunctionRegistration{URL: "http://127.0.0.1:1/x", Config: &protocol.FunctionConfig{
		Timeout: ptr("15m"), Retries: &protocol.RetryPolicy{MaxAttempts: ptr(100), InitialInterval: ptr("100ms")}}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, ok.StatusCode(), "at the caps is fine: %s", ok.Body)
}

// TestStepRetriesAreCapped: a function that asks, forever, for another retry of its step
// gets the gateway's count of attempts, not its own: past them the step fails.
func TestStepRetriesAreCapped(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Limits: invoker.Limits{MaxAttempts: 4}})
	c := s.Client(t, s.Token)
	var sawFailure atomic.Bool
	f := &rawFunction{answer: func(req *protocol.InvocationRequest, _ func(string) (int, string)) string {
		if len(req.Journal) > 0 {
			// The gateway journaled the step's failure: a well-behaved function replays it.
			sawFailure.Store(req.Journal[0].Error != nil)
			return `{"status":"failed","error":{"type":"step_failed","message":"gave up"}}`
		}
		// Always "attempt 1 of 1000".
		return `{"status":"suspended","await":{"type":"retry","seq":1,"name":"charge","attempt":1,
			"error":{"type":"step_failed","message":"card declined"},"retry":{"max_attempts":1000,"initial_interval":"1ms"}}}`
	}}
	register(t, s, c, "greedy", f, nil)
	mustFail(t, c, "greedy")
	require.True(t, sawFailure.Load(), "the step's failure was journaled for the function")
	require.EqualValues(t, 5, f.calls.Load(), "four attempts, the cap, and one invocation to replay the failure")

	resp, err := c.ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{Function: ptr("greedy")})
	require.NoError(t, err)
	run := getRun(t, c, resp.JSON200.Runs[0].ID)
	require.Len(t, run.Journal, 1)
	require.Equal(t, 4, *run.Journal[0].Attempt)
	require.Contains(t, run.Journal[0].Error.Message, "card declined (attempt 4 of 4; the gateway gives up)")
	require.Len(t, run.Failures, 3, "attempts 1 to 3 are kept")
}

// TestRedirectsAreNotFollowed: a function or an app that answers a redirect is not
// followed there; the run's error names where it pointed.
func TestRedirectsAreNotFollowed(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	var targetHits atomic.Int32
	target := s.ServeApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		targetHits.Add(1)
		_, _ = io.WriteString(w, `{"status":"completed","output":"from the redirect"}`)
	}))
	redirect := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, target+"stolen", http.StatusFound) })
	register(t, s, c, "redirects", redirect, fastRetries)
	e := mustFail(t, c, "redirects")
	require.Contains(t, e.Message, "function answered HTTP 302, a redirect to "+target+"stolen, which the gateway does not follow")

	sync, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, redirect)})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadGateway, sync.StatusCode())
	require.Contains(t, sync.ApplicationProblemJSON502.Detail, "a redirect to "+target+"stolen, which the gateway does not follow")
	require.Zero(t, targetHits.Load())
}

// TestSSRF runs a gateway with the production policy (the public internet only): no
// function or app URL reaches loopback, private networks or cloud metadata, at
// registration or at the dial.
func TestSSRF(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Egress: &egress.Policy{}})
	c := s.Client(t, s.Token)
	var hits atomic.Int32
	local := s.ServeApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	port := strings.TrimSuffix(local[strings.LastIndex(local, ":")+1:], "/")
	for _, url := range []string{
		local,
		"http://localhost:" + port + "/",
		"http://[::1]:" + port + "/",
		"http://[::ffff:127.0.0.1]:" + port + "/",
		"http://169.254.169.254/latest/meta-data/",
		"http://10.0.0.1/",
		"http://192.168.1.1/",
		"http://100.64.0.1/",
		"http://[fd00::1]/",
		"http://2130706433/",
	} {
		resp, err := c.RegisterFunctionWithResponse(t.Context(), "ssrf", protocol.FunctionRegistration{URL: url})
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode(), url)
		require.Contains(t, resp.ApplicationProblemJSON400.Detail, "url host", url)
		sync, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: url})
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, sync.StatusCode(), url)
	}
	require.Zero(t, hits.Load(), "nothing on loopback was reached")
}

// TestFunctionURLCredentials: what may be a secret in a function's URL (its user
// information, path, query values and fragment) is shown only to roles that may manage
// functions, of the function's own tenant.
func TestFunctionURLCredentials(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	const masked = "http://xxxxx:xxxxx@127.0.0.1:1/xxxxx?region=xxxxx&token=xxxxx#xxxxx"
	urls := map[string]string{
		auth.DefaultTenant: "http://deploy:s3cret@127.0.0.1:1/hooks/sk_live_0123456789abcdef?token=abc&region=eu#frag",
		"t2":               "http://ops:hunter2@127.0.0.1:1/hooks/sk_live_fedcba9876543210?token=def&region=us#frag",
	}
	for tenant, url := range urls {
		admin := s.Client(t, s.NewToken(t, auth.Identity{Subject: "a", Tenant: tenant, Roles: []string{"admin"}}))
		reg, err := admin.RegisterFunctionWithResponse(t.Context(), "secretive", protocol.FunctionRegistration{URL: url})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, reg.StatusCode(), string(reg.Body))
		require.Equal(t, url, reg.JSON200.URL)
	}

	for tenant, url := range urls {
		for role, want := range map[string]string{
			"developer": url,
			"viewer":    masked,
			"operator":  masked,
		} {
			c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "u", Tenant: tenant, Roles: []string{role}}))
			got, err := c.GetFunctionWithResponse(t.Context(), "secretive")
			require.NoError(t, err)
			require.Equal(t, want, got.JSON200.URL, tenant+" "+role)
			list, err := c.ListFunctionsWithResponse(t.Context())
			require.NoError(t, err)
			require.Len(t, list.JSON200.Functions, 1)
			require.Equal(t, want, list.JSON200.Functions[0].URL, tenant+" "+role)
		}
	}

	// A URL with no user information, path, query or fragment is shown as it is.
	admin := s.Client(t, s.Token)
	reg, err := admin.RegisterFunctionWithResponse(t.Context(), "plain", protocol.FunctionRegistration{URL: "http://127.0.0.1:1/"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, reg.StatusCode(), string(reg.Body))
	viewer := s.Client(t, s.NewToken(t, auth.Identity{Subject: "u", Tenant: auth.DefaultTenant, Roles: []string{"viewer"}}))
	got, err := viewer.GetFunctionWithResponse(t.Context(), "plain")
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:1/", got.JSON200.URL)
}
