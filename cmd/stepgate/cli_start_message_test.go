package main

import (
	"context"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// TestInvokeWithMessage runs "stepgate invoke NAME --idempotency-key K --message-topic T
// --message-data JSON" against a real gateway: the run of the key is started once and
// gets the message once.
func TestInvokeWithMessage(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	token := s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}})
	api := s.Client(t, token)
	app := s.NewApp()
	functions.Register(app, "inbox", func(ctx context.Context, _ struct{}) (any, error) {
		m, err := step.Receive[any](ctx, "go", step.Timeout(time.Hour)).Get()
		return m.Data, err
	})
	synced, err := api.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))

	invoke := func(args ...string) (string, error) {
		c, stdout, _ := newTestCLI(map[string]string{"STEPGATE_URL": s.URL, "STEPGATE_TOKEN": token}, "")
		err := c.run(t.Context(), append([]string{"invoke", "inbox"}, args...))
		return stdout.String(), err
	}
	args := []string{"--data", "{}", "--idempotency-key", "k1", "--message-topic", "go", "--message-data", `{"ok":true}`}
	out, err := invoke(args...)
	require.NoError(t, err)
	m := regexp.MustCompile(`^run (\S+) is queued: started\nmessage k1 on topic go: waits in the run's mailbox\nattach: stepgate runs get (\S+)\n$`).FindStringSubmatch(out)
	require.NotNil(t, m, out)
	require.Equal(t, m[1], m[2])
	out, err = invoke(args...)
	require.NoError(t, err)
	require.Regexp(t, `^run `+m[1]+` is \w+: already there \(the run of idempotency key k1\)\nmessage k1 on topic go: .* \(a duplicate: sent before under this key\)\n`, out)

	res, err := api.GetRunResultWithResponse(t.Context(), m[1], &protocol.GetRunResultParams{Wait: new("30s")})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, res.StatusCode(), string(res.Body))
	require.Equal(t, protocol.RunStatusCompleted, res.JSON200.Status)
	require.JSONEq(t, `{"ok":true}`, string(*res.JSON200.Output))

	// The gateway's refusals reach the caller.
	_, err = invoke("--data", `{"other":1}`, "--idempotency-key", "k1", "--message-topic", "go")
	require.ErrorContains(t, err, "different input")

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--message-topic", "go"}, "--message-topic needs --idempotency-key"},
		{[]string{"--message-data", "1", "--idempotency-key", "k2"}, "--message-data needs --message-topic"},
		{[]string{"--message-topic", "go", "--idempotency-key", "k2", "--wait"}, "takes none of --wait"},
		{[]string{"--message-topic", "go", "--idempotency-key", "k2", "--priority", "1"}, "takes none of --wait"},
		{[]string{"--message-topic", "go", "--idempotency-key", "k2", "--message-data", "{nope"}, "--message-data is not valid JSON"},
	} {
		_, err := invoke(tc.args...)
		require.ErrorContains(t, err, tc.want, "%v", tc.args)
	}
}
