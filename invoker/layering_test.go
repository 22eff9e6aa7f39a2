package invoker_test

import (
	"go/ast"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/tooling/gosrc"
)

// maintenanceDir is the package of the invoker's maintenance services.
const maintenanceDir = "internal/maintenance"

// TestMaintenanceOneServicePerFile keeps each maintenance service a type of its own in
// a file of its own: a file of package maintenance declares at most one type besides
// River job args (a type with a Kind method), and a service type (one with a Pass, Run
// or Work method) is the only type of its file.
func TestMaintenanceOneServicePerFile(t *testing.T) {
	t.Parallel()
	_, files := gosrc.Files(t, maintenanceDir)
	types := map[string][]string{}   // file -> its types, job args aside
	methods := map[string][]string{} // type -> its methods
	for _, file := range files {
		name, f := file.Name, file.AST
		types[name] = nil
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok {
						types[name] = append(types[name], ts.Name.Name)
					}
				}
			case *ast.FuncDecl:
				if d.Recv != nil {
					recv := d.Recv.List[0].Type
					if star, ok := recv.(*ast.StarExpr); ok {
						recv = star.X
					}
					if id, ok := recv.(*ast.Ident); ok {
						methods[id.Name] = append(methods[id.Name], d.Name.Name)
					}
				}
			}
		}
	}
	has := func(typ string, names ...string) bool {
		for _, m := range methods[typ] {
			for _, n := range names {
				if m == n {
					return true
				}
			}
		}
		return false
	}
	services := 0
	for file, ts := range types {
		var kept []string
		for _, typ := range ts {
			if !has(typ, "Kind") {
				kept = append(kept, typ)
			}
		}
		require.LessOrEqual(t, len(kept), 1, "%s declares %v: one type per file (River job args aside)", file, kept)
		for _, typ := range kept {
			if has(typ, "Pass", "Run", "Work") {
				services++
			}
		}
	}
	require.GreaterOrEqual(t, services, 9, "the services were found: %v", types)
}
