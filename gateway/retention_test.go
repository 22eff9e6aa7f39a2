package gateway_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// TestRetention: the gateway's periodic job deletes finished runs past their retention in
// small batches while new runs go on; a deleted run reads as a 404 that says it was
// deleted, to its tenant only. With STEPGATE_BENCH_BULK=1 it deletes 100,000 runs and
// logs how long that took and how new runs fared meanwhile (docs/benchmarks-history.md,
// "Retention (issue 14)").
func TestRetention(t *testing.T) {
	t.Parallel()
	n := 3000
	if os.Getenv("STEPGATE_BENCH_BULK") != "" {
		n = 100_000
	}
	s := stack.Start(t, stack.Options{RetentionInterval: 200 * time.Millisecond})
	alice := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	bob := s.Client(t, s.NewToken(t, auth.Identity{Subject: "bob", Tenant: "t2", Roles: []string{"developer"}}))
	app := s.NewApp()
	functions.Register(app, "work", func(ctx context.Context, _ struct{}) (int, error) {
		return step.Run(ctx, "one", func(context.Context) (int, error) { return 1, nil })
	})
	synced, err := alice.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, synced.StatusCode(), string(synced.Body))
	recent := mustComplete(t, alice, "work", `{}`)

	// n runs that finished 40 days ago (STEPGATE_RETENTION defaults to 30 days), as the
	// tables' owner.
	owner, err := pgx.Connect(t.Context(), s.Pool.Config().ConnString())
	require.NoError(t, err)
	defer owner.Close(context.Background())
	var oldID string
	seeded := time.Now()
	require.NoError(t, owner.QueryRow(t.Context(), `
		WITH f AS (SELECT tenant, name, revision FROM stepgate.function WHERE tenant = 't1' AND name = 'work'),
		ins AS (
			INSERT INTO stepgate.run (id, tenant, function, revision, status, input, output, identity, created_at, started_at, finished_at)
			SELECT gen_random_uuid(), f.tenant, f.name, f.revision, 'completed', '{}', '1', '{"subject":"seed","tenant":"t1"}',
				now() - interval '41 days', now() - interval '41 days', now() - interval '40 days' + i * interval '1 millisecond'
			FROM f, generate_series(1, $1) i
			RETURNING id
		)
		SELECT min(id::text) FROM ins`, n).Scan(&oldID))
	t.Logf("seeded %d finished runs in %s", n, time.Since(seeded))

	// New runs complete while the old ones are deleted.
	start := time.Now()
	var during, completed int
	for remaining := n; remaining > 0; {
		mustComplete(t, alice, "work", `{}`)
		completed++
		require.NoError(t, owner.QueryRow(t.Context(), `SELECT count(*) FROM stepgate.run WHERE finished_at < now() - interval '39 days'`).Scan(&remaining))
		if remaining > 0 {
			during++
		}
		require.Less(t, time.Since(start), 5*time.Minute, "retention deleted nothing for 5 minutes: %d left", remaining)
	}
	t.Logf("deleted %d runs in about %s; %d new runs completed meanwhile (%d while old runs remained)", n, time.Since(start), completed, during)

	// The deleted run is a 404 that says why, to its tenant; another tenant learns nothing.
	resp, err := alice.GetRunWithResponse(t.Context(), oldID, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, resp.StatusCode())
	require.Contains(t, string(resp.Body), "was deleted at")
	require.Contains(t, string(resp.Body), "STEPGATE_RETENTION")
	resp, err = bob.GetRunWithResponse(t.Context(), oldID, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, resp.StatusCode())
	require.NotContains(t, string(resp.Body), "deleted")
	// A run within its retention stays.
	require.Equal(t, protocol.RunStatusCompleted, getRun(t, alice, recent.ID).Status)
}

// TestRetentionConfig: a function's retention is a duration from 1m to 10 years; anything
// else is a 400 naming the field, and a valid one is kept with the revision.
func TestRetentionConfig(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	token := s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}})
	for config, detail := range map[string]string{
		`{"retention":"30s"}`:     "config.retention",
		`{"retention":"100000h"}`: "(10 years)",
		`{"retention":"soon"}`:    "config.retention",
	} {
		code, body := rawRequest(t, "PUT", s.URL+"/v1/functions/cfg", token, "application/json",
			strings.NewReader(fmt.Sprintf(`{"url":"http://127.0.0.1:1/","config":%s}`, config)))
		require.Equal(t, http.StatusBadRequest, code, "%s: %v", config, body)
		require.Contains(t, fmt.Sprint(body["detail"]), detail)
	}
	code, body := rawRequest(t, "PUT", s.URL+"/v1/functions/cfg", token, "application/json",
		strings.NewReader(`{"url":"http://127.0.0.1:1/","config":{"retention":"72h"}}`))
	require.Equal(t, http.StatusOK, code, "%v", body)
	var ms int64
	require.NoError(t, s.Pool.QueryRow(t.Context(), `SELECT retention_ms FROM stepgate.function_revision WHERE tenant = 't1' AND name = 'cfg'`).Scan(&ms))
	require.Equal(t, (72 * time.Hour).Milliseconds(), ms)
}
