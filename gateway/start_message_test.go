package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/protocol"
)

// startWithMessage posts body to POST /v1/functions/{name}/runs/with-message with key
// as its Idempotency-Key.
func startWithMessage(t *testing.T, c *protocol.ClientWithResponses, name, key, body string, edit ...protocol.RequestEditorFn) *protocol.StartRunWithMessageResponse {
	t.Helper()
	resp, err := c.StartRunWithMessageWithBodyWithResponse(context.Background(), name,
		&protocol.StartRunWithMessageParams{IdempotencyKey: key}, "application/json", strings.NewReader(body), edit...)
	require.NoError(t, err)
	return resp
}

func mustStartWithMessage(t *testing.T, c *protocol.ClientWithResponses, name, key, body string) protocol.StartedWithMessage {
	t.Helper()
	resp := startWithMessage(t, c, name, key, body)
	require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
	return *resp.JSON202
}

// TestStartRunWithMessage starts runs with a message (signal-with-start) through a real
// gateway and Postgres.
func TestStartRunWithMessage(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Gateway: manyLongPolls})
	alice := auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}
	c := s.Client(t, s.NewToken(t, alice))
	other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"developer"}}))
	invokeOnly := s.Client(t, s.NewToken(t, auth.Identity{Subject: "ivan", Tenant: "t1", Roles: []string{"runs:invoke"}}))
	sendOnly := s.Client(t, s.NewToken(t, auth.Identity{Subject: "sam", Tenant: "t1", Roles: []string{"events:send"}}))

	app := s.NewApp()
	inbox := func(ctx context.Context, in struct {
		Topics  []string `json:"topics"`
		Timeout string   `json:"timeout"`
	}) ([]received, error) {
		timeout, _ := time.ParseDuration(in.Timeout)
		out := []received{}
		for _, topic := range in.Topics {
			m, err := step.Receive[json.RawMessage](ctx, topic, step.Timeout(timeout)).Get()
			if errors.Is(err, step.ErrTimedOut) {
				out = append(out, received{TimedOut: true})
				continue
			}
			if err != nil {
				return nil, err
			}
			out = append(out, received{ID: m.ID, Topic: m.Topic, Data: m.Data, Sender: m.Sender.Subject})
		}
		return out, nil
	}
	functions.Register(app, "inbox", inbox)
	functions.Register(app, "digest", inbox, functions.Debounce(time.Hour, "", 0))
	functions.Register(app, "ops-only", inbox, functions.InvokeRoles("ops"))
	appURL := s.ServeApp(t, app)
	for _, cl := range []*protocol.ClientWithResponses{c, other} {
		synced, err := cl.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: appURL})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
	}
	// stored counts the tenant's runs with the key, and its messages with the key as id.
	stored := func(t *testing.T, tenant, key string) (runs, messages int) {
		t.Helper()
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT
			(SELECT count(*) FROM stepgate.run WHERE tenant = $1 AND idempotency_key = $2),
			(SELECT count(*) FROM stepgate.message WHERE tenant = $1 AND id = $2)`, tenant, key).Scan(&runs, &messages))
		return runs, messages
	}
	const body = `{"input":{"topics":["go"],"timeout":"1h"},"message":{"topic":"go","data":{"n":1}}}`

	t.Run("CreatesTheRunWhichReceivesTheMessageOnce", func(t *testing.T) {
		t.Parallel()
		resp := startWithMessage(t, c, "inbox", "k-create", body)
		require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
		first := *resp.JSON202
		require.True(t, first.Created)
		require.Equal(t, "/v1/runs/"+first.ID+"/result", resp.HTTPResponse.Header.Get("Location"))
		require.Equal(t, "k-create", first.Message.ID, "the message's id is the key")
		require.Equal(t, first.ID, first.Message.RunID)
		require.Nil(t, first.Message.Duplicate)

		// A retry, before or after the run took the message: the same run, the first
		// message, nothing stored.
		again := mustStartWithMessage(t, c, "inbox", "k-create", body)
		require.False(t, again.Created)
		require.Equal(t, first.ID, again.ID)
		require.True(t, *again.Message.Duplicate)
		require.True(t, first.Message.SentAt.Equal(again.Message.SentAt))

		require.Equal(t, []received{{ID: "k-create", Topic: "go", Data: json.RawMessage(`{"n":1}`), Sender: "alice"}}, inboxOf(t, c, first.ID))
		late := mustStartWithMessage(t, c, "inbox", "k-create", body)
		require.False(t, late.Created)
		require.Equal(t, protocol.RunStatusCompleted, late.Status)
		require.True(t, *late.Message.Duplicate)
		require.True(t, late.Message.Consumed)
		runs, messages := stored(t, "t1", "k-create")
		require.Equal(t, 1, runs)
		require.Equal(t, 1, messages)

		// The same key with another message or another input is a 409, and stores nothing.
		resp = startWithMessage(t, c, "inbox", "k-create", `{"input":{"topics":["go"],"timeout":"1h"},"message":{"topic":"go","data":{"n":2}}}`)
		require.Equal(t, http.StatusConflict, resp.StatusCode(), string(resp.Body))
		require.Contains(t, resp.ApplicationProblemJSON409.Detail, "different message")
		resp = startWithMessage(t, c, "inbox", "k-create", `{"input":{"topics":["go"],"timeout":"1h"},"message":{"topic":"stop","data":{"n":1}}}`)
		require.Equal(t, http.StatusConflict, resp.StatusCode(), string(resp.Body))
		require.Contains(t, resp.ApplicationProblemJSON409.Detail, "different message")
		resp = startWithMessage(t, c, "inbox", "k-create", `{"input":{"topics":["other"]},"message":{"topic":"go","data":{"n":1}}}`)
		require.Equal(t, http.StatusConflict, resp.StatusCode(), string(resp.Body))
		require.Contains(t, resp.ApplicationProblemJSON409.Detail, "different input")
		// The same JSON written otherwise is the same message.
		same := mustStartWithMessage(t, c, "inbox", "k-create", `{"input":{"timeout":"1h","topics":["go"]},"message":{"topic":"go","data":{ "n" : 1.0e0 }}}`)
		require.True(t, *same.Message.Duplicate)
		runs, messages = stored(t, "t1", "k-create")
		require.Equal(t, 1, runs)
		require.Equal(t, 1, messages)
	})

	t.Run("ARunSuspendedInReceiveTakesItAndWakes", func(t *testing.T) {
		t.Parallel()
		input := `{"topics":["go"],"timeout":"1h"}`
		started := startRun(t, c, "inbox", input, &protocol.StartRunParams{IdempotencyKey: ptr("k-wake")})
		require.Equal(t, http.StatusAccepted, started.StatusCode(), string(started.Body))
		id := started.JSON202.ID
		receivingOn(t, c, id, 1)
		got := mustStartWithMessage(t, c, "inbox", "k-wake", `{"input":`+input+`,"message":{"topic":"go","data":"wake"}}`)
		require.False(t, got.Created)
		require.Equal(t, id, got.ID)
		require.True(t, got.Message.Consumed, "the run waited for the topic: it took the message in the call's transaction")
		require.Equal(t, []received{{ID: "k-wake", Topic: "go", Data: json.RawMessage(`"wake"`), Sender: "alice"}}, inboxOf(t, c, id))
	})

	t.Run("AnEndedRunIsAConflictAndNothingIsStored", func(t *testing.T) {
		t.Parallel()
		input := `{"topics":[]}`
		done := startRun(t, c, "inbox", input, &protocol.StartRunParams{IdempotencyKey: ptr("k-ended"), Wait: ptr("30s")})
		require.Equal(t, http.StatusOK, done.StatusCode(), string(done.Body))
		require.Equal(t, protocol.RunStatusCompleted, done.JSON200.Status)
		resp := startWithMessage(t, c, "inbox", "k-ended", `{"input":`+input+`,"message":{"topic":"go"}}`)
		require.Equal(t, http.StatusConflict, resp.StatusCode(), string(resp.Body))
		detail := resp.ApplicationProblemJSON409.Detail
		require.Contains(t, detail, done.JSON200.ID)
		require.Contains(t, detail, `"k-ended"`)
		require.Contains(t, detail, "is already completed")
		runs, messages := stored(t, "t1", "k-ended")
		require.Equal(t, 1, runs)
		require.Zero(t, messages)
	})

	t.Run("ConcurrentCallsMakeOneRunAndOneMessage", func(t *testing.T) {
		t.Parallel()
		const n = 8
		answers := make(chan protocol.StartedWithMessage, n)
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				resp, err := c.StartRunWithMessageWithBodyWithResponse(context.Background(), "inbox",
					&protocol.StartRunWithMessageParams{IdempotencyKey: "k-many"}, "application/json", strings.NewReader(body))
				if assert.NoError(t, err) && assert.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body)) {
					answers <- *resp.JSON202
				}
			})
		}
		wg.Wait()
		close(answers)
		var created, fresh int
		ids := map[string]bool{}
		for a := range answers {
			ids[a.ID] = true
			if a.Created {
				created++
			}
			if a.Message.Duplicate == nil {
				fresh++
			}
		}
		require.Len(t, ids, 1, "one run")
		require.Equal(t, 1, created, "one call created it")
		require.Equal(t, 1, fresh, "one call stored the message")
		for id := range ids {
			require.Len(t, inboxOf(t, c, id), 1)
		}
		runs, messages := stored(t, "t1", "k-many")
		require.Equal(t, 1, runs)
		require.Equal(t, 1, messages)
	})

	t.Run("AnotherTenantsKeyIsItsOwn", func(t *testing.T) {
		t.Parallel()
		mine := mustStartWithMessage(t, c, "inbox", "k-shared", body)
		theirs := mustStartWithMessage(t, other, "inbox", "k-shared", `{"input":{"topics":["go"],"timeout":"1h"},"message":{"topic":"go","data":"t2's"}}`)
		require.True(t, mine.Created)
		require.True(t, theirs.Created, "the other tenant's key names no run of t1")
		require.NotEqual(t, mine.ID, theirs.ID)
		require.Equal(t, []received{{ID: "k-shared", Topic: "go", Data: json.RawMessage(`{"n":1}`), Sender: "alice"}}, inboxOf(t, c, mine.ID))
		require.Equal(t, []received{{ID: "k-shared", Topic: "go", Data: json.RawMessage(`"t2's"`), Sender: "mallory"}}, inboxOf(t, other, theirs.ID))
		resp, err := other.GetRunWithResponse(t.Context(), mine.ID, nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, resp.StatusCode())
	})

	t.Run("TheKeyIsRequired", func(t *testing.T) {
		t.Parallel()
		noKey := func(_ context.Context, req *http.Request) error {
			req.Header.Del("Idempotency-Key")
			return nil
		}
		resp := startWithMessage(t, c, "inbox", "", body, noKey)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
		require.Contains(t, resp.ApplicationProblemJSON400.Detail, "Idempotency-Key")
		for key, want := range map[string]string{
			"":                                       "Idempotency-Key",
			strings.Repeat("k", 256):                 "255 bytes",
			"0193a3c2-0000-7000-8000-00000000beef:3": "reserved",
		} {
			resp := startWithMessage(t, c, "inbox", key, body)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
			require.Contains(t, resp.ApplicationProblemJSON400.Detail, want)
			runs, messages := stored(t, "t1", key)
			require.Zero(t, runs)
			require.Zero(t, messages)
		}
	})

	t.Run("Bounds", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct{ body, want string }{
			{`{"input":{},"message":{"topic":""}}`, "message topic"},
			{`{"input":{},"message":{"topic":"` + strings.Repeat("t", 256) + `"}}`, "255 bytes"},
			{`{"input":{},"message":{"topic":"go","data":"\u0000"}}`, "message data"},
			{`{"input":"\u0000","message":{"topic":"go"}}`, "input"},
			{`{"input":{}}`, "message topic"},
		} {
			resp := startWithMessage(t, c, "inbox", "k-bounds", tc.body)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
			require.Contains(t, resp.ApplicationProblemJSON400.Detail, tc.want)
		}
		big := `{"input":{},"message":{"topic":"go","data":"` + strings.Repeat("x", 2<<20) + `"}}`
		resp := startWithMessage(t, c, "inbox", "k-bounds", big)
		require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode(), string(resp.Body))
		require.Contains(t, string(resp.Body), "limit")
		runs, messages := stored(t, "t1", "k-bounds")
		require.Zero(t, runs)
		require.Zero(t, messages)
	})

	t.Run("BothPermissionsAreNeeded", func(t *testing.T) {
		t.Parallel()
		resp := startWithMessage(t, invokeOnly, "inbox", "k-perm", body)
		require.Equal(t, http.StatusForbidden, resp.StatusCode(), string(resp.Body))
		require.Contains(t, resp.ApplicationProblemJSON403.Detail, "events:send")
		resp = startWithMessage(t, sendOnly, "inbox", "k-perm", body)
		require.Equal(t, http.StatusForbidden, resp.StatusCode(), string(resp.Body))
		require.Contains(t, resp.ApplicationProblemJSON403.Detail, "runs:invoke")
		// The function's invoke_roles too.
		resp = startWithMessage(t, c, "ops-only", "k-perm", body)
		require.Equal(t, http.StatusForbidden, resp.StatusCode(), string(resp.Body))
		require.Contains(t, resp.ApplicationProblemJSON403.Detail, "ops")
		runs, messages := stored(t, "t1", "k-perm")
		require.Zero(t, runs)
		require.Zero(t, messages)
		// With both, it starts.
		both := s.Client(t, s.NewToken(t, auth.Identity{Subject: "bo", Tenant: "t1", Roles: []string{"runs:invoke", "events:send"}}))
		require.True(t, mustStartWithMessage(t, both, "inbox", "k-perm", body).Created)
	})

	t.Run("NoSuchFunctionAndDebounce", func(t *testing.T) {
		t.Parallel()
		resp := startWithMessage(t, c, "nope", "k-misc", body)
		require.Equal(t, http.StatusNotFound, resp.StatusCode(), string(resp.Body))
		resp = startWithMessage(t, c, "digest", "k-misc", body)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
		require.Contains(t, resp.ApplicationProblemJSON400.Detail, "config.debounce")
		runs, messages := stored(t, "t1", "k-misc")
		require.Zero(t, runs)
		require.Zero(t, messages)
	})
}

// TestStartRunWithMessageIsOneTransaction: a message refused by the tenant's mailbox
// quota creates no run either.
func TestStartRunWithMessageIsOneTransaction(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Limits: invoker.Limits{MaxTenantMailboxBytes: 100}})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	app := s.NewApp()
	functions.Register(app, "inbox", func(ctx context.Context, _ struct{}) (string, error) {
		m, err := step.Receive[string](ctx, "go", step.Timeout(time.Hour)).Get()
		return m.Data, err
	})
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	big := `{"message":{"topic":"go","data":"` + strings.Repeat("x", 200) + `"}}`
	resp := startWithMessage(t, c, "inbox", "k-quota", big)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode(), string(resp.Body))
	require.Contains(t, string(resp.Body), "STEPGATE_MAX_TENANT_MAILBOX_BYTES")
	var runs int
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM stepgate.run WHERE idempotency_key = 'k-quota'`).Scan(&runs))
	require.Zero(t, runs, "the refused message's run was not created")

	got := mustStartWithMessage(t, c, "inbox", "k-quota", `{"message":{"topic":"go","data":"small"}}`)
	require.True(t, got.Created)
	res := mustResult(t, c, got.ID)
	require.Equal(t, protocol.RunStatusCompleted, res.Status)
	require.JSONEq(t, `"small"`, string(*res.Output))
}

