package call_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/stepgate/stepgate/"

// TestCallOnlyCalls keeps package call to its one job, sending an invocation: it uses
// nothing of the journal but its ErrorInfo type, so that it writes nothing of a run (what
// an answer does to the run is the invoker's). What it may import — not the gateway, the
// SDK, River or the database driver — is the layering table's (internal/tooling/layering).
func TestCallOnlyCalls(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		checked++
		journalName := ""
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if path == module+"journal" {
				journalName = "journal"
				if imp.Name != nil {
					journalName = imp.Name.Name
				}
			}
		}
		if journalName == "" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if sel, ok := n.(*ast.SelectorExpr); ok {
				if x, ok := sel.X.(*ast.Ident); ok && x.Name == journalName {
					require.Equal(t, "ErrorInfo", sel.Sel.Name, "%s uses journal.%s: package call uses the journal's ErrorInfo only; the run's writes are the invoker's",
						fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
	require.GreaterOrEqual(t, checked, 2, "the package's files were read")
}
