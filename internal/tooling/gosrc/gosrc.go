// Package gosrc reads a package's own Go source, parsed, for the tests that check its
// shape (what it calls, what it exports, how it calls the database): the files of a
// directory without its tests.
package gosrc

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// File is one parsed source file.
type File struct {
	Name string // as globbed: dir/name.go
	AST  *ast.File
}

// Files parses the .go files of dir that are not tests (no comments kept), in name
// order, with the FileSet that positions them. It fails tb when one does not parse, or
// when dir has none: a check that read nothing would pass whatever the code.
func Files(tb testing.TB, dir string) (*token.FileSet, []File) {
	tb.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(tb, err)
	fset := token.NewFileSet()
	var files []File
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(tb, err)
		files = append(files, File{Name: name, AST: f})
	}
	require.NotEmpty(tb, files, "%s has Go files that are not tests", dir)
	return fset, files
}
