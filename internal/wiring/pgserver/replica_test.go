package pgserver_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgserver"
)

// TestStandbyFailover makes a synchronous standby of a primary, kills the primary with
// SIGKILL, promotes the standby, and checks that every committed row is on it and that a
// multi-host URL with target_session_attrs=read-write finds it.
func TestStandbyFailover(t *testing.T) {
	t.Parallel()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	pport, sport := freePort(t), freePort(t)
	primary, err := pgserver.Start(t.Context(), pgserver.Config{Dir: tempDir(t), Port: pport, Logger: log,
		Settings: []string{"synchronous_standby_names=standby1"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Kill() })
	standby, err := pgserver.StartStandby(t.Context(), primary, "standby1", pgserver.Config{Dir: tempDir(t), Port: sport, Logger: log})
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Stop() })
	require.Error(t, func() error {
		_, err := pgserver.StartStandby(t.Context(), primary, "again", pgserver.Config{Dir: standby.Dir()})
		return err
	}(), "a standby is made in a new directory only")

	both := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write", pport, sport)
	w := connect(t, both)
	var port int
	require.NoError(t, w.QueryRow(t.Context(), "SELECT current_setting('port')::int").Scan(&port))
	require.Equal(t, pport, port, "the primary takes writes")
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var state string
		err := w.QueryRow(t.Context(), "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby1' AND state = 'streaming'").Scan(&state)
		assert.NoError(ct, err)
		assert.Equal(ct, "sync", state)
	}, 30*time.Second, 10*time.Millisecond, "the standby streams, synchronously")
	_, err = w.Exec(t.Context(), "CREATE TABLE kept (v int)")
	require.NoError(t, err)
	for i := range 100 {
		_, err = w.Exec(t.Context(), "INSERT INTO kept VALUES ($1)", i) // each acknowledged once the standby has it
		require.NoError(t, err)
	}
	r := connect(t, standby.URL("postgres"))
	var inRecovery bool
	require.NoError(t, r.QueryRow(t.Context(), "SELECT pg_is_in_recovery()").Scan(&inRecovery))
	require.True(t, inRecovery, "a standby")

	require.NoError(t, primary.Kill())
	require.NoError(t, standby.Promote(t.Context()))
	require.NoError(t, connect(t, standby.URL("postgres")).QueryRow(t.Context(), "SELECT pg_is_in_recovery()").Scan(&inRecovery))
	require.False(t, inRecovery, "promoted")
	var n int
	require.NoError(t, connect(t, standby.URL("postgres")).QueryRow(t.Context(), "SELECT count(*) FROM kept").Scan(&n))
	require.Equal(t, 100, n, "every acknowledged row is on the promoted standby")

	var after *pgx.Conn
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		c, err := pgx.Connect(t.Context(), both)
		if assert.NoError(ct, err) {
			after = c
		}
	}, 30*time.Second, 10*time.Millisecond)
	defer after.Close(t.Context())
	require.NoError(t, after.QueryRow(t.Context(), "SELECT current_setting('port')::int").Scan(&port))
	require.Equal(t, sport, port, "the multi-host URL finds the new primary")
	_, err = after.Exec(t.Context(), "INSERT INTO kept VALUES (100)")
	require.NoError(t, err)
}
