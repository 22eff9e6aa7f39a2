package gateway_test

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// TestSyncKeepsUnchangedRevisions: a sync of an app makes a new revision only of the
// functions whose URL or config changed, says which (changed), and each tenant's
// functions have their own revisions.
func TestSyncKeepsUnchangedRevisions(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	a := s.Client(t, s.Token)
	b := s.Client(t, s.NewToken(t, auth.Identity{Subject: "bob", Tenant: "tenant-b", Roles: []string{"admin"}}))

	// The app answers its manifest with a timeout of "slow" the test sets.
	var slowTimeout atomic.Pointer[string]
	slowTimeout.Store(new("10s"))
	appURL := s.ServeApp(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"protocol":1,"functions":[
			{"name":"fast","path":"fast","config":{"timeout":"5s","retries":{"max_attempts":3}}},
			{"name":"slow","path":"slow","config":{"timeout":%q}}]}`, *slowTimeout.Load())
	}))
	sync := func(c *protocol.ClientWithResponses) map[string]protocol.SyncedFunction {
		t.Helper()
		resp, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: appURL})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		out := map[string]protocol.SyncedFunction{}
		for _, f := range resp.JSON200.Functions {
			out[f.Name] = f
		}
		require.Len(t, out, 2)
		return out
	}
	revisions := func(tenant string) int {
		t.Helper()
		var n int
		require.NoError(t, s.Pool.QueryRow(t.Context(),
			`SELECT count(*) FROM stepgate.function_revision WHERE tenant = $1`, tenant).Scan(&n))
		return n
	}
	type want struct {
		revision int
		changed  bool
	}
	check := func(got map[string]protocol.SyncedFunction, fast, slow want) {
		t.Helper()
		require.Equal(t, fast, want{got["fast"].Revision, got["fast"].Changed}, "fast")
		require.Equal(t, slow, want{got["slow"].Revision, got["slow"].Changed}, "slow")
	}

	check(sync(a), want{1, true}, want{1, true})
	check(sync(a), want{1, false}, want{1, false})
	require.Equal(t, 2, revisions(auth.DefaultTenant), "an unchanged sync stores no revision")

	// The second tenant's functions of the same names are its own.
	check(sync(b), want{1, true}, want{1, true})
	check(sync(b), want{1, false}, want{1, false})

	// One function's config changes: only it gets a new revision.
	slowTimeout.Store(new("20s"))
	got := sync(a)
	check(got, want{1, false}, want{2, true})
	require.Equal(t, "20s", *got["slow"].Config.Timeout)
	require.Equal(t, 3, revisions(auth.DefaultTenant))
	current, err := a.GetFunctionWithResponse(t.Context(), "fast")
	require.NoError(t, err)
	require.Equal(t, 1, current.JSON200.Revision)
	check(sync(a), want{1, false}, want{2, false})

	// A function deleted and synced again gets a new revision.
	del, err := a.DeleteFunctionWithResponse(t.Context(), "fast")
	require.NoError(t, err)
	require.Equal(t, http.StatusNoContent, del.StatusCode())
	check(sync(a), want{2, true}, want{2, false})

	// The second tenant's are untouched by the first's changes.
	check(sync(b), want{1, false}, want{2, true})
}

// TestRegisterKeepsUnchangedRevision: registering a function with the URL and config of
// its current revision (PUT /v1/functions/{name}) stores no revision and answers the
// current one, as a sync does; a change of config or URL makes a new one, which a
// repeat keeps too; and each tenant's revisions are its own.
func TestRegisterKeepsUnchangedRevision(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	a := s.Client(t, s.Token)
	b := s.Client(t, s.NewToken(t, auth.Identity{Subject: "bob", Tenant: "tenant-b", Roles: []string{"admin"}}))
	register := func(c *protocol.ClientWithResponses, url, timeout string) protocol.Function {
		t.Helper()
		var cfg *protocol.FunctionConfig
		if timeout != "" {
			cfg = &protocol.FunctionConfig{Timeout: &timeout, Retries: &protocol.RetryPolicy{MaxAttempts: ptr(3)}}
		}
		resp, err := c.RegisterFunctionWithResponse(t.Context(), "f", protocol.FunctionRegistration{URL: url, Config: cfg})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		return *resp.JSON200
	}
	revisions := func(tenant string) int {
		t.Helper()
		var n int
		require.NoError(t, s.Pool.QueryRow(t.Context(),
			`SELECT count(*) FROM stepgate.function_revision WHERE tenant = $1 AND name = 'f'`, tenant).Scan(&n))
		return n
	}

	first := register(a, "http://127.0.0.1:1/f", "10s")
	require.Equal(t, 1, first.Revision)
	again := register(a, "http://127.0.0.1:1/f", "10s")
	require.Equal(t, first, again, "the same URL and config: the stored revision, as it was")
	require.Equal(t, 1, revisions(auth.DefaultTenant), "an unchanged registration stores no revision")

	require.Equal(t, 2, register(a, "http://127.0.0.1:1/f", "20s").Revision, "another config")
	require.Equal(t, 2, register(a, "http://127.0.0.1:1/f", "20s").Revision)
	require.Equal(t, 3, register(a, "http://127.0.0.1:1/f", "").Revision, "no config is a change too")
	require.Equal(t, 3, register(a, "http://127.0.0.1:1/f", "").Revision)
	require.Equal(t, 4, register(a, "http://127.0.0.1:1/g", "").Revision, "another URL")
	require.Equal(t, 4, revisions(auth.DefaultTenant))

	// The other tenant's function of that name is its own, from revision 1.
	require.Equal(t, 1, register(b, "http://127.0.0.1:1/g", "").Revision)
	require.Equal(t, 1, register(b, "http://127.0.0.1:1/g", "").Revision)
	require.Equal(t, 1, revisions("tenant-b"))
}
