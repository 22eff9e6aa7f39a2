package gateway_test

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

// runWrites are the journal functions that change a run's status, start runs or write
// what starts them, or mark runs and tenants for notifications (result waiters and live
// streams: the invoker and package notify). Only the invoker, the run service, calls them: it owns each
// transition's transaction, River jobs and local wake-ups, which a caller in the gateway
// could forget.
var runWrites = []string{
	"CreateRun", "ClaimRun", "AppendEntry", "Finish", "CancelRun", "SendEvent",
	"RenewLeases", "ReapExpiredLeases", "ReleaseLeases", "StrandedRuns",
	"PutSchedule", "DeleteSchedule", "AdvanceSchedule", "ClaimTick", "TryClaimTick",
	"RegisterFunction", "DeleteFunction", "Attach", "Watch", "Unwatch", "CreateCallback", "ResolveCallback",
	"CancelDescendants", "CreateOperation", "CancelBatch", "FinishOperation", "CountMatching", "CopyEntries",
}

// TestGatewayOnlyMapsHTTP keeps the gateway a mapping of HTTP onto the invoker's
// methods: it imports no River package and calls none of the journal's run writes.
func TestGatewayOnlyMapsHTTP(t *testing.T) {
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
			require.False(t, strings.Contains(path, "riverqueue"), "%s imports %s: River belongs to the invoker", name, path)
			if path == "github.com/stepgate/stepgate/journal" {
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
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == journalName {
				for _, w := range runWrites {
					require.NotEqual(t, w, sel.Sel.Name, "%s calls journal.%s: go through the invoker (the run service)", fset.Position(sel.Pos()), w)
				}
			}
			return true
		})
	}
	require.Greater(t, checked, 10, "the gateway's files were read")
}
