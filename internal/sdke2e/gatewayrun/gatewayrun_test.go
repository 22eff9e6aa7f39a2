// Package gatewayrun_test runs the conformance scenarios (protocol/conformance) against
// a real gateway: one stack (internal/wiring/stack) on a real Postgres, each scenario
// in a tenant of its own, in parallel. The scenario's functions are served by
// conformance.NewFunction on a loopback server, behind a check of the gateway's
// signature, and registered with the gateway by URL. It lives in the server's module, not
// beside the scenarios: the protocol's module (protocol/go.mod) does not import the
// server, not even in its tests.
package gatewayrun_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/conformance"
	"github.com/stepgate/stepgate/protocol/signature"
)

func TestMain(m *testing.M) { stack.Main(m) }

// restTimeout bounds how long a run may take to come to rest after a delivery.
const restTimeout = 30 * time.Second

// TestScenarios runs every scenario against the gateway.
func TestScenarios(t *testing.T) {
	t.Parallel()
	scenarios, err := conformance.Load()
	require.NoError(t, err)
	require.NotEmpty(t, scenarios)
	s := stack.Start(t, stack.Options{})
	verifier := signature.NewVerifier(0, 0, s.Keys.Verification)
	for _, sc := range scenarios {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			run(t, s, verifier, sc)
		})
	}
}

// run plays scenario sc on the gateway s, in a tenant of its own.
func run(t *testing.T, s *stack.Stack, verifier *signature.Verifier, sc conformance.Scenario) {
	tenant := "conformance." + sc.Name
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "conformance", Tenant: tenant, Roles: []string{"admin"}}))
	fn := conformance.NewFunction(&sc, nil)
	sigs := &errs{}
	srv := httptest.NewServer(verifying(verifier, tenant, fn, sigs))
	t.Cleanup(srv.Close)
	for name := range sc.Functions {
		resp, err := c.RegisterFunctionWithResponse(t.Context(), name, protocol.FunctionRegistration{URL: srv.URL + "/" + name})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), "register %s: %s", name, resp.Body)
	}
	input := sc.Input
	if input == nil {
		input = json.RawMessage("null")
	}
	start, err := c.StartRunWithBodyWithResponse(t.Context(), sc.Start, nil, "application/json", bytes.NewReader(input))
	require.NoError(t, err)
	require.NotNil(t, start.JSON202, "start %s: HTTP %d %s", sc.Start, start.StatusCode(), start.Body)
	id := start.JSON202.ID

	r := rest(t, c, fn, id, 1)
	for i, d := range sc.Deliveries {
		before := r.Invocations
		deliver(t, c, fn, id, i, d)
		if d.Resumes {
			r = rest(t, c, fn, id, before+1)
			continue
		}
		r = rest(t, c, fn, id, before)
		require.Equal(t, before, r.Invocations, "deliveries[%d] (%s) resumed the run; the scenario says it does not", i, d.Kind())
	}
	o := conformance.Outcome{Status: string(r.Status), Error: r.Error}
	if r.Output != nil {
		o.Output = *r.Output
	}
	if err := errors.Join(sigs.get()...); err != nil {
		t.Error(err)
	}
	if err := sc.Check(id, o, fn); err != nil {
		t.Errorf("%s\n(the scenario: %s)", err, sc.Description)
	}
}

// deliver applies the delivery d to run id.
func deliver(t *testing.T, c *protocol.ClientWithResponses, fn *conformance.Function, id string, i int, d conformance.Delivery) {
	t.Helper()
	ctx := t.Context()
	what := fmt.Sprintf("deliveries[%d] (%s)", i, d.Kind())
	data := func(raw json.RawMessage) *protocol.AnyJSON {
		if raw == nil {
			return nil
		}
		return &raw
	}
	switch {
	case d.Event != nil:
		resp, err := c.SendEventWithResponse(ctx, protocol.EventSend{Name: d.Event.Name, Data: data(d.Event.Data)})
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, resp.StatusCode(), "%s: %s", what, resp.Body)
	case d.Message != nil:
		resp, err := c.SendMessageWithResponse(ctx, id, protocol.MessageSend{Topic: d.Message.Topic, Data: data(d.Message.Data)})
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, resp.StatusCode(), "%s: %s", what, resp.Body)
	case d.Request != nil:
		resp, err := c.SendRequestWithResponse(ctx, id, nil, protocol.RequestSend{Name: d.Request.Name, Data: data(d.Request.Data)})
		require.NoError(t, err)
		// 200 when the run ended (without replying, in these scenarios) before the answer.
		require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, resp.StatusCode(), "%s: %s", what, resp.Body)
	case d.ResolveCallback != nil:
		_, token, ok := fn.Callback(id, d.ResolveCallback.Name)
		require.True(t, ok, "%s: the run opened no callback %q", what, d.ResolveCallback.Name)
		body := d.ResolveCallback.Data
		if body == nil {
			body = json.RawMessage("null")
		}
		resp, err := c.ResolveCallbackWithBodyWithResponse(ctx, token, "application/json", bytes.NewReader(body))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), "%s: %s", what, resp.Body)
	case d.RejectCallback != nil:
		_, token, ok := fn.Callback(id, d.RejectCallback.Name)
		require.True(t, ok, "%s: the run opened no callback %q", what, d.RejectCallback.Name)
		rej := protocol.CallbackRejection{Message: d.RejectCallback.Message}
		if d.RejectCallback.Type != "" {
			rej.Type = &d.RejectCallback.Type
		}
		resp, err := c.RejectCallbackWithResponse(ctx, token, rej)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), "%s: %s", what, resp.Body)
	case d.Wait != "":
		// Time passing is what the scenario asks for. A wait that resumes the run is
		// waited for by rest, up to its deadline; one that does not is shown by letting
		// the time pass.
		if !d.Resumes {
			time.Sleep(d.WaitDuration())
		}
	default:
		t.Fatalf("%s: a delivery of no known kind", what)
	}
}

