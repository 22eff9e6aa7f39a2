package journal_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/pgtest"
	"github.com/stepgate/stepgate/journal"
)

// TestNamedArgs checks that the cached rewrite of a statement gives what pgx.NamedArgs
// gives, on the first call and on later ones with other values, and that Postgres runs it.
func TestNamedArgs(t *testing.T) {
	t.Parallel()
	for _, sql := range []string{
		`SELECT @a::int + @b::int, @a::int`,                                 // a name used twice
		`SELECT '@a' || @b::text, @b::text -- @a in a comment`,              // not in literals or comments
		`SELECT @missing::int IS NULL, @b::int /* the map lacks missing */`, // NULL for it, every time
		`SELECT 1 WHERE @a::int = 1`,
	} {
		for _, vals := range []map[string]any{{"a": 1, "b": 2}, {"a": 3, "b": 4}, {"a": 5, "b": 6}} {
			want, wantArgs, err := pgx.NamedArgs(vals).RewriteQuery(t.Context(), nil, sql, nil)
			require.NoError(t, err)
			got, gotArgs, err := journal.NamedArgs(vals).RewriteQuery(t.Context(), nil, sql, nil)
			require.NoError(t, err)
			require.Equal(t, want, got, sql)
			require.Equal(t, wantArgs, gotArgs, sql)
		}
	}

	db := pgtest.DB(t)
	var sum, a int
	for i := range 3 {
		require.NoError(t, db.QueryRow(t.Context(), `SELECT @a::int + @b::int, @a::int`, journal.NamedArgs{"a": i, "b": 10}).Scan(&sum, &a))
		require.Equal(t, i+10, sum)
		require.Equal(t, i, a)
	}
}

// BenchmarkNamedArgs measures rewriting a hot statement's named arguments, by
// pgx.NamedArgs and by the cached rewrite.
func BenchmarkNamedArgs(b *testing.B) {
	for _, s := range []struct{ name, sql string }{{"append", journal.AppendInOrderSQL}, {"finish", journal.FinishSQL}} {
		vals := map[string]any{}
		for _, n := range []string{"run_id", "invocation", "seq", "kind", "name", "output", "error", "attempt", "wake_at",
			"started_at", "size", "max_entries", "max_bytes", "window", "status", "timed", "until", "after_seconds",
			"awaiting", "notify", "await_seq"} {
			vals[n] = 1
		}
		b.Run(s.name+"/pgx", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := pgx.NamedArgs(vals).RewriteQuery(b.Context(), nil, s.sql, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(s.name+"/cached", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, _, err := journal.NamedArgs(vals).RewriteQuery(b.Context(), nil, s.sql, nil); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