// TestStartWithMessageAsTheDocsShow sends docs/messages.md's curl example (start with a
// message) to a real gateway, and checks its answer against the one the page prints
// (values with "…" stand for what varies).
func TestStartWithMessageAsTheDocsShow(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../docs/messages.md")
	require.NoError(t, err)
	example := regexp.MustCompile(`(?m)^curl -s -X POST "\$STEPGATE_URL(/v1/functions/[^"]+/runs/with-message)" \\\n` +
		`  -H "Authorization: Bearer \$STEPGATE_TOKEN" -H "Idempotency-Key: ([^"]+)" \\\n` +
		`  -d '([^']+)'\n# (\d+) (.+)$`).FindStringSubmatch(string(readme))
	require.NotNil(t, example, "docs/messages.md's curl example of POST /v1/functions/{name}/runs/with-message")
	path, key, body, status, answer := example[1], example[2], example[3], example[4], example[5]

	s := stack.Start(t, stack.Options{})
	token := s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}})
	c := s.Client(t, token)
	app := s.NewApp()
	functions.Register(app, "orders.approval", func(ctx context.Context, in json.RawMessage) (json.RawMessage, error) {
		m, err := step.Receive[json.RawMessage](ctx, "approval", step.Timeout(time.Hour)).Get()
		return m.Data, err
	})
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, s.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, status, strconv.Itoa(resp.StatusCode), string(got))

	// Every field the page shows, with its value unless it varies.
	var want, have map[string]any
	require.NoError(t, json.Unmarshal([]byte(answer), &want))
	require.NoError(t, json.Unmarshal(got, &have))
	var same func(path string, want, have any)
	same = func(path string, want, have any) {
		switch w := want.(type) {
		case map[string]any:
			h, ok := have.(map[string]any)
			require.True(t, ok, "%s: %v", path, have)
			require.Len(t, h, len(w), "%s: the fields of %v", path, h)
			for k, v := range w {
				require.Contains(t, h, k, path)
				same(path+"."+k, v, h[k])
			}
		case string:
			if !strings.Contains(w, "…") {
				require.Equal(t, w, have, path)
			}
		default:
			require.Equal(t, w, have, path)
		}
	}
	same("answer", want, have)

	var in struct {
		Message struct {
			Data json.RawMessage `json:"data"`
		} `json:"message"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &in))
	res := mustResult(t, c, have["id"].(string))
	require.Equal(t, protocol.RunStatusCompleted, res.Status)
	require.JSONEq(t, string(in.Message.Data), string(*res.Output), "the run received the message")
}
