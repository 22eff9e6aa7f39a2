package step

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

// seqTakers are the package's unexported functions that take seqs of the run: every
// exported function that calls one of them, directly or not, takes a seq.
var seqTakers = []string{"take", "patch"}

// TestPackageDocListsSeqTakers keeps the package doc's list of the calls that take a
// seq (its paragraph "Each call to ... takes the next seq") equal to the exported
// functions that do, found from the source's call graph; and the calls it says take
// none take none.
func TestPackageDocListsSeqTakers(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string][]string{} // function -> the package's functions it calls
	var exported []string
	var doc string
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		if f.Doc != nil {
			doc += f.Doc.Text()
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv != nil || fn.Body == nil {
				continue
			}
			if fn.Name.IsExported() {
				exported = append(exported, fn.Name.Name)
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if c, ok := n.(*ast.CallExpr); ok {
					if id := calledIdent(c.Fun); id != "" {
						calls[fn.Name.Name] = append(calls[fn.Name.Name], id)
					}
				}
				return true
			})
		}
	}

	var takes []string
	for _, name := range exported {
		if reaches(calls, name, map[string]bool{}) {
			takes = append(takes, name)
		}
	}
	slices.Sort(takes)

	var para string
	for p := range strings.SplitSeq(doc, "\n\n") {
		if strings.Contains(p, "takes the next seq") {
			para = p
		}
	}
	if para == "" {
		t.Fatal(`the package doc has no paragraph that says which calls take "the next seq"`)
	}
	// A sentence that says "take none." ends the list: what comes after is replay.
	para = strings.Join(strings.Fields(para), " ")
	listed, none := para, ""
	if end := strings.Index(para, " take none."); end >= 0 {
		start := strings.LastIndex(para[:end], ". ") + 1
		listed, none = para[:start], para[start:end]
	}
	named := docLinks(listed)
	if !slices.Equal(named, takes) {
		t.Errorf("the package doc says these calls take seqs:\n  %v\nthe code says these do:\n  %v", named, takes)
	}
	for _, n := range docLinks(none) {
		if slices.Contains(takes, n) {
			t.Errorf("the package doc says %s takes no seq, but it does", n)
		}
	}
}

// calledIdent is the name of the package-level function fun calls (f(...), f[T](...)),
// or "".
func calledIdent(fun ast.Expr) string {
	switch e := fun.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.IndexExpr:
		return calledIdent(e.X)
	case *ast.IndexListExpr:
		return calledIdent(e.X)
	}
	return ""
}

// reaches reports whether fn calls one of seqTakers, directly or through the
// package's other functions.
func reaches(calls map[string][]string, fn string, seen map[string]bool) bool {
	if seen[fn] {
		return false
	}
	seen[fn] = true
	for _, c := range calls[fn] {
		if slices.Contains(seqTakers, c) || reaches(calls, c, seen) {
			return true
		}
	}
	return false
}

// docLinks returns the sorted, distinct [Name] links of text.
func docLinks(text string) []string {
	var names []string
	for _, m := range regexp.MustCompile(`\[(\w+)\]`).FindAllStringSubmatch(text, -1) {
		if !slices.Contains(names, m[1]) {
			names = append(names, m[1])
		}
	}
	slices.Sort(names)
	return names
}
