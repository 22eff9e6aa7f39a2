package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/gateway"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// TestWaitInvocationsAreCapped: past its tenant's bound on the runs started with ?wait
// that the gateway invokes itself, a run is queued for the workers, and its request
// still gets the result.
func TestWaitInvocationsAreCapped(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Gateway: func(c *gateway.Config) { c.MaxWaitInvocationsPerTenant = 1 }})
	entered, release := make(chan string, 4), make(chan struct{})
	app := s.NewApp()
	functions.Register(app, "gate", func(ctx context.Context, _ struct{}) (string, error) {
		entered <- functions.RunFrom(ctx).ID
		<-release
		return "through", nil
	})
	s.Sync(t, s.ServeApp(t, app))
	c := s.Client(t, s.Token)

	results := make(chan protocol.RunResult, 2)
	var wg sync.WaitGroup
	start := func() {
		wg.Go(func() {
			resp, err := c.StartRunWithBodyWithResponse(context.Background(), "gate", &protocol.StartRunParams{Wait: ptr("30s")}, "application/json", strings.NewReader(`{}`))
			if err == nil && resp.JSON200 != nil {
				results <- *resp.JSON200
			}
		})
	}
	start()
	first := <-entered // invoked by this gateway at once: the tenant's one slot
	start()
	second := <-entered // past the bound: queued, and invoked by a River worker
	close(release)
	wg.Wait()
	close(results)
	for res := range results {
		require.Equal(t, protocol.RunStatusCompleted, res.Status, "the request waited for its result either way")
	}
	jobs := func(run string) (n int) {
		require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT count(*) FROM river_job WHERE args->>'run_id' = $1`, run).Scan(&n))
		return n
	}
	require.Zero(t, jobs(first), "the first run went straight to the function")
	require.Equal(t, 1, jobs(second), "the second run was queued")
	// A third, with the slot free again, goes straight through.
	third := mustComplete(t, c, "gate", `{}`)
	<-entered
	require.Zero(t, jobs(third.ID))
}

// TestStreamLimits: a tenant and a subject hold a bounded number of live streams on a
// gateway, a stream ends when the token that opened it expires.
func TestStreamLimits(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Gateway: func(c *gateway.Config) {
		c.MaxStreamsPerTenant, c.MaxStreamsPerSubject = 3, 2
	}})
	token := func(sub, tenant string) string {
		return s.NewToken(t, auth.Identity{Subject: sub, Tenant: tenant, Roles: []string{"viewer"}})
	}
	openStatus := func(tok string) (int, string, func()) {
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, "GET", s.URL+"/v1/runs/stream", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		if resp.StatusCode != http.StatusOK {
			var p protocol.Problem
			_ = json.NewDecoder(resp.Body).Decode(&p)
			resp.Body.Close()
			cancel()
			return resp.StatusCode, p.Detail, func() {}
		}
		return resp.StatusCode, "", func() { cancel(); resp.Body.Close() }
	}

	ada, bob := token("ada", "acme"), token("bob", "acme")
	_, _, close1 := openStatus(ada)
	_, _, close2 := openStatus(ada)
	status, detail, _ := openStatus(ada)
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Contains(t, detail, "ada has 2 live streams open on this gateway, the limit per subject")
	status, _, close3 := openStatus(bob)
	require.Equal(t, http.StatusOK, status, "another subject of the tenant")
	status, detail, _ = openStatus(token("cy", "acme"))
	require.Equal(t, http.StatusTooManyRequests, status)
	require.Contains(t, detail, `tenant "acme" has 3 live streams open on this gateway, its limit`)
	status, _, close4 := openStatus(token("cy", "globex"))
	require.Equal(t, http.StatusOK, status, "another tenant's streams are its own")
	defer close4()
	defer close3()
	defer close2()

	close1()
	waitUntil(t, 10*time.Second, func() bool {
		status, _, closeIt := openStatus(ada)
		closeIt()
		return status == http.StatusOK
	}, "a closed stream frees its place")

	t.Run("EndsWhenTheTokenExpires", func(t *testing.T) {
		short, err := s.Auth.NewToken(auth.Identity{Subject: "dee", Tenant: "expiring", Roles: []string{"viewer"}}, 1500*time.Millisecond)
		require.NoError(t, err)
		st := openStream(t, s, short, "", false)
		for {
			ev, ok := <-st.events
			require.True(t, ok, "the stream ended without saying why")
			if ev.name == "expired" {
				break
			}
		}
		_, ok := <-st.events
		require.False(t, ok, "and then it ends")
	})
}
