package journal_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// maxPositionalQueries bounds the statements the journal passes by their text with
// positional arguments (db.QueryRow(ctx, dbsqlc.X, a, b), batch.Queue(dbsqlc.X, ...)),
// matched to $n by hand, instead of calling sqlc's typed method (dbsqlc.New(db).X(ctx,
// dbsqlc.XParams{...})). Most left are in mixed batches, whose statements sqlc's batch
// methods would send in batches of their own (a round trip each); the rest read columns
// sqlc types wrongly. The bound only falls (the test fails below it too, until it is
// lowered): a new statement is called typed.
const maxPositionalQueries = 46

// TestQueriesAreCalledTyped counts, in the journal's files, the arguments that are a
// statement's text (a dbsqlc constant) and fails above maxPositionalQueries, listing them.
func TestQueriesAreCalledTyped(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	texts := map[string]bool{} // the statements' constants
	generated, err := filepath.Glob("internal/dbsqlc/*.sql.go")
	require.NoError(t, err)
	for _, name := range generated {
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, s := range g.Specs {
					for _, n := range s.(*ast.ValueSpec).Names {
						texts[n.Name] = true
					}
				}
			}
		}
	}
	require.Greater(t, len(texts), 100, "the statements' constants were read")

	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var positional []string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			for _, arg := range call.Args {
				sel, ok := arg.(*ast.SelectorExpr)
				if !ok {
					continue
				}
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "dbsqlc" && texts[sel.Sel.Name] {
					positional = append(positional, fset.Position(sel.Pos()).String()+" "+sel.Sel.Name)
				}
			}
			return true
		})
	}
	slices.Sort(positional)
	require.LessOrEqual(t, len(positional), maxPositionalQueries,
		"%d statements are called by their text with positional arguments, over %d: call sqlc's typed method instead\n%s",
		len(positional), maxPositionalQueries, strings.Join(positional, "\n"))
	require.Equal(t, maxPositionalQueries, len(positional),
		"fewer positional statements than maxPositionalQueries: lower it to %d, so that the bound keeps the ground won", len(positional))
}