// rest waits until run id has come to rest, its function having got at least `least`
// invocations, and returns it: ended, or suspended on a wait (a sleep, an event, a
// message, a callback, a child run itself at rest) with every invocation the gateway
// made answered. A run waiting for a step's retry, due (its wake time passed), queued
// or running is on its way.
func rest(t *testing.T, c *protocol.ClientWithResponses, fn *conformance.Function, id string, least int) protocol.RunDetail {
	t.Helper()
	deadline := time.Now().Add(restTimeout)
	var last protocol.RunDetail
	var why string
	for time.Now().Before(deadline) {
		r, ok, reason := atRest(t, c, fn, id)
		last, why = r, reason
		if ok && r.Invocations >= least {
			return r
		}
		if ok {
			why = fmt.Sprintf("%d invocations, waiting for %d", r.Invocations, least)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("run %s did not come to rest in %s: %s (status %s, %d invocations, the function got %d)", id, restTimeout, why, last.Status, last.Invocations, fn.Invocations(id))
	return last
}

// atRest reads run id and says whether it is at rest, or why not.
func atRest(t *testing.T, c *protocol.ClientWithResponses, fn *conformance.Function, id string) (protocol.RunDetail, bool, string) {
	t.Helper()
	resp, err := c.GetRunWithResponse(t.Context(), id, nil)
	require.NoError(t, err)
	if resp.StatusCode() == http.StatusNotFound {
		return protocol.RunDetail{}, false, "run " + id + " not found"
	}
	require.NotNil(t, resp.JSON200, "get run %s: HTTP %d %s", id, resp.StatusCode(), resp.Body)
	r := *resp.JSON200
	if got := fn.Invocations(id); got != r.Invocations {
		return r, false, fmt.Sprintf("the gateway made %d invocations, the function got %d", r.Invocations, got)
	}
	switch r.Status {
	case protocol.RunStatusCompleted, protocol.RunStatusFailed, protocol.RunStatusCancelled:
		return r, true, ""
	case protocol.RunStatusSuspended:
	default:
		return r, false, "status " + string(r.Status)
	}
	switch {
	case r.WakeAt != nil && !r.WakeAt.After(time.Now()):
		return r, false, "due since " + r.WakeAt.String()
	case r.Awaiting == nil:
		return r, false, "suspended on nothing"
	case r.Awaiting.Kind == "retry":
		return r, false, "waiting for a step's retry"
	case r.Awaiting.Kind == "invoke" && r.Awaiting.ChildID != nil:
		child, ok, why := atRest(t, c, fn, *r.Awaiting.ChildID)
		switch {
		case !ok:
			return r, false, "its child run: " + why
		case child.Status != protocol.RunStatusSuspended:
			return r, false, "its child run ended: " + string(child.Status)
		}
	}
	return r, true, ""
}

// verifying checks the gateway's signature on each request before next serves it,
// keeping what fails in e.
func verifying(v *signature.Verifier, tenant string, next http.Handler, e *errs) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/" {
			// A registration reads the manifest at its URL's directory: this server has none.
			http.NotFound(w, r)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			e.add(fmt.Errorf("read %s: %w", r.URL.Path, err))
			return
		}
		got, err := v.Verify(r.Context(), r.Header.Get(signature.Header), signature.Request{Method: r.Method, Path: signature.RequestPath(r), Body: body}, time.Now())
		if err == nil && got != tenant {
			err = fmt.Errorf("signed for tenant %q, not %q", got, tenant)
		}
		if err != nil {
			e.add(fmt.Errorf("%s %s: signature: %w", r.Method, r.URL.Path, err))
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}

// errs collects errors from the servers' goroutines.
type errs struct {
	mu   sync.Mutex
	list []error
}

func (e *errs) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, err)
}

func (e *errs) get() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]error(nil), e.list...)
}
