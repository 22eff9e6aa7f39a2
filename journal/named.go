package journal

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// namedArgs is pgx.NamedArgs (@name placeholders, the same statement and arguments)
// whose rewrite of a statement is worked out once per statement text: pgx.NamedArgs
// lexes the whole text at every call, which cost 6% of the gateway's CPU on a no-step
// run (its statements are long). A statement that names an argument the map lacks is
// rewritten by pgx.NamedArgs at every call, as before.
type namedArgs map[string]any

// RewriteQuery implements pgx.QueryRewriter.
func (na namedArgs) RewriteQuery(ctx context.Context, conn *pgx.Conn, sql string, args []any) (string, []any, error) {
	if r, ok := rewrites.Load(sql); ok {
		return r.(*rewrite).fill(na)
	}
	// Each name's marker takes its place, so the rewritten arguments tell the order.
	markers := make(pgx.NamedArgs, len(na))
	for name := range na {
		markers[name] = marker(name)
	}
	newSQL, ordered, err := markers.RewriteQuery(ctx, conn, sql, args)
	if err != nil {
		return "", nil, err
	}
	names := make([]string, len(ordered))
	for i, m := range ordered {
		name, ok := m.(marker)
		if !ok {
			// A name the map lacks (pgx passes NULL for it): no rewrite to keep.
			return pgx.NamedArgs(na).RewriteQuery(ctx, conn, sql, args)
		}
		names[i] = string(name)
	}
	r := &rewrite{sql: newSQL, names: names}
	if rewritten.Add(1) <= maxRewrites {
		rewrites.Store(sql, r)
	}
	return r.fill(na)
}

// marker stands for a named argument while a statement is first rewritten.
type marker string

// rewrite is a statement with $n placeholders and the name of the argument each takes.
type rewrite struct {
	sql   string
	names []string
}

// fill returns the statement and na's values in its placeholders' order.
func (r *rewrite) fill(na namedArgs) (string, []any, error) {
	out := make([]any, len(r.names))
	for i, name := range r.names {
		out[i] = na[name]
	}
	return r.sql, out, nil
}

// rewrites holds the rewrites of up to maxRewrites statement texts (this package's
// statements are constants: a few dozen).
var (
	rewrites  sync.Map // statement text -> *rewrite
	rewritten atomic.Int64
)

const maxRewrites = 1000
