package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/gateway"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/request"
	"github.com/stepgate/stepgate/protocol"
)

// The functions of these tests speak the protocol without an SDK: a request is taken by
// a receive await of the topic "request:<name>" at seq 1, and answered by a checkpoint
// of kind reply named after the request's id.

// receiveRequest is the answer that suspends a run on a receive of the requests named
// name at seq 1.
func receiveRequest(name string) string {
	return fmt.Sprintf(`{"status":"suspended","await":{"type":"receive","seq":1,"name":%q,"topic":%q,"timeout":"1h"}}`,
		"request:"+name, "request:"+name)
}

// takenRequest is the request journaled at seq 1 by the receive, as the function sees
// it.
func takenRequest(t *testing.T, req *protocol.InvocationRequest) (id string, data json.RawMessage) {
	var out struct {
		Message struct {
			ID   string          `json:"id"`
			Data json.RawMessage `json:"data"`
		} `json:"message"`
	}
	if assert.Equal(t, protocol.EntryKindReceive, req.Journal[0].Kind) {
		assert.NoError(t, json.Unmarshal(*req.Journal[0].Output, &out))
	}
	return out.Message.ID, out.Message.Data
}

func sendRequest(t *testing.T, c *protocol.ClientWithResponses, runID, wait string, r protocol.RequestSend) *protocol.SendRequestResponse {
	t.Helper()
	var p *protocol.SendRequestParams
	if wait != "" {
		p = &protocol.SendRequestParams{Wait: &wait}
	}
	resp, err := c.SendRequestWithResponse(t.Context(), runID, p, r)
	require.NoError(t, err)
	return resp
}

func getRequest(t *testing.T, c *protocol.ClientWithResponses, runID, id, wait string) *protocol.GetRequestResponse {
	t.Helper()
	var p *protocol.GetRequestParams
	if wait != "" {
		p = &protocol.GetRequestParams{Wait: &wait}
	}
	resp, err := c.GetRequestWithResponse(t.Context(), runID, id, p)
	require.NoError(t, err)
	return resp
}

func problemDetail(t *testing.T, body []byte) string {
	t.Helper()
	var p protocol.Problem
	require.NoError(t, json.Unmarshal(body, &p), string(body))
	return p.Detail
}

