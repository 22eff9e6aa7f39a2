package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// TestSyncChecksTheProtocolVersion: apps sync sends the gateway's protocol version
// (Stepgate-Protocol) with the manifest request, registers an app whose manifest says a
// version the gateway serves (its major, a minor no greater) or says none, and refuses
// with a 400 naming both versions, registering nothing, one it does not serve, one
// that is not a version, or an sdk past its bound.
func TestSyncChecksTheProtocolVersion(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	var mu sync.Mutex
	var sent []string // the Stepgate-Protocol header of each manifest request
	// app serves a manifest of one function, name, with the manifest fields fields.
	app := func(name, fields string) string {
		return s.ServeApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			sent = append(sent, r.Header.Get("Stepgate-Protocol"))
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{%s"functions":[{"name":%q,"path":%q}]}`, fields, name, name)
		}))
	}
	registered := func(t *testing.T, name string) bool {
		t.Helper()
		resp, err := c.GetFunctionWithResponse(t.Context(), name)
		require.NoError(t, err)
		require.Contains(t, []int{http.StatusOK, http.StatusNotFound}, resp.StatusCode(), string(resp.Body))
		return resp.StatusCode() == http.StatusOK
	}

	const serves = "this gateway speaks 1.0.0 (it serves SDKs of protocol 1.0 up to 1.0.x)"
	refused := []struct{ name, fields, detail string }{
		{"major2", `"protocol":2,"protocol_version":"2.0.0","sdk":"stepgate-go/3.0.0",`,
			"the app's SDK (stepgate-go/3.0.0) speaks function protocol 2.0.0; " + serves},
		{"major2-bare", `"protocol_version":"2.0.0",`, "the app's SDK speaks function protocol 2.0.0; " + serves},
		{"major2-integer", `"protocol":2,`, "the app's SDK speaks function protocol 2.0.0; " + serves},
		{"major0", `"protocol_version":"0.9.0",`, "the app's SDK speaks function protocol 0.9.0; " + serves},
		{"minor9", `"protocol":1,"protocol_version":"1.9.0","sdk":"stepgate-ts/0.3.0",`,
			"the app's SDK (stepgate-ts/0.3.0) speaks function protocol 1.9.0; " + serves},
		{"minor9-bare", `"protocol_version":"1.9.0",`, "the app's SDK speaks function protocol 1.9.0; " + serves},
		{"malformed", `"protocol_version":"1.0",`,
			`the app's SDK says it speaks function protocol "1.0", which is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0); ` + serves},
		{"empty", `"protocol_version":"",`,
			`the app's SDK says it speaks function protocol "", which is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0); ` + serves},
		{"long", `"protocol_version":"` + strings.Repeat("1", 5000) + `",`,
			`the app's SDK says it speaks function protocol "` + strings.Repeat("1", protocol.MaxVersionLen) +
				`"…, which is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0); ` + serves},
		{"majors-differ", `"protocol":1,"protocol_version":"2.0.0",`, "the app's manifest says protocol 1 but protocol_version 2.0.0, of another major version"},
		{"sdk-long", `"sdk":"` + strings.Repeat("s", 129) + `",`, "the app's manifest has an sdk of 129 bytes that is not 1 to 128 printable ASCII characters"},
		{"sdk-control", `"sdk":"a\nb",`, "the app's manifest has an sdk of 3 bytes that is not 1 to 128 printable ASCII characters"},
	}
	for _, tt := range refused {
		t.Run("Refuses/"+tt.name, func(t *testing.T) {
			t.Parallel()
			resp, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: app(tt.name, tt.fields)})
			require.NoError(t, err)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
			var p protocol.Problem
			require.NoError(t, json.Unmarshal(resp.Body, &p))
			require.Equal(t, tt.detail, p.Detail)
			require.False(t, registered(t, tt.name), "a refused app's function is not registered")
		})
	}
	accepted := []struct{ name, fields string }{
		{"current", `"protocol":1,"protocol_version":"1.0.0","sdk":"stepgate-go/0.1.0",`},
		{"patch", `"protocol_version":"1.0.7",`},
		{"integer", `"protocol":1,`},
		{"none", ``},
	}
	for _, tt := range accepted {
		t.Run("Accepts/"+tt.name, func(t *testing.T) {
			t.Parallel()
			s.Sync(t, app(tt.name, tt.fields))
			require.True(t, registered(t, tt.name))
		})
	}
	t.Cleanup(func() {
		require.Len(t, sent, len(refused)+len(accepted))
		for _, v := range sent {
			require.Equal(t, protocol.Version, v, "the manifest request says the gateway's version")
		}
	})
}

