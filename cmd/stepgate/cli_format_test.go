package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/protocol"
)

var t0 = time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)

func at(d time.Duration) *time.Time {
	t := t0.Add(d)
	return &t
}

func raw(s string) *protocol.AnyJSON {
	j := protocol.AnyJSON(s)
	return &j
}

func TestFormatDuration(t *testing.T) {
	t.Parallel()

	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{850*time.Microsecond + 400, "850µs"},
		{2*time.Millisecond + 300*time.Microsecond, "2ms"},
		{1250 * time.Millisecond, "1.25s"},
		{3*time.Minute + 12*time.Second + 400*time.Millisecond, "3m12s"},
		{-2 * time.Millisecond, "-2ms"},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, formatDuration(tt.d), "formatDuration(%d)", tt.d)
	}
}

func TestCompactJSON(t *testing.T) {
	t.Parallel()

	require.Equal(t, `{"a":[1,2]}`, compactJSON([]byte("{\n  \"a\": [1, 2]\n}"), 60))
	require.Equal(t, "-", compactJSON(nil, 60))
	require.Equal(t, `{"long…`, compactJSON([]byte(`{"longer":true}`), 7))
	require.Equal(t, "not json", compactJSON([]byte("not\n json"), 60))
}

func TestWriteFunctionsTable(t *testing.T) {
	t.Parallel()

	var b bytes.Buffer
	require.NoError(t, writeFunctionsTable(&b, []protocol.Function{
		{Name: "hello", Revision: 1, URL: "http://127.0.0.1:9090/hello", CreatedAt: t0},
		{Name: "orders.checkout", Revision: 12, URL: "http://127.0.0.1:9090/orders.checkout", Config: protocol.FunctionConfig{Timeout: ptr("30s")}, CreatedAt: t0},
	}))
	require.Equal(t, ""+
		"NAME             REVISION  URL                                    TIMEOUT\n"+
		"hello            1         http://127.0.0.1:9090/hello            -\n"+
		"orders.checkout  12        http://127.0.0.1:9090/orders.checkout  30s\n", b.String())
}

func TestWriteFunction(t *testing.T) {
	t.Parallel()

	var b bytes.Buffer
	require.NoError(t, writeFunction(&b, &protocol.Function{
		Name: "orders.checkout", Revision: 3, URL: "http://fn/checkout", CreatedAt: t0,
		Config: protocol.FunctionConfig{Timeout: ptr("30s"), Retries: &protocol.RetryPolicy{MaxAttempts: ptr(5)}},
	}, time.UTC))
	require.Equal(t, ""+
		"name          orders.checkout\n"+
		"revision      3\n"+
		"url           http://fn/checkout\n"+
		"timeout       30s\n"+
		"max attempts  5\n"+
		"registered    2026-01-02 15:04:05\n", b.String())
}

func TestWriteRunsTable(t *testing.T) {
	t.Parallel()

	var b bytes.Buffer
	require.NoError(t, writeRunsTable(&b, []protocol.Run{
		{ID: "0190c6d2-0000-7000-8000-000000000001", Function: "orders.checkout", Status: "completed", Invocations: 3, CreatedAt: t0, FinishedAt: at(12 * time.Millisecond)},
		{ID: "0190c6d2-0000-7000-8000-000000000002", Function: "hello", Status: "running", Invocations: 2, FailedInvocations: 1, CreatedAt: *at(time.Hour)},
		{ID: "0190c6d2-0000-7000-8000-000000000003", Function: "hello", Status: "failed", Invocations: 4, FailedInvocations: 1, Recoveries: 2, CreatedAt: *at(time.Hour)},
	}, time.UTC))
	require.Equal(t, ""+
		"ID                                    FUNCTION         STATUS     INVOCATIONS                 CREATED              DURATION\n"+
		"0190c6d2-0000-7000-8000-000000000001  orders.checkout  completed  3                           2026-01-02 15:04:05  12ms\n"+
		"0190c6d2-0000-7000-8000-000000000002  hello            running    2 (1 failed)                2026-01-02 16:04:05  -\n"+
		"0190c6d2-0000-7000-8000-000000000003  hello            failed     4 (1 failed, 2 recoveries)  2026-01-02 16:04:05  -\n", b.String())
}

