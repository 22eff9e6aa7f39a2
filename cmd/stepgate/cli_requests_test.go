package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// priceFunction is a function that speaks the protocol without an SDK: it takes requests
// named "price" (a receive await of the topic "request:price") one after another, and
// replies to each with a reply checkpoint named after the request's id: {"price": 10},
// or an error sold_out for {"sku":"none"}. A request {"quit":true} ends the run without
// a reply.
type priceFunction struct{ t *testing.T }

func (f priceFunction) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req protocol.InvocationRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	seq := len(req.Journal)
	if seq > 0 && req.Journal[seq-1].Kind == protocol.EntryKindReceive {
		var taken struct {
			Message struct {
				ID   string `json:"id"`
				Data struct {
					SKU  string `json:"sku"`
					Quit bool   `json:"quit"`
				} `json:"data"`
			} `json:"message"`
		}
		assert.NoError(f.t, json.Unmarshal(*req.Journal[seq-1].Output, &taken))
		m := taken.Message
		if m.Data.Quit {
			_, _ = io.WriteString(w, `{"status":"completed","output":"quit"}`)
			return
		}
		reply := fmt.Sprintf(`{"seq":%d,"kind":"reply","name":%q,"output":{"price":10}}`, seq+1, m.ID)
		if m.Data.SKU == "none" {
			reply = fmt.Sprintf(`{"seq":%d,"kind":"reply","name":%q,"error":{"type":"sold_out","message":"no stock"}}`, seq+1, m.ID)
		}
		hreq, _ := http.NewRequestWithContext(context.WithoutCancel(r.Context()), "POST", req.Checkpoint.URL, strings.NewReader(reply))
		hreq.Header.Set("Authorization", "Bearer "+req.Checkpoint.Token)
		resp, err := http.DefaultClient.Do(hreq)
		if !assert.NoError(f.t, err) {
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(f.t, http.StatusOK, resp.StatusCode, string(body))
		seq++
	}
	_, _ = fmt.Fprintf(w, `{"status":"suspended","await":{"type":"receive","seq":%d,"name":"request:price","topic":"request:price","timeout":"1h"}}`, seq+1)
}