// TestInvocationChecksTheProtocolVersion: the gateway sends its protocol version with
// every invocation and serves an answer whose Stepgate-Protocol header says a version it
// serves, or none; an answer of another version, or one that is not a version, fails
// the invocation with an error naming both, which the run's failed attempts show, and
// is retried per the function's policy until the run fails.
func TestInvocationChecksTheProtocolVersion(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	var mu sync.Mutex
	sent := map[string]string{} // run id -> the Stepgate-Protocol header of its invocation
	// The function completes each run, answering the Stepgate-Protocol its input names.
	url := s.ServeApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"functions":[{"name":"versioned","path":"versioned",
				"config":{"retries":{"max_attempts":2,"initial_interval":"1ms","max_interval":"1ms"}}}]}`)
			return
		}
		var req protocol.InvocationRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		sent[req.Run.ID] = r.Header.Get("Stepgate-Protocol")
		mu.Unlock()
		var in struct {
			Answer string `json:"answer"`
		}
		_ = json.Unmarshal(req.Run.Input, &in)
		if in.Answer != "" {
			w.Header().Set("Stepgate-Protocol", in.Answer)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"status":"completed","output":"done"}`)
	}))
	s.Sync(t, url)
	header := func(t *testing.T, runID string) string {
		mu.Lock()
		defer mu.Unlock()
		v, ok := sent[runID]
		require.True(t, ok, "run %s was invoked", runID)
		return v
	}

	for _, v := range []string{"", protocol.Version, "1.0.3"} {
		t.Run("Serves/"+v, func(t *testing.T) {
			t.Parallel()
			res := mustComplete(t, c, "versioned", fmt.Sprintf(`{"answer":%q}`, v))
			require.Equal(t, protocol.Version, header(t, res.ID))
		})
	}

	const serves = "this gateway speaks 1.0.0 (it serves SDKs of protocol 1.0 up to 1.0.x)"
	for _, tt := range []struct{ answer, message string }{
		{"2.0.0", "the function's SDK speaks function protocol 2.0.0; " + serves},
		{"1.9.0", "the function's SDK speaks function protocol 1.9.0; " + serves},
		{"v1", `the function's SDK says it speaks function protocol "v1", which is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0); ` + serves},
	} {
		t.Run("Refuses/"+tt.answer, func(t *testing.T) {
			t.Parallel()
			resp := startRun(t, c, "versioned", fmt.Sprintf(`{"answer":%q}`, tt.answer), nil)
			require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
			require.Equal(t, protocol.RunStatusFailed, resp.JSON200.Status, string(resp.Body))
			require.Equal(t, "protocol_version", resp.JSON200.Error.Type)
			require.Equal(t, tt.message+" (attempt 2 of 2; giving up)", resp.JSON200.Error.Message)

			run := getRun(t, c, resp.JSON200.ID)
			require.Equal(t, 2, run.FailedInvocations, "retried per the function's policy")
			require.Len(t, run.Failures, 1, "the failed attempt before the last, which failed the run")
			f := run.Failures[0]
			require.Equal(t, 0, f.Seq, "an invocation that failed as a whole")
			require.Equal(t, protocol.ErrorInfo{Type: "protocol_version", Message: tt.message, Retryable: new(true)}, f.Error)
			require.Equal(t, protocol.Version, header(t, run.ID))
		})
	}
}

// TestProtocolVersionDocsQuoteTheErrors: docs/protocol-versions.md quotes the errors
// as the gateway and the SDKs word them.
func TestProtocolVersionDocsQuoteTheErrors(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/protocol-versions.md")
	require.NoError(t, err)
	msg := func(err error) string { require.Error(t, err); return err.Error() }
	for _, m := range []string{
		msg(protocol.CheckSDKVersion("the app's SDK (stepgate-go/3.0.0)", "2.0.0")),
		msg(protocol.CheckSDKVersion("the app's SDK", "1.9.0")),
		msg(protocol.CheckSDKVersion("the app's SDK", "1.0")),
		"the app's manifest says protocol 1 but protocol_version 2.0.0, of another major version", // as TestSyncChecksTheProtocolVersion has it
		"the app's manifest has an sdk of 129 bytes that is not 1 to 128 printable ASCII characters",
		msg(protocol.CheckSDKVersion("the function's SDK", "2.0.0")),
		msg(protocol.CheckSDKVersion("the function's SDK", "v1")),
		msg(protocol.CheckGatewayVersion("stepgate-go/0.1.0", "2.0.0")),
		msg(protocol.CheckGatewayVersion("stepgate-go/0.1.0", "2")),
	} {
		require.Contains(t, string(doc), "\n"+m+"\n", "docs/protocol-versions.md quotes it on a line of its own")
	}
}

// TestGoSDKAndGatewaySayTheirVersions: with a real gateway, the Go SDK's manifest is
// synced, and each request and answer between them says its side's protocol version.
func TestGoSDKAndGatewaySayTheirVersions(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	app := s.NewApp()
	functions.Register(app, "greet", func(ctx context.Context, _ struct{}) (string, error) { return "hi", nil })
	var mu sync.Mutex
	var seen []string // "<method> <request's header> <answer's header>"
	url := s.ServeApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		app.ServeHTTP(w, r)
		mu.Lock()
		seen = append(seen, r.Method+" "+r.Header.Get("Stepgate-Protocol")+" "+w.Header().Get("Stepgate-Protocol"))
		mu.Unlock()
	}))
	s.Sync(t, url)
	mustComplete(t, c, "greet", `{}`)
	mu.Lock()
	defer mu.Unlock()
	v := protocol.Version
	require.Equal(t, []string{"GET " + v + " " + v, "POST " + v + " " + v}, seen)
}
