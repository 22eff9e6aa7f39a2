// Package client_test tests the Go client (client) against a real gateway
// (internal/wiring/stack). It lives in the server's module because the client's module
// (client/go.mod) does not import the server, not even in its tests.
package client_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/client"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

func TestMain(m *testing.M) { stack.Main(m) }

type (
	Greeting struct {
		Name string `json:"name"`
	}
	Hello struct {
		Greeting string `json:"greeting"`
	}
	Order struct {
		Order string `json:"order"`
	}
	Paid struct {
		Order string `json:"order"`
		Paid  int    `json:"paid"`
	}
	Approval struct {
		Approved bool `json:"approved"`
	}
	Price struct {
		SKU   string `json:"sku"`
		Price int    `json:"price,omitempty"`
	}
)

// refs are the functions the tests call, as functions.Register returned them.
type refs struct {
	greet     client.Ref[Greeting, Hello]
	sleeper   client.Ref[struct{}, string]
	waiter    client.Ref[Order, Paid]
	inbox     client.Ref[struct{}, Approval]
	pricer    client.Ref[struct{}, string]
	publisher client.Ref[struct{}, string]
}

// startStack starts a gateway serving the test's functions.
func startStack(t *testing.T) (*stack.Stack, refs) {
	t.Helper()
	s := stack.Start(t, stack.Options{})
	app := s.NewApp()
	var r refs
	r.greet = functions.Register(app, "go.greet", func(ctx context.Context, in Greeting) (Hello, error) {
		g, err := step.Run(ctx, "greet", func(context.Context) (string, error) { return "hello " + in.Name, nil })
		return Hello{Greeting: g}, err
	})
	r.sleeper = functions.Register(app, "go.sleeper", func(ctx context.Context, _ struct{}) (string, error) {
		return "woke", step.Sleep(ctx, "nap", time.Hour)
	})
	r.waiter = functions.Register(app, "go.waiter", func(ctx context.Context, in Order) (Paid, error) {
		ev, err := step.WaitForEvent[Paid](ctx, "paid", "go.paid", step.Matching(step.Match{"data.order": in.Order}), step.Timeout(5*time.Minute)).Get()
		return ev.Data, err
	})
	r.inbox = functions.Register(app, "go.inbox", func(ctx context.Context, _ struct{}) (Approval, error) {
		m, err := step.Receive[Approval](ctx, "approval", step.Timeout(5*time.Minute)).Get()
		return m.Data, err
	})
	r.pricer = functions.Register(app, "go.pricer", func(ctx context.Context, _ struct{}) (string, error) {
		req, err := step.ReceiveRequest[Price](ctx, "price", step.Timeout(5*time.Minute)).Get()
		if err != nil {
			return "", err
		}
		return "replied", step.Reply(ctx, req.ID, Price{SKU: req.Data.SKU, Price: 10})
	})
	r.publisher = functions.Register(app, "go.publisher", func(ctx context.Context, _ struct{}) (string, error) {
		if err := step.SetValue(ctx, "progress", 1); err != nil {
			return "", err
		}
		w, err := step.Stream(ctx, "tokens")
		if err != nil {
			return "", err
		}
		for _, tok := range []string{"a", "b"} {
			if err := w.WriteString(tok); err != nil {
				return "", err
			}
		}
		if err := w.Close(); err != nil {
			return "", err
		}
		return "published", step.SetValue(ctx, "progress", 2)
	})
	s.Sync(t, s.ServeApp(t, app))
	return s, r
}

func newClient(t *testing.T, url, token string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, token, opts...)
	require.NoError(t, err)
	return c
}

// awaitStatus waits, up to 30s, until run id has status.
func awaitStatus(t *testing.T, c *client.Client, id string, status client.Status) {
	t.Helper()
	require.Eventually(t, func() bool {
		r, err := c.Get(t.Context(), id)
		return err == nil && r.Status == status
	}, 30*time.Second, 10*time.Millisecond, "run %s never became %s", id, status)
}

