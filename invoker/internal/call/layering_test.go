package call_test

import (
	"go/ast"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/tooling/gosrc"
)

const module = "github.com/stepgate/stepgate/"

// TestCallOnlyCalls keeps package call to its one job, sending an invocation: it uses
// nothing of the journal but its ErrorInfo type, so that it writes nothing of a run (what
// an answer does to the run is the invoker's). What it may import — not the gateway, the
// SDK, River or the database driver — is the layering table's (internal/tooling/layering).
func TestCallOnlyCalls(t *testing.T) {
	t.Parallel()
	fset, files := gosrc.Files(t, ".")
	checked := 0
	for _, file := range files {
		f := file.AST
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