func TestWriteRunDetail(t *testing.T) {
	t.Parallel()

	t.Run("CompletedWithFailures", func(t *testing.T) {
		t.Parallel()
		run := &protocol.RunDetail{
			ID:       "0190c6d2-0000-7000-8000-000000000001",
			Function: "orders.checkout", Revision: 3, Status: "completed",
			Invocations: 3, FailedInvocations: 1, Recoveries: 1,
			Identity:       protocol.Identity{Subject: "dev", Tenant: "acme", Roles: []string{"admin", "ops"}},
			IdempotencyKey: ptr("k1"),
			Input:          raw(`{ "cart": [1, 2] }`),
			Output:         raw(`{"order":"o-1"}`),
			CreatedAt:      t0, StartedAt: at(3 * time.Millisecond), FinishedAt: at(45 * time.Millisecond),
			Journal: []protocol.JournalEntry{
				{Seq: 1, Kind: "step", Name: "reserve", Output: raw(`{"ok": true}`), Attempt: ptr(1), StartedAt: at(4 * time.Millisecond), FinishedAt: at(6 * time.Millisecond)},
				{Seq: 2, Kind: "sleep", Name: "cool-off", Until: at(10 * time.Millisecond)},
				{Seq: 3, Kind: "step", Name: "charge", Output: raw(`"ch_1"`), Attempt: ptr(2), StartedAt: at(20 * time.Millisecond), FinishedAt: at(41 * time.Millisecond)},
			},
			Failures: []protocol.AttemptFailure{
				{Seq: 3, Name: ptr("charge"), Attempt: 1, Error: protocol.ErrorInfo{Type: "card_declined", Message: "try again", Retryable: ptr(true)}, CreatedAt: *at(15 * time.Millisecond)},
				{Seq: 0, Attempt: 1, Error: protocol.ErrorInfo{Type: "timeout", Message: "no answer in 30s"}, CreatedAt: *at(16 * time.Millisecond)},
			},
		}
		var b bytes.Buffer
		require.NoError(t, writeRunDetail(&b, run, time.UTC))
		require.Equal(t, ""+
			"run                 0190c6d2-0000-7000-8000-000000000001\n"+
			"function            orders.checkout@3\n"+
			"status              completed\n"+
			"invocations         3\n"+
			"failed invocations  1\n"+
			"recoveries          1\n"+
			"identity            subject dev, tenant acme, roles admin,ops\n"+
			"idempotency key     k1\n"+
			"input               {\"cart\":[1,2]}\n"+
			"output              {\"order\":\"o-1\"}\n"+
			"created             2026-01-02 15:04:05.000 UTC\n"+
			"started             2026-01-02 15:04:05.003 UTC (queued 3ms)\n"+
			"finished            2026-01-02 15:04:05.045 UTC (took 45ms)\n"+
			"\n"+
			"journal (3 entries):\n"+
			"  1  step   reserve   {\"ok\":true}                        attempt 1  2ms\n"+
			"  2  sleep  cool-off  until 2026-01-02 15:04:05.010 UTC  -          -\n"+
			"  3  step   charge    \"ch_1\"                             attempt 2  21ms\n"+
			"\n"+
			"failed attempts (2):\n"+
			"  step 3 charge  attempt 1  card_declined: try again (retryable)  2026-01-02 15:04:05.015 UTC\n"+
			"  invocation     attempt 1  timeout: no answer in 30s             2026-01-02 15:04:05.016 UTC\n",
			b.String())
	})

	t.Run("FailedWithoutJournal", func(t *testing.T) {
		t.Parallel()
		run := &protocol.RunDetail{
			ID: "r2", Function: "hello", Revision: 1, Status: "failed", Invocations: 1, FailedInvocations: 1,
			Identity:  protocol.Identity{Subject: "svc", Tenant: "t", Claims: map[string]any{"plan": "pro"}},
			Input:     raw(`null`),
			Error:     &protocol.ErrorInfo{Type: "http_status", Message: "function answered 500"},
			CreatedAt: t0,
			Journal:   []protocol.JournalEntry{},
			Failures:  []protocol.AttemptFailure{},
		}
		var b bytes.Buffer
		require.NoError(t, writeRunDetail(&b, run, time.UTC))
		require.Equal(t, ""+
			"run                 r2\n"+
			"function            hello@1\n"+
			"status              failed\n"+
			"invocations         1\n"+
			"failed invocations  1\n"+
			"recoveries          0\n"+
			"identity            subject svc, tenant t, roles -, claims {\"plan\":\"pro\"}\n"+
			"input               null\n"+
			"error               http_status: function answered 500\n"+
			"created             2026-01-02 15:04:05.000 UTC\n"+
			"\n"+
			"journal: no entries yet\n", b.String())
	})

	t.Run("StepErrorAndLongOutput", func(t *testing.T) {
		t.Parallel()
		long, err := json.Marshal(map[string]string{"blob": string(bytes.Repeat([]byte("x"), 100))})
		require.NoError(t, err)
		var b bytes.Buffer
		require.NoError(t, writeJournal(&b, []protocol.JournalEntry{
			{Seq: 1, Kind: "step", Name: "big", Output: raw(string(long))},
			{Seq: 2, Kind: "step", Name: "pay", Error: &protocol.ErrorInfo{Type: "declined", Message: "no funds"}, Attempt: ptr(3)},
		}, time.UTC))
		require.Equal(t, ""+
			"journal (2 entries):\n"+
			"  1  step  big  {\"blob\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx…  -          -\n"+
			"  2  step  pay  error declined: no funds                                      attempt 3  -\n", b.String())
	})
}