func TestClient(t *testing.T) {
	t.Parallel()
	s, fns := startStack(t)
	c := newClient(t, s.URL, s.Token)

	t.Run("RunIsTyped", func(t *testing.T) {
		t.Parallel()
		out, err := client.Run(t.Context(), c, fns.greet, Greeting{Name: "Ada"})
		require.NoError(t, err)
		require.Equal(t, Hello{Greeting: "hello Ada"}, out)
		// A ref made from the name calls the same function.
		out, err = client.Run(t.Context(), c, client.Ref[Greeting, Hello]("go.greet"), Greeting{Name: "Bo"})
		require.NoError(t, err)
		require.Equal(t, "hello Bo", out.Greeting)
	})

	t.Run("StartThenAttach", func(t *testing.T) {
		t.Parallel()
		started, err := client.Start(t.Context(), c, fns.greet, Greeting{Name: "Cy"})
		require.NoError(t, err)
		out, err := started.Attach(t.Context(), c)
		require.NoError(t, err)
		require.Equal(t, "hello Cy", out.Greeting)
		out, err = client.Attach[Hello](t.Context(), c, started.ID)
		require.NoError(t, err)
		require.Equal(t, "hello Cy", out.Greeting)

		// The same key answers the same run; with another input it is a conflict.
		a, err := client.Start(t.Context(), c, fns.greet, Greeting{Name: "Di"}, client.IdempotencyKey("go-key-1"))
		require.NoError(t, err)
		b, err := client.Start(t.Context(), c, fns.greet, Greeting{Name: "Di"}, client.IdempotencyKey("go-key-1"))
		require.NoError(t, err)
		require.Equal(t, a.ID, b.ID)
		_, err = client.Start(t.Context(), c, fns.greet, Greeting{Name: "Ed"}, client.IdempotencyKey("go-key-1"))
		var apiErr *client.APIError
		require.ErrorAs(t, err, &apiErr)
		require.Equal(t, 409, apiErr.Status)
		require.ErrorIs(t, err, client.ErrConflict)
	})

	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		started, err := client.Start(t.Context(), c, fns.sleeper, struct{}{})
		require.NoError(t, err)
		awaitStatus(t, c, started.ID, client.StatusSuspended)
		// A wait that runs out returns the context's error; the run goes on.
		short, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
		defer cancel()
		_, err = started.Attach(short, c)
		require.ErrorIs(t, err, context.DeadlineExceeded)

		require.NoError(t, c.Cancel(t.Context(), started.ID))
		_, err = started.Attach(t.Context(), c)
		var runErr *client.RunError
		require.ErrorAs(t, err, &runErr)
		require.Equal(t, client.StatusCancelled, runErr.Status)
		require.ErrorIs(t, err, client.ErrCancelled)
		require.ErrorIs(t, c.Cancel(t.Context(), started.ID), client.ErrConflict)
		_, err = c.Get(t.Context(), "00000000-0000-0000-0000-000000000000")
		require.ErrorIs(t, err, client.ErrNotFound)
	})

	t.Run("EventResumesAWaitingRun", func(t *testing.T) {
		t.Parallel()
		started, err := client.Start(t.Context(), c, fns.waiter, Order{Order: "o-7"})
		require.NoError(t, err)
		awaitStatus(t, c, started.ID, client.StatusSuspended)
		receipt, err := c.SendEvent(t.Context(), "go.paid", Paid{Order: "o-7", Paid: 42})
		require.NoError(t, err)
		require.Equal(t, []string{started.ID}, receipt.Resumed)
		out, err := started.Attach(t.Context(), c)
		require.NoError(t, err)
		require.Equal(t, Paid{Order: "o-7", Paid: 42}, out)
	})

	t.Run("Message", func(t *testing.T) {
		t.Parallel()
		started, err := client.Start(t.Context(), c, fns.inbox, struct{}{})
		require.NoError(t, err)
		receipt, err := c.Send(t.Context(), started.ID, "approval", Approval{Approved: true}, client.ID("approval-1"))
		require.NoError(t, err)
		require.Equal(t, "approval-1", receipt.ID)
		out, err := started.Attach(t.Context(), c)
		require.NoError(t, err)
		require.True(t, out.Approved)
	})

	t.Run("Request", func(t *testing.T) {
		t.Parallel()
		started, err := client.Start(t.Context(), c, fns.pricer, struct{}{})
		require.NoError(t, err)
		reply, err := client.Request[Price](t.Context(), c, started.ID, "price", Price{SKU: "A-1"})
		require.NoError(t, err)
		require.Equal(t, Price{SKU: "A-1", Price: 10}, reply)
		out, err := started.Attach(t.Context(), c)
		require.NoError(t, err)
		require.Equal(t, "replied", out)
	})

	t.Run("ValuesAndStream", func(t *testing.T) {
		t.Parallel()
		started, err := client.Start(t.Context(), c, fns.publisher, struct{}{})
		require.NoError(t, err)
		var chunks []string
		for chunk, err := range c.Stream(t.Context(), started.ID, "tokens", 0) {
			require.NoError(t, err)
			chunks = append(chunks, string(chunk))
		}
		require.Equal(t, []string{`"a"`, `"b"`}, chunks)
		_, err = started.Attach(t.Context(), c)
		require.NoError(t, err)
		values, err := c.Values(t.Context(), started.ID)
		require.NoError(t, err)
		require.Len(t, values, 1)
		require.Equal(t, "progress", values[0].Key)
		require.JSONEq(t, `2`, string(values[0].Value))
		chunks = nil
		for chunk, err := range c.Stream(t.Context(), started.ID, "tokens", 1) {
			require.NoError(t, err)
			chunks = append(chunks, string(chunk))
		}
		require.Equal(t, []string{`"b"`}, chunks)
	})

	t.Run("ForbiddenIsTyped", func(t *testing.T) {
		t.Parallel()
		viewer := newClient(t, s.URL, s.NewToken(t, stackIdentity("viewer")))
		_, err := client.Run(t.Context(), viewer, fns.greet, Greeting{Name: "Vi"})
		require.ErrorIs(t, err, client.ErrForbidden)
	})
}

