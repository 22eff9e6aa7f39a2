package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// quoteFunction speaks the protocol without an SDK: it takes one request named "quote"
// (a receive await of the topic "request:quote"), holds its reply until release is
// closed, then replies {"price": 10} (a reply checkpoint named after the request's id)
// and completes.
type quoteFunction struct {
	t       *testing.T
	release chan struct{}
}

func (f quoteFunction) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req protocol.InvocationRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if len(req.Journal) == 0 {
		_, _ = io.WriteString(w, `{"status":"suspended","await":{"type":"receive","seq":1,"name":"request:quote","topic":"request:quote","timeout":"1h"}}`)
		return
	}
	var taken struct {
		Message struct {
			ID string `json:"id"`
		} `json:"message"`
	}
	assert.NoError(f.t, json.Unmarshal(*req.Journal[0].Output, &taken))
	select {
	case <-f.release:
	case <-r.Context().Done():
		http.Error(w, "gone", http.StatusServiceUnavailable)
		return
	}
	if len(req.Journal) == 1 {
		reply := fmt.Sprintf(`{"seq":2,"kind":"reply","name":%q,"output":{"price":10}}`, taken.Message.ID)
		hreq, _ := http.NewRequestWithContext(context.WithoutCancel(r.Context()), "POST", req.Checkpoint.URL, strings.NewReader(reply))
		hreq.Header.Set("Authorization", "Bearer "+req.Checkpoint.Token)
		resp, err := http.DefaultClient.Do(hreq)
		if assert.NoError(f.t, err) {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			assert.Equal(f.t, http.StatusOK, resp.StatusCode, string(body))
		}
	}
	_, _ = io.WriteString(w, `{"status":"completed","output":"quoted"}`)
}

// runShowsItsRequests: a run waiting for a request says so ("a request named quote"); a
// request sent to it shows as pending, with its data, until the run replies; then the
// request shows replied, with the reply.
func runShowsItsRequests(t *testing.T, b *browser, s *stack.Stack, c *protocol.ClientWithResponses) {
	f := quoteFunction{t: t, release: make(chan struct{})}
	released := false
	defer func() {
		if !released {
			close(f.release)
		}
	}()
	reg, err := c.RegisterFunctionWithResponse(t.Context(), "quotes", protocol.FunctionRegistration{URL: s.ServeApp(t, f)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, reg.StatusCode(), string(reg.Body))
	id := start(t, c, "quotes", `{}`, nil)

	b.do("open the run", 10*time.Second, chromedp.Navigate(s.URL+"/#/runs/"+id))
	b.visible("it is suspended", runStatus("suspended"))
	require.Equal(t, "Waiting for a request named quote", b.text("what it waits for", "[data-testid=waiting-request]"))
	hidden := run(b, "no requests yet", chromedp.Evaluate[bool](`document.querySelector("[data-testid=run-requests]").hidden`))
	require.True(t, hidden, "the requests panel shows with no request")

	sent, err := c.SendRequestWithResponse(t.Context(), id, nil, protocol.RequestSend{Name: "quote", ID: new("q-1"), Data: new(protocol.AnyJSON(`{"sku":"A-1"}`))})
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, sent.StatusCode(), string(sent.Body))
	pending := `[data-testid=run-requests-pending] [data-testid=run-request][data-id="q-1"][data-status=pending]`
	text := b.text("the pending request", pending)
	require.Contains(t, text, "quote")
	require.Contains(t, text, "A-1")
	t.Logf("screenshot: %s", b.screenshot("run-request-pending"))

	close(f.release)
	released = true
	b.visible("the run completes", runStatus("completed"))
	replied := `[data-testid=run-request][data-id="q-1"][data-status=replied]`
	require.Contains(t, b.text("the reply", replied+" [data-testid=run-request-reply]"), "10")
	gone := run(b, "no pending request", chromedp.Evaluate[bool](`!document.querySelector("[data-testid=run-requests-pending]")`))
	require.True(t, gone, "the replied request still shows as pending")
	t.Logf("screenshot: %s", b.screenshot("run-request-replied"))
}
