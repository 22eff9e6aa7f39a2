package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// syncBuffer is a bytes.Buffer for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestLogsHoldNoSecrets runs a flow that uses a caller's JWT, the tenant's signing key,
// an invocation token and a callback token, with failures on the way (a forged token, a
// wrong callback token, a function that fails once), and reads every log line the
// gateway wrote, from the debug level up: none holds one of those secrets, and every
// line about a run names its run, function and tenant.
func TestLogsHoldNoSecrets(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	s := stack.Start(t, stack.Options{Logs: &logs})
	alice := s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}})
	c := s.Client(t, alice)

	app := s.NewRequestApp() // its invocations carry tokens
	urls := make(chan string, 1)
	failed := false
	functions.Register(app, "approve", func(ctx context.Context, _ struct{}) (bool, error) {
		cb, err := step.Callback[approval](ctx, "approval")
		if err != nil {
			return false, err
		}
		if _, err := step.Run(ctx, "notify", func(context.Context) (string, error) {
			if !failed { // an invocation that fails, for the retry's logs
				failed = true
				panic("boom")
			}
			urls <- cb.URL
			return "sent", nil
		}); err != nil {
			return false, err
		}
		res, err := cb.Result().Get()
		return res.OK, err
	})
	var tokensMu sync.Mutex
	var invocationTokens []string
	served := s.ServeApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			raw, err := io.ReadAll(r.Body)
			if err == nil {
				var req protocol.InvocationRequest
				if json.Unmarshal(raw, &req) == nil {
					tokensMu.Lock()
					invocationTokens = append(invocationTokens, req.Checkpoint.Token)
					tokensMu.Unlock()
				}
			}
			r.Body = io.NopCloser(bytes.NewReader(raw))
		}
		app.ServeHTTP(w, r)
	}))
	synced, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: served})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	id := startAsync(t, c, "approve", `{}`)
	url := <-urls
	token := url[strings.LastIndex(url, "/")+1:]
	code, _ := postNoAuth(t, s.URL+"/v1/callbacks/"+strings.Repeat("A", len(token)), `{"ok":true}`)
	require.Equal(t, http.StatusNotFound, code)
	code, body := postNoAuth(t, url, `{"ok":true}`)
	require.Equal(t, http.StatusOK, code, body)
	stack.AwaitStatus(t, c, id, protocol.RunStatusCompleted)
	forged := alice[:len(alice)-4] + "AAAA"
	status, _ := rawRequest(t, http.MethodGet, s.URL+"/v1/runs", forged, "", nil)
	require.Equal(t, http.StatusUnauthorized, status)

	keys, err := s.Keys.Keys(t.Context(), "t1")
	require.NoError(t, err)
	secrets := map[string]string{"the caller's JWT": alice, "the forged JWT": forged, "the operator's JWT": s.Token,
		"the callback token": token, "the JWT secret": string(s.JWTSecret)}
	for _, k := range keys {
		for name, b := range map[string][]byte{"signing key seed": k.Seed, "HMAC secret": k.HMACSecret} {
			if len(b) == 0 {
				continue
			}
			secrets[name+" (hex)"] = hex.EncodeToString(b)
			secrets[name+" (base64)"] = base64.StdEncoding.EncodeToString(b)
			secrets[name+" (base64url)"] = base64.RawURLEncoding.EncodeToString(b)
		}
	}
	tokensMu.Lock()
	require.GreaterOrEqual(t, len(invocationTokens), 2, "invocations seen")
	for i, tok := range invocationTokens {
		secrets["invocation token "+string(rune('1'+i))] = tok
	}
	tokensMu.Unlock()

	out := logs.String()
	require.Contains(t, out, `"msg":"run finished"`, "the logs were captured")
	for name, secret := range secrets {
		require.NotContains(t, out, secret, "the logs hold %s", name)
	}
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	lines := 0
	var unnamed []string
	for sc.Scan() {
		var line map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line), sc.Text())
		if line["run_id"] == nil {
			continue
		}
		lines++
		if line["function"] == nil || line["tenant"] == nil {
			unnamed = append(unnamed, sc.Text())
		}
	}
	require.Positive(t, lines)
	require.Empty(t, unnamed, "log lines about a run name its function and tenant")
}