// TestRequestReplied: a request sent while the run waits for it is answered 200 with
// the reply; the reply is journaled once, also when the function, invoked again,
// checkpoints it again as it replays; only the run's tenant sees it, and sending one
// needs events:send.
func TestRequestReplied(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Gateway: manyLongPolls})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	viewer := s.Client(t, s.NewToken(t, auth.Identity{Subject: "vic", Tenant: "t1", Roles: []string{"viewer"}}))
	other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"admin"}}))

	var mu sync.Mutex
	var replays []int // the codes of the reply's checkpoint, one per invocation that made it
	f := &rawFunction{answer: func(req *protocol.InvocationRequest, checkpoint func(string) (int, string)) string {
		switch len(req.Journal) {
		case 0:
			return receiveRequest("price")
		case 1, 2:
			// The second invocation replays: a function that checkpoints its reply again
			// journals nothing new.
			id, data := takenRequest(t, req)
			var in struct{ Qty int }
			assert.NoError(t, json.Unmarshal(data, &in))
			code, body := checkpoint(fmt.Sprintf(`{"seq":2,"kind":"reply","name":%q,"output":{"total":%d}}`, id, 3*in.Qty))
			assert.Equal(t, http.StatusOK, code, body)
			mu.Lock()
			replays = append(replays, code)
			mu.Unlock()
			if len(req.Journal) == 1 {
				return `{"status":"suspended","await":{"type":"continue","seq":3,"name":"again"}}`
			}
			return `{"status":"completed","output":"done"}`
		}
		return `{"status":"failed","error":{"type":"unexpected","message":"journal too long"}}`
	}}
	register(t, s, c, "pricer", f, nil)
	runID := startAsync(t, c, "pricer", `{}`)
	receivingOn(t, c, runID, 1)

	resp := sendRequest(t, viewer, runID, "30s", protocol.RequestSend{Name: "price", Data: ptr(protocol.AnyJSON(`{"qty":2}`))})
	require.Equal(t, http.StatusForbidden, resp.StatusCode(), string(resp.Body))
	require.Contains(t, problemDetail(t, resp.Body), "needs the events:send permission")
	resp = sendRequest(t, other, runID, "30s", protocol.RequestSend{Name: "price"})
	require.Equal(t, http.StatusNotFound, resp.StatusCode(), "another tenant's run: %s", resp.Body)

	resp = sendRequest(t, c, runID, "30s", protocol.RequestSend{Name: "price", Data: ptr(protocol.AnyJSON(`{"qty":2}`)), ID: ptr("order-7")})
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	got := *resp.JSON200
	require.Equal(t, protocol.RunRequestStatus("replied"), got.Status)
	require.Equal(t, "order-7", got.ID)
	require.Equal(t, "price", got.Name)
	require.JSONEq(t, `{"total":6}`, string(*got.Reply))
	require.Nil(t, got.Error)
	require.Equal(t, ptr(2), got.ReplySeq)
	require.Equal(t, ptr(1), got.ReceivedSeq)

	res := mustResult(t, c, runID)
	require.Equal(t, protocol.RunStatusCompleted, res.Status, string(*res.Output))
	mu.Lock()
	require.Equal(t, []int{200, 200}, replays, "the function was invoked twice, and checkpointed its reply each time")
	mu.Unlock()
	run := getRun(t, c, runID)
	require.Len(t, run.Journal, 2, "a receive and one reply")
	require.Equal(t, protocol.EntryKindReply, run.Journal[1].Kind)
	require.Equal(t, "order-7", run.Journal[1].Name)

	// Reading needs runs:read and the run's tenant; the run's end does not change a reply.
	g := getRequest(t, viewer, runID, "order-7", "")
	require.Equal(t, http.StatusOK, g.StatusCode(), string(g.Body))
	require.JSONEq(t, `{"total":6}`, string(*g.JSON200.Reply))
	require.Equal(t, protocol.RunRequestStatus("replied"), g.JSON200.Status)
	g = getRequest(t, other, runID, "order-7", "1s")
	require.Equal(t, http.StatusNotFound, g.StatusCode(), string(g.Body))
	g = getRequest(t, c, runID, "order-8", "")
	require.Equal(t, http.StatusNotFound, g.StatusCode(), string(g.Body))
	require.Contains(t, problemDetail(t, g.Body), `has no request "order-8"`)
	list, err := c.ListRequestsWithResponse(t.Context(), runID, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, list.StatusCode(), string(list.Body))
	require.Len(t, list.JSON200.Requests, 1)
	require.Equal(t, protocol.RunRequestStatus("replied"), list.JSON200.Requests[0].Status)
	list, err = other.ListRequestsWithResponse(t.Context(), runID, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, list.StatusCode(), string(list.Body))

	// The same id again answers the first request; a finished run takes no new one.
	resp = sendRequest(t, c, runID, "", protocol.RequestSend{Name: "price", ID: ptr("order-7")})
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	require.Equal(t, ptr(true), resp.JSON200.Duplicate)
	resp = sendRequest(t, c, runID, "", protocol.RequestSend{Name: "price"})
	require.Equal(t, http.StatusConflict, resp.StatusCode(), string(resp.Body))
	require.Contains(t, problemDetail(t, resp.Body), "a finished run takes no requests")
}

