package functions_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestOptionDocListsOptions keeps the doc comment of Option naming exactly the
// package's functions that return an Option.
func TestOptionDocListsOptions(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	var options []string
	var doc string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() && returnsOption(d.Type) {
					options = append(options, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok && ts.Name.Name == "Option" && d.Doc != nil {
						doc = d.Doc.Text()
					}
				}
			}
		}
	}
	if doc == "" {
		t.Fatal("no doc comment on type Option")
	}
	var named []string
	for _, m := range regexp.MustCompile(`\[(\w+)\]`).FindAllStringSubmatch(doc, -1) {
		named = append(named, m[1])
	}
	slices.Sort(named)
	slices.Sort(options)
	if !slices.Equal(named, options) {
		t.Errorf("Option's doc names the options\n  %v\nthe package has\n  %v", named, options)
	}
}

func returnsOption(ft *ast.FuncType) bool {
	if ft.Results == nil || len(ft.Results.List) != 1 {
		return false
	}
	id, ok := ft.Results.List[0].Type.(*ast.Ident)
	return ok && id.Name == "Option"
}