func TestWriteInvokeResult(t *testing.T) {
	t.Parallel()

	var b bytes.Buffer
	require.NoError(t, writeInvokeResult(&b, 202, &protocol.RunResult{ID: "r1", Status: "queued"}))
	require.Equal(t, "run r1 is queued\nattach: stepgate runs get r1\n", b.String())

	b.Reset()
	require.NoError(t, writeInvokeResult(&b, 200, &protocol.RunResult{ID: "r1", Status: "completed", Output: raw(`{"greeting":"hi"}`)}))
	require.Equal(t, "run r1 completed\n{\"greeting\":\"hi\"}\n", b.String())

	b.Reset()
	err := writeInvokeResult(&b, 200, &protocol.RunResult{ID: "r1", Status: "failed", Error: &protocol.ErrorInfo{Type: "boom", Message: "it broke"}})
	require.EqualError(t, err, "run r1 failed: boom: it broke (details: stepgate runs get r1)")
	require.Equal(t, "run r1 failed\n", b.String())
}

func TestWriteQueue(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	require.NoError(t, writeQueue(&b, &protocol.FunctionQueue{
		Function: "orders.fulfil", Running: 2, Queued: 3, Held: 3,
		Keys: []protocol.QueueKey{
			{Key: "input.customer_id=c-9", Running: 1, Limit: 1, Held: 3},
			{Key: "", Running: 2, Limit: 0, Held: 0},
		},
		Reasons: []protocol.HeldReason{{Reason: "waiting for a concurrency slot of key input.customer_id=c-9 (limit 1)", Runs: 3}},
	}))
	require.Equal(t, `orders.fulfil: 2 running, 3 queued, 3 held

KEY                    RUNNING  LIMIT  HELD
input.customer_id=c-9  1        1      3
(function)             2        -      0

held:
  3 waiting for a concurrency slot of key input.customer_id=c-9 (limit 1)
`, b.String())
}