// TestRequestBounds: names, waits, sizes and ids are checked, plain messages may not
// pose as requests, and a run holds at most journal.MaxPendingRequests requests not
// replied to.
func TestRequestBounds(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Gateway: manyLongPolls})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	sink := &rawFunction{answer: func(*protocol.InvocationRequest, func(string) (int, string)) string {
		return receiveRequest("never")
	}}
	register(t, s, c, "sink", sink, nil)
	runID := startAsync(t, c, "sink", `{}`)
	receivingOn(t, c, runID, 1)

	for _, tc := range []struct {
		name, wait string
		req        protocol.RequestSend
		code       int
		detail     string
	}{
		{"LongName", "", protocol.RequestSend{Name: strings.Repeat("n", 256)}, 400, "request name"},
		{"LongWait", "2m", protocol.RequestSend{Name: "a"}, 400, "wait 2m0s is longer than the maximum of 1m0s"},
		{"BadWait", "soon", protocol.RequestSend{Name: "a"}, 400, `wait "soon" is not a duration`},
		{"RunSentID", "", protocol.RequestSend{Name: "a", ID: ptr(runID + ":3")}, 400, "reserved"},
		{"LargeData", "", protocol.RequestSend{Name: "a", Data: ptr(protocol.AnyJSON(`"` + strings.Repeat("x", 2<<20) + `"`))}, 413, "larger than the gateway's limit"},
	} {
		resp := sendRequest(t, c, runID, tc.wait, tc.req)
		require.Equal(t, tc.code, resp.StatusCode(), "%s: %s", tc.name, resp.Body)
		require.Contains(t, problemDetail(t, resp.Body), tc.detail, tc.name)
	}

	// Plain messages on a request's topic are refused: only this API sends requests.
	resp := sendMessage(t, c, runID, protocol.MessageSend{Topic: "request:never", ID: ptr("m-1")})
	require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
	require.Contains(t, problemDetail(t, resp.Body), `message topic "request:never" begins with "request:", which is reserved for requests`)
	started, err := c.StartRunWithMessageWithResponse(t.Context(), "sink", &protocol.StartRunWithMessageParams{IdempotencyKey: "k-1"},
		protocol.StartWithMessage{Message: struct {
			Data  *protocol.AnyJSON `json:"data,omitempty"`
			Topic string            `json:"topic"`
		}{Topic: "request:never"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, started.StatusCode(), "a start with a message is a plain message: %s", started.Body)
	require.Contains(t, problemDetail(t, started.Body), `message topic "request:never" begins with "request:", which is reserved for requests`)
	mustSendMessage(t, c, runID, protocol.MessageSend{Topic: "plain", ID: ptr("m-2")})
	r := sendRequest(t, c, runID, "", protocol.RequestSend{Name: "a", ID: ptr("m-2")})
	require.Equal(t, http.StatusConflict, r.StatusCode(), string(r.Body))
	require.Contains(t, problemDetail(t, r.Body), `already has a message with id "m-2", on topic "plain"`)

	// Any name may be an id: its Location reads it back.
	odd := sendRequest(t, c, runID, "", protocol.RequestSend{Name: "a", ID: ptr("a/b?c%d é")})
	require.Equal(t, http.StatusAccepted, odd.StatusCode(), string(odd.Body))
	loc := odd.HTTPResponse.Header.Get("Location")
	require.Equal(t, http.StatusAccepted, poll(t, t.Context(), s, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}), http.MethodGet, loc).status, loc)
	g := getRequest(t, c, runID, "a/b?c%d é", "")
	require.Equal(t, http.StatusAccepted, g.StatusCode(), string(g.Body))
	require.Equal(t, "a/b?c%d é", g.JSON202.ID)

	for i := range journal.MaxPendingRequests - 1 {
		r := sendRequest(t, c, runID, "", protocol.RequestSend{Name: "a", ID: ptr(fmt.Sprintf("r-%d", i))})
		require.Equal(t, http.StatusAccepted, r.StatusCode(), string(r.Body))
		require.Equal(t, protocol.RunRequestStatus("pending"), r.JSON202.Status)
		require.False(t, r.JSON202.Received)
	}
	r = sendRequest(t, c, runID, "", protocol.RequestSend{Name: "a"})
	require.Equal(t, http.StatusTooManyRequests, r.StatusCode(), string(r.Body))
	require.Contains(t, problemDetail(t, r.Body), fmt.Sprintf("has %d requests not replied to, the limit of a run", journal.MaxPendingRequests))
	r = sendRequest(t, c, runID, "", protocol.RequestSend{Name: "a", ID: ptr("r-0")})
	require.Equal(t, http.StatusAccepted, r.StatusCode(), "a duplicate is answered past the limit: %s", r.Body)
	require.Equal(t, ptr(true), r.JSON202.Duplicate)

	page, err := c.ListRequestsWithResponse(t.Context(), runID, &protocol.ListRequestsParams{Limit: ptr(60)})
	require.NoError(t, err)
	require.Len(t, page.JSON200.Requests, 60)
	require.Equal(t, "r-98", page.JSON200.Requests[0].ID, "newest first")
	require.NotNil(t, page.JSON200.NextCursor)
	page, err = c.ListRequestsWithResponse(t.Context(), runID, &protocol.ListRequestsParams{Limit: ptr(60), Cursor: page.JSON200.NextCursor})
	require.NoError(t, err)
	require.Len(t, page.JSON200.Requests, 40)
	require.Equal(t, "a/b?c%d é", page.JSON200.Requests[39].ID)
	require.Nil(t, page.JSON200.NextCursor)
}

