package journal_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
)

// TestErrorMessageShape pins what stepgate.error_message_shape (migration 0053) replaces
// with placeholders, the dead-letter view's grouping of messages.
func TestErrorMessageShape(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	for msg, want := range map[string]string{
		`order 42 not found`:               `order <num> not found`,
		`took 3.25s`:                       `took <num>s`,
		`user "ada@example.com" is locked`: `user <str> is locked`,
		`key 'a-1' missing`:                `key <str> missing`,
		`run 01a22f70-0000-7000-8000-000000000001 is gone`:      `run <uuid> is gone`,
		`RUN 01A22F70-0000-7000-8000-000000000001 IS GONE`:      `RUN <uuid> IS GONE`,
		`segfault at 0xDEADbeef`:                                `segfault at <hex>`,
		`commit 9f86d081884c7d65 not found`:                     `commit <hex> not found`,
		`a deadbeef word and an abcdefgh identifier stay words`: `a deadbeef word and an abcdefgh identifier stay words`,
		`http 503: "upstream 10.0.0.1 refused"`:                 `http <num>: <str>`,
		``:                                                      ``,
	} {
		var got string
		require.NoError(t, tx.QueryRow(t.Context(), `SELECT stepgate.error_message_shape($1)`, msg).Scan(&got))
		require.Equal(t, want, got, "shape of %q", msg)
	}
	var null string
	require.NoError(t, tx.QueryRow(t.Context(), `SELECT stepgate.error_message_shape(NULL)`).Scan(&null))
	require.Empty(t, null)
	var same bool
	require.NoError(t, tx.QueryRow(t.Context(), `SELECT stepgate.error_group('f', '{"type":"t","message":"order 1"}')
		= stepgate.error_group('f', '{"type":"t","message":"order 2"}')
		AND stepgate.error_group('f', '{"type":"t","message":"order 1"}') <> stepgate.error_group('g', '{"type":"t","message":"order 1"}')
		AND stepgate.error_group('f', '{"type":"t","message":"order 1"}') <> stepgate.error_group('f', '{"type":"u","message":"order 1"}')`).Scan(&same))
	require.True(t, same)
}
