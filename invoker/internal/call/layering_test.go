package call_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/stepgate/stepgate/"

// TestCallOnlyCalls keeps package call to its one job, sending an invocation: it
// depends on neither the gateway nor the SDK (functions/...), imports no River or
// database driver, and uses nothing of the journal but its ErrorInfo type, so that it
// writes nothing of a run (what an answer does to the run is the invoker's).
func TestCallOnlyCalls(t *testing.T) {
	t.Parallel()
	list := exec.Command("go", "list", "-f", `{{join .Deps "\n"}}`, ".")
	out, err := list.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		t.Fatalf("go list: %v\n%s", err, ee.Stderr)
	}
	require.NoError(t, err)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, module+"journal", "go list listed the package's dependencies")
	for _, dep := range deps {
		pkg, ours := strings.CutPrefix(dep, module)
		if !ours {
			continue
		}
		require.False(t, pkg == "gateway" || strings.HasPrefix(pkg, "gateway/"), "package call depends on %s: the gateway calls the invoker, not the other way", dep)
		require.False(t, pkg == "functions" || strings.HasPrefix(pkg, "functions/"), "package call depends on %s: the server must not import the SDK", dep)
	}

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
			require.False(t, strings.Contains(path, "riverqueue") || strings.Contains(path, "jackc/"),
				"%s imports %s: River and the database are the invoker's", name, path)
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