// TestRequestSlowReply: a request not replied to within its wait is a 202 with where
// to read it; a GET that waits there is answered once the reply is journaled.
func TestRequestSlowReply(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Gateway: manyLongPolls})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	release := make(chan struct{})
	f := &rawFunction{answer: func(req *protocol.InvocationRequest, checkpoint func(string) (int, string)) string {
		if len(req.Journal) == 0 {
			return receiveRequest("report")
		}
		id, _ := takenRequest(t, req)
		<-release
		code, body := checkpoint(fmt.Sprintf(`{"seq":2,"kind":"reply","name":%q,"output":"late"}`, id))
		assert.Equal(t, http.StatusOK, code, body)
		return `{"status":"completed","output":"done"}`
	}}
	register(t, s, c, "slow", f, nil)
	runID := startAsync(t, c, "slow", `{}`)
	receivingOn(t, c, runID, 1)

	// The function holds its reply until released: the wait ends first.
	resp := sendRequest(t, c, runID, "10ms", protocol.RequestSend{Name: "report"})
	require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
	rid := resp.JSON202.ID
	require.Equal(t, protocol.RunRequestStatus("pending"), resp.JSON202.Status)
	require.Equal(t, "/v1/runs/"+runID+"/requests/"+rid, resp.HTTPResponse.Header.Get("Location"))
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		g := getRequest(t, c, runID, rid, "")
		if assert.Equal(ct, http.StatusAccepted, g.StatusCode(), string(g.Body)) {
			assert.True(ct, g.JSON202.Received, "the run took the request")
		}
	}, 30*time.Second, 5*time.Millisecond)

	done := make(chan *protocol.GetRequestResponse, 1)
	go func() {
		resp, err := c.GetRequestWithResponse(t.Context(), runID, rid, &protocol.GetRequestParams{Wait: ptr("60s")})
		assert.NoError(t, err)
		done <- resp
	}()
	close(release)
	g := <-done
	require.Equal(t, http.StatusOK, g.StatusCode(), string(g.Body))
	require.JSONEq(t, `"late"`, string(*g.JSON200.Reply))
}

