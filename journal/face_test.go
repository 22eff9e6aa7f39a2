package journal_test

import (
	"go/ast"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/tooling/gosrc"
)

// maxExportedNames bounds the names package journal exports at top level (functions,
// types, constants and variables; methods aside). The goal is fewer than 180: a group of
// one job (its statements, its types) goes to a package of its own beside the journal
// (journal/operation, journal/schedule and the like: docs/development.md), and a name
// nothing outside the journal uses is unexported. The bound only falls: lower it to the
// count whenever the count falls, and raising it is a change of this line, reviewed as
// such.
const maxExportedNames = 179

// TestJournalFaceStaysSmall counts the names the journal's files (tests aside) export
// at top level and fails one above maxExportedNames.
func TestJournalFaceStaysSmall(t *testing.T) {
	t.Parallel()
	_, files := gosrc.Files(t, ".")
	var names []string
	for _, f := range files {
		for _, d := range f.AST.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					names = append(names, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, n.Name)
							}
						}
					}
				}
			}
		}
	}
	slices.Sort(names)
	require.Greater(t, len(names), 50, "the package's files were read")
	require.LessOrEqual(t, len(names), maxExportedNames,
		"package journal exports %d names, over %d: put a group of one job in a package of its own beside the journal, or unexport what only the journal uses\n%v",
		len(names), maxExportedNames, names)
}
