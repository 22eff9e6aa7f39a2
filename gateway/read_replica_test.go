package gateway_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/internal/wiring/pgserver"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/migrations"
	"github.com/stepgate/stepgate/protocol"
)

// TestReadsFromReplica runs two gateways on a primary with a streaming standby as their
// STEPGATE_DATABASE_READ_URL, one with a bound of a minute and one of 100ms, and
// pauses the standby's replay: the first's runs list, served by the standby, misses a
// run started since (while its detail, a not-found on the standby, is asked of the
// primary), and shows another tenant nothing; the second's falls back to the primary
// once the standby is behind its bound and shows the run; a start with ?wait, its
// checkpoints and a run's result send no read to the standby; and with the standby
// stopped the reads go on, on the primary.
func TestReadsFromReplica(t *testing.T) {
	t.Parallel()
	primary, url := replicatedPostgres(t)
	standby := startStandby(t, primary)
	read := standby.URL("stepgate")

	slow := stack.Start(t, stack.Options{DatabaseURL: url, ReadDatabaseURL: read, ReadMaxLag: time.Minute})
	fast := stack.Start(t, stack.Options{DatabaseURL: url, ReadDatabaseURL: read, ReadMaxLag: 100 * time.Millisecond})
	app := slow.NewApp()
	functions.Register(app, "replica.echo", func(_ context.Context, in string) (string, error) { return in, nil })
	slow.Sync(t, slow.ServeApp(t, app))
	c, cf := slow.Client(t, slow.Token), fast.Client(t, fast.Token)
	other := slow.Client(t, slow.NewToken(t, auth.Identity{Subject: "b", Tenant: "replica-other", Roles: []string{"admin"}}))

	first := mustComplete(t, c, "replica.echo", `"first"`)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Equal(ct, 1, slow.Reads.Within(), "the standby is within the bound")
		assert.Contains(ct, listedIDs(ct, c), first.ID, "the standby has replayed the first run")
	}, 30*time.Second, 10*time.Millisecond)

	standbyConn := connectTo(t, standby.URL("stepgate"))
	_, err := standbyConn.Exec(t.Context(), "SELECT pg_wal_replay_pause()")
	require.NoError(t, err)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var state string
		assert.NoError(ct, standbyConn.QueryRow(t.Context(), "SELECT pg_get_wal_replay_pause_state()").Scan(&state))
		assert.Equal(ct, "paused", state)
	}, 30*time.Second, 10*time.Millisecond)

	// Latest-state paths: the start with ?wait (and the checkpoints of its run), and
	// a run's result, send no read to the standby, whose replay is paused.
	served := slow.Reads.Served()
	second := mustComplete(t, c, "replica.echo", `"second"`)
	result, err := c.GetRunResultWithResponse(t.Context(), second.ID, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, result.StatusCode(), string(result.Body))
	require.JSONEq(t, `"second"`, string(*result.JSON200.Output))
	require.Equal(t, served, slow.Reads.Served(), "no read of a latest-state path went to the standby")

	// The list of the gateway with a minute's bound is the standby's: it misses the
	// run started after the pause.
	ids := listedIDs(t, c)
	require.Contains(t, ids, first.ID)
	require.NotContains(t, ids, second.ID, "the list is served by the paused standby")
	require.Greater(t, slow.Reads.Served(), served)
	// A run's detail that the standby has not is asked of the primary.
	require.Equal(t, protocol.RunStatusCompleted, getRun(t, c, second.ID).Status)
	// Another tenant sees nothing of the first on the standby either.
	require.Empty(t, listedIDs(t, other))
	detail, err := other.GetRunWithResponse(t.Context(), first.ID, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusNotFound, detail.StatusCode(), string(detail.Body))

	// The gateway with a 100ms bound skips the standby once it is behind it.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Contains(ct, listedIDs(ct, cf), second.ID)
	}, 30*time.Second, 10*time.Millisecond)
	require.Zero(t, fast.Reads.Within())
	require.NotContains(t, listedIDs(t, c), second.ID, "the other gateway still reads the standby, within its bound")

	// A standby that is down fails no read: they go to the primary, whether the
	// gateway has noticed yet (most likely not, so soon after the kill) or not.
	require.NoError(t, standby.Kill())
	ids = listedIDs(t, c)
	require.Contains(t, ids, second.ID, "read on the primary")
	require.Equal(t, protocol.RunStatusCompleted, getRun(t, c, first.ID).Status)
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		assert.Zero(ct, slow.Reads.Within())
	}, 30*time.Second, 10*time.Millisecond)
}

// listedIDs returns the ids of the runs c lists.
func listedIDs(t require.TestingT, c *protocol.ClientWithResponses) []string {
	resp, err := c.ListRunsWithResponse(context.Background(), nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	var ids []string
	for _, r := range resp.JSON200.Runs {
		ids = append(ids, r.ID)
	}
	return slices.Clip(ids)
}

// replicatedPostgres starts a Postgres server of the test's own and returns it with the
// URL of a migrated database on it, "stepgate".
func replicatedPostgres(t testing.TB) (*pgserver.Server, string) {
	t.Helper()
	srv, err := pgserver.Start(t.Context(), pgserver.Config{Dir: shortTempDir(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Stop() })
	_, err = connectTo(t, srv.URL("postgres")).Exec(t.Context(), "CREATE DATABASE stepgate")
	require.NoError(t, err)
	pool, err := pgxpool.New(t.Context(), srv.URL("stepgate"))
	require.NoError(t, err)
	defer pool.Close()
	require.NoError(t, migrations.Up(t.Context(), pool))
	return srv, srv.URL("stepgate")
}

// startStandby starts a streaming standby of primary.
func startStandby(t testing.TB, primary *pgserver.Server) *pgserver.Server {
	t.Helper()
	s, err := pgserver.StartStandby(t.Context(), primary, "reads", pgserver.Config{Dir: shortTempDir(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() })
	return s
}

// shortTempDir returns a new directory under /tmp, removed when the test ends: short,
// for a unix socket's path, and reachable by the postgres OS user when the tests run
// as root.
func shortTempDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "sg-read-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func connectTo(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// TestReadURLUnreachable: a gateway whose replica cannot be reached starts, and reads
// on the primary.
func TestReadURLUnreachable(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := l.Addr().String()
	require.NoError(t, l.Close())
	s := stack.Start(t, stack.Options{ReadDatabaseURL: "postgres://postgres@" + closed + "/stepgate?sslmode=disable"})
	app := s.NewApp()
	functions.Register(app, "unreachable.echo", func(_ context.Context, in string) (string, error) { return in, nil })
	s.Sync(t, s.ServeApp(t, app))
	c := s.Client(t, s.Token)
	run := mustComplete(t, c, "unreachable.echo", `"x"`)
	require.Contains(t, listedIDs(t, c), run.ID)
	require.Equal(t, protocol.RunStatusCompleted, getRun(t, c, run.ID).Status)
	require.Zero(t, s.Reads.Within())
}