// TestRequestNotReplied: the requests of a run that ends without replying fail with an
// error saying so, also for a client waiting on one.
func TestRequestNotReplied(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Gateway: manyLongPolls})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	release := make(chan struct{})
	f := &rawFunction{answer: func(req *protocol.InvocationRequest, _ func(string) (int, string)) string {
		if len(req.Journal) == 0 {
			return receiveRequest("q")
		}
		<-release
		return `{"status":"completed","output":"bye"}`
	}}
	register(t, s, c, "quitter", f, nil)
	runID := startAsync(t, c, "quitter", `{}`)
	receivingOn(t, c, runID, 1)

	first := sendRequest(t, c, runID, "", protocol.RequestSend{Name: "q", ID: ptr("taken")})
	require.Equal(t, http.StatusAccepted, first.StatusCode(), string(first.Body))
	waited := make(chan *protocol.SendRequestResponse, 1)
	go func() {
		resp, err := c.SendRequestWithResponse(t.Context(), runID, &protocol.SendRequestParams{Wait: ptr("60s")},
			protocol.RequestSend{Name: "q", ID: ptr("waiting")})
		assert.NoError(t, err)
		waited <- resp
	}()
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		list, err := c.ListRequestsWithResponse(t.Context(), runID, nil)
		if assert.NoError(ct, err) && assert.Equal(ct, http.StatusOK, list.StatusCode()) {
			assert.Len(ct, list.JSON200.Requests, 2, "the second request is sent")
		}
	}, 30*time.Second, 5*time.Millisecond)
	close(release)

	resp := <-waited
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	require.Equal(t, protocol.RunRequestStatus("failed"), resp.JSON200.Status)
	require.Equal(t, request.ErrorTypeNoReply, resp.JSON200.Error.Type)
	require.Contains(t, resp.JSON200.Error.Message, "is completed: it ended without replying to request \"waiting\"")
	require.False(t, resp.JSON200.Received)
	g := getRequest(t, c, runID, "taken", "")
	require.Equal(t, http.StatusOK, g.StatusCode(), string(g.Body))
	require.Equal(t, protocol.RunRequestStatus("failed"), g.JSON200.Status)
	require.True(t, g.JSON200.Received)
	require.Equal(t, request.ErrorTypeNoReply, g.JSON200.Error.Type)
}

