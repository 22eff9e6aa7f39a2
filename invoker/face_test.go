package invoker_test

import (
	"go/ast"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/tooling/gosrc"
)

// maxInvokerMethods bounds the exported methods of *Invoker: the run service's own
// (starts, cancels, reruns, events, waits), its life, and one accessor per side
// (sides.go). A new capability goes to the side it belongs to, or makes a side; raising
// the bound is a change of this line, reviewed as such.
const maxInvokerMethods = 20

// TestInvokerFaceStaysSmall counts the exported methods of *Invoker declared in the
// package's files (tests' export files aside) and fails one above maxInvokerMethods.
func TestInvokerFaceStaysSmall(t *testing.T) {
	t.Parallel()
	_, files := gosrc.Files(t, ".")
	var methods []string
	for _, f := range files {
		for _, d := range f.AST.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || !fn.Name.IsExported() {
				continue
			}
			if star, ok := fn.Recv.List[0].Type.(*ast.StarExpr); ok {
				if id, ok := star.X.(*ast.Ident); ok && id.Name == "Invoker" {
					methods = append(methods, fn.Name.Name)
				}
			}
		}
	}
	slices.Sort(methods)
	require.Greater(t, len(methods), 5, "the package's files were read")
	require.LessOrEqual(t, len(methods), maxInvokerMethods,
		"*Invoker exports %d methods, over %d: %v; put the new one on the side it belongs to (sides.go)", len(methods), maxInvokerMethods, methods)
}
