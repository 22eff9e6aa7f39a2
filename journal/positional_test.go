package journal_test

import (
	"go/ast"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/tooling/gosrc"
)

// maxPositionalQueries bounds the statements the journal passes by their text with
// positional arguments (db.QueryRow(ctx, dbsqlc.X, a, b), batch.Queue(dbsqlc.X, ...)),
// matched to $n by hand. There are none: every statement is called typed, by sqlc's
// method (dbsqlc.New(db).X(ctx, dbsqlc.XParams{...})) or, in a batch, or where its rows
// are read by hand (columns sqlc cannot type, a page read a row at a time), with its
// typed parameters (dbsqlc.X, dbsqlc.XParams{...}.Args()..., internal/argsgen, which
// also writes XParams for a statement of one parameter or none). A new statement is
// called typed too.
const maxPositionalQueries = 0

// TestQueriesAreCalledTyped counts, in the files of the journal and of the packages beside
// it, the arguments that are a statement's text (a dbsqlc constant) and fails above
// maxPositionalQueries, listing them.
func TestQueriesAreCalledTyped(t *testing.T) {
	t.Parallel()
	texts := map[string]bool{} // the statements' constants, one per query file's statement
	_, generated := gosrc.Files(t, "internal/dbsqlc")
	for _, f := range generated {
		if !strings.HasSuffix(f.Name, ".sql.go") {
			continue
		}
		for _, d := range f.AST.Decls {
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

	// The journal's files, and those of the packages beside it (all but internal/).
	type source struct {
		fset *token.FileSet
		file gosrc.File
	}
	var sources []source
	dirs, err := filepath.Glob("*/*.go")
	require.NoError(t, err)
	seen := map[string]bool{"internal": true}
	for _, dir := range append([]string{"."}, dirs...) {
		if dir != "." {
			dir = filepath.Dir(dir)
		}
		if seen[dir] {
			continue
		}
		seen[dir] = true
		fset, files := gosrc.Files(t, dir)
		for _, f := range files {
			sources = append(sources, source{fset, f})
		}
	}
	var positional []string
	for _, src := range sources {
		fset := src.fset
		ast.Inspect(src.file.AST, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			for i, arg := range call.Args {
				sel, ok := arg.(*ast.SelectorExpr)
				if !ok {
					continue
				}
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == "dbsqlc" && texts[sel.Sel.Name] && !typedArgs(call, i, sel.Sel.Name) {
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

// typedArgs reports whether the statement text at call.Args[i] is followed by its
// parameters as a typed struct, and nothing else: dbsqlc.XParams{...}.Args()... (the
// generated Args, for a statement queued in a batch or whose rows are read by hand).
func typedArgs(call *ast.CallExpr, i int, statement string) bool {
	if !call.Ellipsis.IsValid() || len(call.Args) != i+2 {
		return false
	}
	args, ok := call.Args[i+1].(*ast.CallExpr)
	if !ok || len(args.Args) != 0 {
		return false
	}
	sel, ok := args.Fun.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "Args" {
		return false
	}
	lit, ok := sel.X.(*ast.CompositeLit)
	if !ok {
		return false
	}
	typ, ok := lit.Type.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := typ.X.(*ast.Ident)
	return ok && pkg.Name == "dbsqlc" && typ.Sel.Name == statement+"Params"
}