// TestRequestMaliciousReplies: a function may reply only to a request it received, once:
// a reply to anything else, garbage, a send posing as a request, is refused with a 400
// naming why and journals nothing; a reply contradicting the journal fails the run.
func TestRequestMaliciousReplies(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Gateway: manyLongPolls})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	sink := &rawFunction{answer: func(*protocol.InvocationRequest, func(string) (int, string)) string {
		return receiveRequest("never")
	}}
	register(t, s, c, "sink", sink, nil)
	type outcome struct {
		code int
		body string
	}
	results := make(chan []outcome, 1)
	f := &rawFunction{answer: func(req *protocol.InvocationRequest, checkpoint func(string) (int, string)) string {
		if len(req.Journal) == 0 {
			return receiveRequest("r")
		}
		id, _ := takenRequest(t, req)
		var in struct{ Target string }
		assert.NoError(t, json.Unmarshal(req.Run.Input, &in))
		var got []outcome
		for _, e := range []string{
			`{"seq":2,"kind":"reply","name":"nope","output":1}`,
			`{"seq":2,"kind":"reply","name":"m-1","output":1}`,
			`{"seq":2,"kind":"reply","name":"x-1","output":1}`,
			`{"seq":2,"kind":"reply","name":"pending-1","output":1}`,
			fmt.Sprintf(`{"seq":2,"kind":"reply","name":%q,"output":"\u0000"}`, id),
			fmt.Sprintf(`{"seq":2,"kind":"reply","name":%q,"output":1,"error":{"type":"t","message":"m"}}`, id),
			fmt.Sprintf(`{"seq":5,"kind":"reply","name":%q,"output":1}`, id),
			fmt.Sprintf(`{"seq":2,"kind":"send","name":"request:r","output":{"run_id":%q,"topic":"request:r"}}`, in.Target),
			fmt.Sprintf(`{"seq":2,"kind":"reply","name":%q,"error":{"type":"sold_out","message":"no stock"}}`, id),
			fmt.Sprintf(`{"seq":2,"kind":"reply","name":%q,"error":{"type":"sold_out","message":"no stock"}}`, id),
			fmt.Sprintf(`{"seq":3,"kind":"reply","name":%q,"output":2}`, id),
			fmt.Sprintf(`{"seq":1,"kind":"reply","name":%q,"output":2}`, id),
		} {
			code, body := checkpoint(e)
			got = append(got, outcome{code, body})
		}
		results <- got
		return `{"status":"completed","output":"ok"}`
	}}
	register(t, s, c, "rogue", f, nil)
	targetID := startAsync(t, c, "sink", `{}`)
	receivingOn(t, c, targetID, 1)
	x := sendRequest(t, c, targetID, "", protocol.RequestSend{Name: "x", ID: ptr("x-1")})
	require.Equal(t, http.StatusAccepted, x.StatusCode(), string(x.Body))

	runID := startAsync(t, c, "rogue", fmt.Sprintf(`{"target":%q}`, targetID))
	receivingOn(t, c, runID, 1)
	mustSendMessage(t, c, runID, protocol.MessageSend{Topic: "plain", ID: ptr("m-1")})
	pending := sendRequest(t, c, runID, "", protocol.RequestSend{Name: "other", ID: ptr("pending-1")})
	require.Equal(t, http.StatusAccepted, pending.StatusCode(), string(pending.Body))
	resp := sendRequest(t, c, runID, "30s", protocol.RequestSend{Name: "r", ID: ptr("r-1")})
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	require.Equal(t, protocol.RunRequestStatus("replied"), resp.JSON200.Status)
	require.Nil(t, resp.JSON200.Reply)
	require.Equal(t, "sold_out", resp.JSON200.Error.Type, "an error reply")
	require.Equal(t, "no stock", resp.JSON200.Error.Message)

	got := <-results
	for i, want := range []struct {
		code   int
		detail string
	}{
		{400, `has no request with id "nope"`},
		{400, `has no request with id "m-1"`},
		{400, `has no request with id "x-1"`},
		{400, `has not received request "pending-1" yet`},
		{400, `output contains the escape \u0000`},
		{400, "not both"},
		{400, "seq 5 is not the journal's next"},
		{400, `message topic "request:r" begins with "request:", which is reserved for requests`},
		{200, ""},
		{200, ""},
		{400, `already replied to request "r-1", at seq 2: a request takes one reply`},
		{409, "nondeterminism"},
	} {
		require.Equal(t, want.code, got[i].code, "checkpoint %d: %s", i, got[i].body)
		if want.code != 200 {
			require.Contains(t, problemDetail(t, []byte(got[i].body)), want.detail, "checkpoint %d", i)
		}
	}
	res := mustResult(t, c, runID)
	require.Equal(t, protocol.RunStatusFailed, res.Status, "the contradicting reply failed the run")
	run := getRun(t, c, runID)
	require.Len(t, run.Journal, 2, "a receive and one reply")
	x2 := getRequest(t, c, targetID, "x-1", "")
	require.Equal(t, http.StatusAccepted, x2.StatusCode(), "another run's request is still pending: %s", x2.Body)
	p := getRequest(t, c, runID, "pending-1", "")
	require.Equal(t, http.StatusOK, p.StatusCode(), string(p.Body))
	require.Equal(t, protocol.RunRequestStatus("failed"), p.JSON200.Status)
	require.Equal(t, request.ErrorTypeNoReply, p.JSON200.Error.Type)
}

