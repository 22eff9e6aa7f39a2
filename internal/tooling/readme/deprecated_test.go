package readme

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// sdkGoDirs are the Go SDK's modules, the Go packages of the API promise
// (docs/releasing.md, "What counts as the API"), each with its subpackages.
var sdkGoDirs = []string{"functions", "client", "protocol", "access"}

// TestDeprecatedNamesInChangelog keeps docs/releasing.md's rule: a name of the Go SDK
// marked "Deprecated:" and a name of the TypeScript SDK marked @deprecated is named in
// CHANGELOG.md (in a code span), where its upgrade note says what replaces it.
func TestDeprecatedNamesInChangelog(t *testing.T) {
	root := moduleRoot(t)
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	require.NoError(t, err)
	spans := codeSpans(string(changelog))

	var names []string // "file: name"
	for _, dir := range sdkGoDirs {
		err := filepath.WalkDir(filepath.Join(root, dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && (d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			for _, n := range goDeprecated(t, path, src) {
				names = append(names, mustRel(t, root, path)+": "+n)
			}
			return nil
		})
		require.NoError(t, err)
	}
	ts, err := filepath.Glob(filepath.Join(root, "sdk", "typescript", "src", "*.ts"))
	require.NoError(t, err)
	require.NotEmpty(t, ts, "no TypeScript sources: is the test reading the right folder?")
	for _, path := range ts {
		src, err := os.ReadFile(path)
		require.NoError(t, err)
		for _, n := range tsDeprecated(string(src)) {
			names = append(names, mustRel(t, root, path)+": "+n)
		}
	}
	for _, n := range names {
		name := n[strings.LastIndex(n, " ")+1:]
		if !slices.ContainsFunc(spans, func(s string) bool { return mentions(s, name) }) {
			t.Errorf("%s is deprecated, and CHANGELOG.md names it nowhere: say under Deprecated and Upgrading what replaces it", n)
		}
	}
}

// TestDeprecatedScanners checks what the test above reads as deprecated.
func TestDeprecatedScanners(t *testing.T) {
	goSrc := `package p

// Old does a thing.
//
// Deprecated: use New.
func Old() {}

// New does it.
func New() {}

// T is a type.
type T struct{}

// Get gets.
//
// Deprecated: use [T.Fetch].
func (T) Get() {}

const (
	// A is old.
	// Deprecated: use B.
	A = 1
	B = 2
)
`
	require.Equal(t, []string{"Old", "T.Get", "A"}, goDeprecated(t, "p.go", []byte(goSrc)))

	tsSrc := `/** The new one. */
export function fresh() {}
/**
 * The old one.
 * @deprecated Use fresh.
 */
export function stale() {}
class Step {
  /** @deprecated Use result(). */
  async awaitCallback<T>(cb: unknown): Promise<T> {}
  /** Not this. */
  run() {}
}
`
	require.Equal(t, []string{"stale", "awaitCallback"}, tsDeprecated(tsSrc))

	spans := codeSpans("- `functions.Timeout` → `InvocationTimeout`, `step.awaitCallback(cb)`.")
	require.True(t, slices.ContainsFunc(spans, func(s string) bool { return mentions(s, "Timeout") }))
	require.True(t, slices.ContainsFunc(spans, func(s string) bool { return mentions(s, "awaitCallback") }))
	require.False(t, slices.ContainsFunc(spans, func(s string) bool { return mentions(s, "Invocation") }))
}

// goDeprecated returns the names declared in src whose doc comment has a paragraph
// starting "Deprecated:": functions, methods (as Type.Method), types, constants and
// variables.
func goDeprecated(t *testing.T, path string, src []byte) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, src, parser.ParseComments|parser.SkipObjectResolution)
	require.NoError(t, err)
	deprecated := func(docs ...*ast.CommentGroup) bool {
		for _, d := range docs {
			if d == nil {
				continue
			}
			for _, line := range strings.Split(d.Text(), "\n") {
				if strings.HasPrefix(line, "Deprecated:") {
					return true
				}
			}
		}
		return false
	}
	var out []string
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			if !deprecated(d.Doc) {
				continue
			}
			name := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) == 1 {
				typ := d.Recv.List[0].Type
				if s, ok := typ.(*ast.StarExpr); ok {
					typ = s.X
				}
				if g, ok := typ.(*ast.IndexExpr); ok {
					typ = g.X
				}
				if g, ok := typ.(*ast.IndexListExpr); ok {
					typ = g.X
				}
				if id, ok := typ.(*ast.Ident); ok {
					name = id.Name + "." + name
				}
			}
			out = append(out, name)
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				switch s := spec.(type) {
				case *ast.TypeSpec:
					if deprecated(s.Doc, singleDoc(d)) {
						out = append(out, s.Name.Name)
					}
				case *ast.ValueSpec:
					if deprecated(s.Doc, singleDoc(d)) {
						for _, n := range s.Names {
							out = append(out, n.Name)
						}
					}
				}
			}
		}
	}
	return out
}

// singleDoc is a declaration's doc comment when it declares one thing (type T …), which
// go/parser keeps on the declaration rather than its spec.
func singleDoc(d *ast.GenDecl) *ast.CommentGroup {
	if d.Lparen.IsValid() {
		return nil
	}
	return d.Doc
}

var (
	tsDocComment = regexp.MustCompile(`(?s)/\*\*(.*?)\*/\s*\n?\s*(?:export\s+)?(?:default\s+)?(?:declare\s+)?(?:public\s+|private\s+|protected\s+|static\s+|readonly\s+|async\s+|function\s+|const\s+|let\s+|class\s+|interface\s+|type\s+|get\s+|set\s+)*([A-Za-z_$][\w$]*)`)
	mdCodeSpan   = regexp.MustCompile("`([^`\n]+)`")
)

// tsDeprecated returns the names declared right after a doc comment with a @deprecated
// tag in the TypeScript source src.
func tsDeprecated(src string) []string {
	var out []string
	for _, m := range tsDocComment.FindAllStringSubmatch(src, -1) {
		if strings.Contains(m[1], "@deprecated") {
			out = append(out, m[2])
		}
	}
	return out
}

// codeSpans returns the text of markdown's code spans.
func codeSpans(markdown string) []string {
	var out []string
	for _, m := range mdCodeSpan.FindAllStringSubmatch(markdown, -1) {
		out = append(out, m[1])
	}
	return out
}

// mentions reports whether the code span s names name as a whole identifier (a method
// Type.Method by its own name).
func mentions(s, name string) bool {
	last := name[strings.LastIndex(name, ".")+1:]
	return regexp.MustCompile(`(^|[^\w$])` + regexp.QuoteMeta(last) + `([^\w$]|$)`).MatchString(s)
}
