package gateway_test

import (
	"go/ast"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/tooling/gosrc"
)

// runWrites are the journal functions that change a run's status, start runs or write
// what starts them, or mark runs and tenants for notifications (result waiters and live
// streams: the invoker and package notify), by the package under journal/ that declares
// them ("" for the journal itself). Only the invoker, the run service, calls them: it owns
// each transition's transaction, River jobs and local wake-ups, which a caller in the
// gateway could forget.
var runWrites = map[string][]string{
	"": {"CreateRun", "ClaimRun", "AppendEntry", "Finish", "CancelRun", "SendEvent",
		"RenewLeases", "ReapExpiredLeases", "ReleaseLeases", "StrandedRuns",
		"RegisterFunction", "DeleteFunction", "Attach", "CreateCallback", "ResolveCallback", "CopyEntries"},
	"runevents":  {"Watch", "Unwatch"},
	"canceltree": {"CancelDescendants"},
	"schedule":   {"PutSchedule", "DeleteSchedule", "AdvanceSchedule", "ClaimTick", "TryClaimTick"},
	"operation": {"CreateOperation", "CancelBatch", "FinishOperation", "CountMatching",
		"LockOperation", "CancelOperation", "RerunBatch", "RecordRerunBatch"},
}

// TestGatewayOnlyMapsHTTP keeps the gateway a mapping of HTTP onto the invoker's
// methods: it calls none of the journal's run writes (that it imports no River package
// is the layering table's, internal/tooling/layering).
func TestGatewayOnlyMapsHTTP(t *testing.T) {
	t.Parallel()
	fset, files := gosrc.Files(t, ".")
	checked := 0
	for _, file := range files {
		f := file.AST
		checked++
		writes := map[string][]string{} // the local name of a journal package -> its run writes
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			sub, ok := strings.CutPrefix(path, module+"journal")
			if !ok || sub != "" && !strings.HasPrefix(sub, "/") {
				continue
			}
			sub = strings.TrimPrefix(sub, "/")
			name := "journal"
			if sub != "" {
				name = sub[strings.LastIndex(sub, "/")+1:]
			}
			if imp.Name != nil {
				name = imp.Name.Name
			}
			writes[name] = runWrites[sub]
		}
		if len(writes) == 0 {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok {
				for _, w := range writes[x.Name] {
					require.NotEqual(t, w, sel.Sel.Name, "%s calls %s.%s: go through the invoker (the run service)", fset.Position(sel.Pos()), x.Name, w)
				}
			}
			return true
		})
	}
	require.Greater(t, checked, 10, "the gateway's files were read")
}

// TestGatewayOwnsItsConverters keeps the shaping of what the API's readers see (a run,
// its journal, errors, failures, what it awaits) in the gateway (gateway/convert.go), and
// the function protocol's converters in the invoker: the gateway calls no converter of
// the invoker (a function of package invoker whose name ends in ToAPI, FromAPI or
// ForReaders).
func TestGatewayOwnsItsConverters(t *testing.T) {
	t.Parallel()
	fset, files := gosrc.Files(t, ".")
	checked := 0
	for _, file := range files {
		f := file.AST
		checked++
		invokerName := ""
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path == module+"invoker" {
				invokerName = "invoker"
				if imp.Name != nil {
					invokerName = imp.Name.Name
				}
			}
		}
		if invokerName == "" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == invokerName {
				for _, suffix := range []string{"ToAPI", "FromAPI", "ForReaders"} {
					require.False(t, strings.HasSuffix(sel.Sel.Name, suffix),
						"%s uses invoker.%s: what the API's readers see is shaped in gateway/convert.go, and the function protocol's converters are the invoker's own", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
	require.Greater(t, checked, 10, "the gateway's files were read")
}

// module is the module's path: the prefix of every package of stepgate.
const module = "github.com/stepgate/stepgate/"

// TestGatewayHasNoKindSwitch keeps the kinds of checkpoints and awaits in the invoker's
// registries (invoker/checkpoint.go, invoker/answer.go): no switch case of the gateway
// names an entry kind or an await type, of the protocol or of the journal, so that a new
// kind touches no file of the gateway.
func TestGatewayHasNoKindSwitch(t *testing.T) {
	t.Parallel()
	fset, files := gosrc.Files(t, ".")
	kindConst := func(sel *ast.SelectorExpr) bool {
		x, ok := sel.X.(*ast.Ident)
		if !ok {
			return false
		}
		n := sel.Sel.Name
		switch x.Name {
		case "protocol":
			return strings.HasPrefix(n, "EntryKind") || strings.HasPrefix(n, "AwaitType") || strings.HasPrefix(n, "AwaitingKind")
		case "journal":
			return strings.HasPrefix(n, "Kind") || strings.HasPrefix(n, "Await")
		}
		return false
	}
	for _, f := range files {
		ast.Inspect(f.AST, func(n ast.Node) bool {
			cc, ok := n.(*ast.CaseClause)
			if !ok {
				return true
			}
			for _, e := range cc.List {
				ast.Inspect(e, func(n ast.Node) bool {
					if sel, ok := n.(*ast.SelectorExpr); ok && kindConst(sel) {
						t.Errorf("%s: a case names %s.%s: register the kind in the invoker instead", fset.Position(sel.Pos()), sel.X, sel.Sel.Name)
					}
					return true
				})
			}
			return true
		})
	}
}