// TestRequestWaitsAreLongPolls: a request or a read of one with ?wait holds a place
// among its caller's live streams, as other long-polls do: past the limit it is a 429
// naming it, and sends nothing; without wait nothing is held.
func TestRequestWaitsAreLongPolls(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Gateway: func(c *gateway.Config) { c.MaxStreamsPerSubject = 1 }})
	c := s.Client(t, s.Token)
	sink := &rawFunction{answer: func(*protocol.InvocationRequest, func(string) (int, string)) string {
		return receiveRequest("never")
	}}
	register(t, s, c, "sink", sink, nil)
	runID := startAsync(t, c, "sink", `{}`)
	receivingOn(t, c, runID, 1)
	held := sendRequest(t, c, runID, "", protocol.RequestSend{Name: "a", ID: ptr("held")})
	require.Equal(t, http.StatusAccepted, held.StatusCode(), string(held.Body))

	path := "/v1/runs/" + runID + "/requests/held"
	hold(t, s, s.Token, 1, func(int) (string, string) { return http.MethodGet, path + "?wait=60s" }, func() bool {
		return poll(t, t.Context(), s, s.Token, http.MethodGet, path+"?wait=1ms").status == http.StatusTooManyRequests
	})
	a := poll(t, t.Context(), s, s.Token, http.MethodGet, path+"?wait=1ms")
	require.Equal(t, "tester has 1 live streams open on this gateway, the limit per subject (long-polls with ?wait count): close one first", a.detail)
	resp := sendRequest(t, c, runID, "1ms", protocol.RequestSend{Name: "a", ID: ptr("refused")})
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode(), string(resp.Body))
	require.Contains(t, problemDetail(t, resp.Body), "live streams open on this gateway")
	g := getRequest(t, c, runID, "refused", "")
	require.Equal(t, http.StatusNotFound, g.StatusCode(), "a refused request is not sent: %s", g.Body)
	resp = sendRequest(t, c, runID, "", protocol.RequestSend{Name: "a", ID: ptr("no-wait")})
	require.Equal(t, http.StatusAccepted, resp.StatusCode(), "without wait nothing is held: %s", resp.Body)
}

// TestRequestReplyAfterRerun: a run rerun from the step after its receive of a request
// replies to the request again, in its own journal, though the request is in the first
// run's mailbox.
func TestRequestReplyAfterRerun(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Gateway: manyLongPolls})
	c := s.Client(t, s.Token)
	f := &rawFunction{answer: func(req *protocol.InvocationRequest, checkpoint func(string) (int, string)) string {
		if len(req.Journal) == 0 {
			return receiveRequest("ask")
		}
		id, _ := takenRequest(t, req)
		code, body := checkpoint(fmt.Sprintf(`{"seq":2,"kind":"reply","name":%q,"output":%q}`, id, req.Run.ID))
		if code != http.StatusOK {
			return fmt.Sprintf(`{"status":"failed","error":{"type":"reply","message":%q}}`, body)
		}
		return `{"status":"completed","output":"ok"}`
	}}
	register(t, s, c, "forker", f, nil)
	runID := startAsync(t, c, "forker", `{}`)
	receivingOn(t, c, runID, 1)
	resp := sendRequest(t, c, runID, "30s", protocol.RequestSend{Name: "ask", ID: ptr("q-1")})
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	require.JSONEq(t, fmt.Sprintf("%q", runID), string(*resp.JSON200.Reply))
	require.Equal(t, protocol.RunStatusCompleted, mustResult(t, c, runID).Status)

	rerun, err := c.RerunRunWithResponse(t.Context(), runID, protocol.RerunRequest{FromSeq: ptr(2)})
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, rerun.StatusCode(), string(rerun.Body))
	res := mustResult(t, c, rerun.JSON202.ID)
	require.Equal(t, protocol.RunStatusCompleted, res.Status, "%+v", res.Error)
	run := getRun(t, c, rerun.JSON202.ID)
	require.Len(t, run.Journal, 2)
	require.Equal(t, protocol.EntryKindReply, run.Journal[1].Kind)
	require.JSONEq(t, fmt.Sprintf("%q", rerun.JSON202.ID), string(*run.Journal[1].Output))
	g := getRequest(t, c, runID, "q-1", "")
	require.JSONEq(t, fmt.Sprintf("%q", runID), string(*g.JSON200.Reply), "the first run's request keeps its reply")
}
