package journal_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgserver"
	"github.com/stepgate/stepgate/journal"
)

// TestReadOnlyHostIsUnavailable: a write on a host that is still a standby (a session
// opened before its promotion, as through a name that moved to it early) fails with
// read_only_sql_transaction, which is an outage to wait out, not a failed statement:
// the same session takes the write once the standby is promoted.
func TestReadOnlyHostIsUnavailable(t *testing.T) {
	t.Parallel()
	primary, err := pgserver.Start(t.Context(), pgserver.Config{Dir: serverDir(t), Port: loopbackPort(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop() })
	standby, err := pgserver.StartStandby(t.Context(), primary, "standby1", pgserver.Config{Dir: serverDir(t), Port: loopbackPort(t)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Stop() })

	conn, err := pgx.Connect(t.Context(), standby.URL("postgres"))
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(t.Context()))
	_, err = conn.Exec(t.Context(), "CREATE TABLE written (v int)")
	var pe *pgconn.PgError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, "25006", pe.Code, "read_only_sql_transaction")
	require.True(t, journal.IsUnavailable(err), "a write on a standby waits for a primary")

	require.NoError(t, primary.Kill())
	require.NoError(t, standby.Promote(t.Context()))
	_, err = conn.Exec(t.Context(), "CREATE TABLE written (v int)")
	require.NoError(t, err, "the same session writes once the standby is the primary")
	_, err = conn.Exec(t.Context(), "CREATE TABLE written (v int)")
	require.False(t, journal.IsUnavailable(err), "a statement that fails is not an outage: %v", err)
}

// serverDir returns a directory for a private Postgres that the postgres OS user can
// reach when the tests run as root.
func serverDir(t *testing.T) string {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711))
	return dir
}

func loopbackPort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
