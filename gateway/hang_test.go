package gateway_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/internal/wiring/stack"
)

// TestDatabaseHang: a statement the database does not answer (a lock held by another
// session stands in for a database that hangs: nothing errors, the statement waits)
// ends at the gateway's DatabaseTimeout (STEPGATE_DATABASE_TIMEOUT), and the API answers
// 503 with Retry-After while the lock is still held, instead of waiting for it; once
// the database answers again, so does the API.
func TestDatabaseHang(t *testing.T) {
	t.Parallel()
	url := pgtest.DBURL(t)
	s := stack.Start(t, stack.Options{DatabaseURL: url, DatabaseTimeout: time.Second})
	get := func() *http.Response {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, s.URL+"/v1/runs?limit=1", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+s.Token)
		// Far past the bound: without it the request waits for the lock, which is
		// released only after it answered.
		resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	require.Equal(t, http.StatusOK, get().StatusCode)

	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(t.Context()) })
	tx, err := conn.Begin(t.Context())
	require.NoError(t, err)
	_, err = tx.Exec(t.Context(), `LOCK TABLE stepgate.run IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)
	began := time.Now()
	resp := get()
	t.Logf("answered in %s", time.Since(began))
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.NoError(t, tx.Rollback(t.Context()))

	require.Equal(t, http.StatusOK, get().StatusCode, "the database answers again")
}
