package functions_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
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

// TestPackageDocCodeIsTested keeps the Go code of the package docs (package functions'
// tutorial and package step's) compiled and run: each code block of a package doc that
// parses as Go must be, line for line (indentation aside), in a _test.go file of that
// package, where it compiles and runs as an Example or a test.
func TestPackageDocCodeIsTested(t *testing.T) {
	for _, dir := range []string{".", "step"} {
		doc, tests := packageDocAndTests(t, dir)
		n := 0
		for _, block := range docCodeBlocks(doc) {
			if !parsesAsGo(block) {
				continue
			}
			n++
			if !containsLines(tests, trimmedLines(block)) {
				t.Errorf("%s: the package doc's code block\n%s\nis in none of the package's _test.go files: put it in an Example or a test, as is", dir, block)
			}
		}
		t.Logf("%s: %d Go blocks in the package doc", dir, n)
	}
}

// packageDocAndTests returns the package doc of the package in dir and the trimmed
// lines of each of its _test.go files.
func packageDocAndTests(t *testing.T, dir string) (string, [][]string) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	var tests [][]string
	for _, name := range files {
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(name, "_test.go") {
			tests = append(tests, trimmedLines(string(src)))
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ParseComments|parser.PackageClauseOnly)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc != nil {
			doc += f.Doc.Text()
		}
	}
	if doc == "" {
		t.Fatalf("%s: no package doc", dir)
	}
	return doc, tests
}

// docCodeBlocks returns the code blocks of a doc comment's text: its runs of indented
// lines (blank lines inside a run included).
func docCodeBlocks(doc string) []string {
	var blocks []string
	var cur []string
	flush := func() {
		for len(cur) > 0 && strings.TrimSpace(cur[len(cur)-1]) == "" {
			cur = cur[:len(cur)-1]
		}
		if len(cur) > 0 {
			blocks = append(blocks, strings.Join(cur, "\n"))
		}
		cur = nil
	}
	for line := range strings.SplitSeq(doc, "\n") {
		switch {
		case strings.HasPrefix(line, "\t") || strings.HasPrefix(line, " "):
			cur = append(cur, line)
		case line == "" && len(cur) > 0:
			cur = append(cur, line)
		default:
			flush()
		}
	}
	flush()
	return blocks
}

// parsesAsGo reports whether block is Go: declarations, or statements.
func parsesAsGo(block string) bool {
	if _, err := parser.ParseFile(token.NewFileSet(), "", "package p\n"+block, 0); err == nil {
		return true
	}
	_, err := parser.ParseFile(token.NewFileSet(), "", "package p\nfunc _() {\n"+block+"\n}", 0)
	return err == nil
}

func trimmedLines(s string) []string {
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out
}

// containsLines reports whether one of files holds want as consecutive lines.
func containsLines(files [][]string, want []string) bool {
	for _, lines := range files {
		for i := range lines {
			if i+len(want) <= len(lines) && slices.Equal(lines[i:i+len(want)], want) {
				return true
			}
		}
	}
	return false
}