// TestRunsRequest runs "stepgate runs request" and "stepgate runs requests" against a
// real gateway: a reply is printed, an error reply and a request the run ended without
// replying to exit non-zero, a request not replied to in time prints where to wait
// again, and another tenant sees no run.
func TestRunsRequest(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	token := s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}})
	api := s.Client(t, token)
	reg, err := api.RegisterFunctionWithResponse(t.Context(), "prices", protocol.FunctionRegistration{URL: s.ServeApp(t, priceFunction{t})})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, reg.StatusCode(), string(reg.Body))
	started, err := api.StartRunWithBodyWithResponse(t.Context(), "prices", &protocol.StartRunParams{}, "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, started.StatusCode(), string(started.Body))
	runID := started.JSON202.ID

	run := func(token string, args ...string) (string, error) {
		c, stdout, _ := newTestCLI(map[string]string{"STEPGATE_URL": s.URL, "STEPGATE_TOKEN": token}, "")
		err := c.run(t.Context(), args)
		return stdout.String(), err
	}

	// A request is answered with its reply, also when the run has not taken it yet.
	out, err := run(token, "runs", "request", runID, "price", `{"sku":"A-1"}`, "--id", "r-1")
	require.NoError(t, err)
	require.Equal(t, "request r-1 (price) to run "+runID+" replied\n{\"price\":10}\n", out)
	out, err = run(token, "runs", "request", runID, "price", `{"sku":"A-1"}`, "--id", "r-1", "--wait", "1s")
	require.NoError(t, err)
	require.Equal(t, "request r-1 (price) to run "+runID+" replied (a duplicate: the first request with this id)\n{\"price\":10}\n", out)

	// An error reply exits non-zero, naming the error.
	out, err = run(token, "runs", "request", runID, "price", `{"sku":"none"}`, "--id", "r-2")
	require.EqualError(t, err, "request r-2 (price) to run "+runID+" was answered with an error: sold_out: no stock (details: stepgate runs requests "+runID+")")
	require.Equal(t, "request r-2 (price) to run "+runID+" replied\n", out)

	// A request nothing takes is pending when the wait ends: printed with where to wait again.
	out, err = run(token, "runs", "request", runID, "stock", "--id", "r-3", "--wait", "0")
	require.NoError(t, err)
	require.Equal(t, "request r-3 (stock) to run "+runID+" is pending: waits in the run's mailbox\n"+
		"wait again: stepgate runs request "+runID+" stock --id r-3 --wait 30s\n"+
		"poll: GET /v1/runs/"+runID+"/requests/r-3?wait=30s\n", out)

	// The run ends without replying: both requests fail, and the CLI exits non-zero.
	_, err = run(token, "runs", "request", runID, "price", `{"quit":true}`, "--id", "r-4")
	require.EqualError(t, err, "request r-4 (price) to run "+runID+" failed: no_reply: "+noReplyMessage(t, api, runID, "r-4")+" (details: stepgate runs requests "+runID+")")

	out, err = run(token, "runs", "requests", runID)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 5, out)
	require.Regexp(t, `^ID\s+NAME\s+STATUS\s+SENT\s+REPLIED\s+DATA\s+REPLY$`, lines[0])
	for i, want := range []string{
		`^r-4\s+price\s+failed\s+.*\{"quit":true\}\s+error no_reply: `,
		`^r-3\s+stock\s+failed\s+.*-\s+error no_reply: `,
		`^r-2\s+price\s+replied\s+.*\{"sku":"none"\}\s+error sold_out: no stock$`,
		`^r-1\s+price\s+replied\s+.*\{"sku":"A-1"\}\s+\{"price":10\}$`,
	} {
		require.Regexp(t, regexp.MustCompile(want), lines[i+1])
	}
	out, err = run(token, "runs", "requests", runID, "--limit", "1")
	require.NoError(t, err)
	require.Contains(t, out, "\nmore: stepgate runs requests "+runID+" --cursor ")

	// Another tenant has no such run.
	other := s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"developer"}})
	_, err = run(other, "runs", "request", runID, "price", `{"sku":"A-1"}`)
	require.ErrorContains(t, err, "404")
	_, err = run(other, "runs", "requests", runID)
	require.ErrorContains(t, err, "404")

	// A caller whom the function lets neither invoke it nor resume it sends no request.
	boss := s.NewToken(t, auth.Identity{Subject: "boss", Tenant: "t1", Roles: []string{"developer", "payments"}})
	bossAPI := s.Client(t, boss)
	reg, err = bossAPI.RegisterFunctionWithResponse(t.Context(), "guarded", protocol.FunctionRegistration{
		URL: s.ServeApp(t, priceFunction{t}), Config: &protocol.FunctionConfig{InvokeRoles: &[]string{"payments"}}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, reg.StatusCode(), string(reg.Body))
	started, err = bossAPI.StartRunWithBodyWithResponse(t.Context(), "guarded", &protocol.StartRunParams{}, "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, started.StatusCode(), string(started.Body))
	_, err = run(token, "runs", "request", started.JSON202.ID, "price", `{"sku":"A-1"}`, "--wait", "0")
	require.ErrorContains(t, err, "403")
	require.ErrorContains(t, err, "payments")
	out, err = run(token, "runs", "requests", started.JSON202.ID)
	require.NoError(t, err)
	require.Equal(t, "no requests\n", out, "a refused request is not sent")

	// Bad arguments are usage errors before anything is sent.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"runs", "request", runID}, "runs request: missing NAME"},
		{[]string{"runs", "request", runID, "price", "{nope"}, "runs request: the request data is not valid JSON: {nope"},
		{[]string{"runs", "request", runID, "price", "1", "2"}, `runs request: unexpected argument "2"`},
		{[]string{"runs", "requests", runID, "--limit", "501"}, "runs requests: --limit must be from 1 to 500"},
	} {
		_, err := run(token, tc.args...)
		require.EqualError(t, err, tc.want, "%v", tc.args)
	}
	// The gateway's bound on the wait reaches the caller.
	_, err = run(token, "runs", "request", runID, "price", "--wait", "2m")
	require.ErrorContains(t, err, "longer than the maximum of 1m0s")
}

// noReplyMessage is the error message of a request the run ended without replying to,
// read from the gateway once the run has ended.
func noReplyMessage(t *testing.T, api *protocol.ClientWithResponses, runID, id string) string {
	t.Helper()
	var msg string
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		g, err := api.GetRequestWithResponse(t.Context(), runID, id, nil)
		if assert.NoError(ct, err) && assert.NotNil(ct, g.JSON200, string(g.Body)) && assert.NotNil(ct, g.JSON200.Error) {
			msg = g.JSON200.Error.Message
		}
	}, 30*time.Second, 10*time.Millisecond)
	return msg
}