// lossyProxy forwards requests to the gateway at target; the first start reaches the
// gateway (which creates the run) but its answer is replaced by a 503 with Retry-After,
// as when a gateway's answer is lost. It records each start's Idempotency-Key.
type lossyProxy struct {
	mu   sync.Mutex
	keys []string
	srv  *httptest.Server
}

func newLossyProxy(t *testing.T, target string) *lossyProxy {
	u, err := url.Parse(target)
	require.NoError(t, err)
	p := &lossyProxy{}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(resp *http.Response) error {
		req := resp.Request
		if req.Method != http.MethodPost || !strings.HasSuffix(req.URL.Path, "/runs") {
			return nil
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		p.keys = append(p.keys, req.Header.Get("Idempotency-Key"))
		if len(p.keys) == 1 {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			resp.StatusCode, resp.Status = http.StatusServiceUnavailable, "503 Service Unavailable"
			resp.Header = http.Header{"Retry-After": {"0"}, "Content-Type": {"application/problem+json"}}
			resp.Body = io.NopCloser(strings.NewReader(`{"title":"Service Unavailable","status":503,"detail":"lost"}`))
			resp.ContentLength = -1
		}
		return nil
	}
	p.srv = httptest.NewServer(rp)
	t.Cleanup(p.srv.Close)
	return p
}

func TestRetryAfter503StartsOneRun(t *testing.T) {
	t.Parallel()
	s, fns := startStack(t)
	proxy := newLossyProxy(t, s.URL)
	c := newClient(t, proxy.srv.URL, s.Token, client.WithBackoff(time.Millisecond, time.Second))

	out, err := client.Run(t.Context(), c, fns.greet, Greeting{Name: "Flo"})
	require.NoError(t, err)
	require.Equal(t, "hello Flo", out.Greeting)

	proxy.mu.Lock()
	keys := proxy.keys
	proxy.mu.Unlock()
	require.Len(t, keys, 2, "the start was tried twice")
	require.NotEmpty(t, keys[0])
	require.Equal(t, keys[0], keys[1], "with one idempotency key")

	// The gateway holds one run of the function.
	resp, err := s.Client(t, s.Token).ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{Function: new("go.greet")})
	require.NoError(t, err)
	require.NotNil(t, resp.JSON200, "%d %s", resp.StatusCode(), resp.Body)
	require.Len(t, resp.JSON200.Runs, 1)

	// Without retries the lost answer is the caller's error.
	proxy.mu.Lock()
	proxy.keys = nil
	proxy.mu.Unlock()
	noRetry := newClient(t, proxy.srv.URL, s.Token, client.WithRetries(0))
	_, err = client.Start(t.Context(), noRetry, fns.greet, Greeting{Name: "Gil"})
	var apiErr *client.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, http.StatusServiceUnavailable, apiErr.Status)
	require.Equal(t, "unavailable", apiErr.Code)
	require.Equal(t, "lost", apiErr.Detail)
}

// TestRetriesAreBounded: a gateway that always answers 503 is tried 1 + retries times,
// and a Retry-After past the longest backoff is not waited for.
func TestRetriesAreBounded(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	tries := 0
	retryAfter := "0"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		tries++
		w.Header().Set("Retry-After", retryAfter)
		mu.Unlock()
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprint(w, `{"title":"Service Unavailable","status":503,"detail":"stopping"}`)
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, "", client.WithRetries(2), client.WithBackoff(time.Millisecond, time.Second))
	_, err := c.Get(t.Context(), "r")
	require.ErrorIs(t, err, client.ErrUnavailable)
	require.Equal(t, 3, tries)

	mu.Lock()
	tries, retryAfter = 0, "3600"
	mu.Unlock()
	_, err = c.Get(t.Context(), "r")
	require.ErrorIs(t, err, client.ErrUnavailable)
	require.Equal(t, 1, tries)
}

func stackIdentity(role string) auth.Identity {
	return auth.Identity{Subject: "v", Tenant: auth.DefaultTenant, Roles: []string{role}}
}

// TestDroppedConnectionIsRetried: a start whose connection drops before an answer is
// tried again with the same idempotency key.
func TestDroppedConnectionIsRetried(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		n := len(keys)
		mu.Unlock()
		if n == 1 {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprint(w, `{"id":"r-1","status":"queued"}`)
	}))
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, "", client.WithBackoff(time.Millisecond, time.Second))
	started, err := client.Start(t.Context(), c, client.Ref[int, int]("f"), 1)
	require.NoError(t, err)
	require.Equal(t, client.Started[int]{ID: "r-1", Status: client.StatusQueued}, started)
	require.Len(t, keys, 2)
	require.NotEmpty(t, keys[0])
	require.Equal(t, keys[0], keys[1])
}
