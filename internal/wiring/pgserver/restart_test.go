package pgserver_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgserver"
)

func TestRestart(t *testing.T) {
	t.Parallel()

	for _, mode := range []pgserver.ShutdownMode{pgserver.Fast, pgserver.Immediate} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			port := freePort(t)
			s := start(t, tempDir(t), port)
			tcpURL := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
			_, err := connect(t, tcpURL).Exec(t.Context(), "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)")
			require.NoError(t, err)
			pid := s.PID()

			began := time.Now()
			require.NoError(t, s.Restart(t.Context(), mode, 200*time.Millisecond))
			require.GreaterOrEqual(t, time.Since(began), 200*time.Millisecond, "the server stays down as long as asked")
			require.NotEqual(t, pid, s.PID(), "a new postmaster")
			require.False(t, running(pid))

			// The same URLs work, on the socket and on the port, and committed data
			// survived (after crash recovery, for an immediate shutdown).
			requireKept(t, s)
			connect(t, tcpURL)

			require.NoError(t, s.Stop(), "Stop stops the restarted server")
			require.Error(t, s.Restart(t.Context(), mode, 0), "a stopped server is not restarted")
		})
	}
}
