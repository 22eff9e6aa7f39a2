package readme

import (
	"bytes"
	"fmt"
	"go/format"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stepgate/stepgate/internal/tooling/repo"
)

// A Go block in the markdown is a ```go fence. It is compiled as one of:
//
//   - a whole file: the block starts with a package clause;
//   - a fragment: an HTML comment that starts with "<!-- go-wrap" ends on the line
//     right before the fence, and holds a whole Go file with a line "{{block}}" where
//     the block goes: the imports, types and enclosing function the fragment needs,
//     kept out of the rendered page.
//
// Each is type-checked and vetted (go vet) as a package of its own.
//
// A block that names its source with an example comment (see examples.go) is not
// compiled here: its source is compiled, and run, where it lives, and TestExampleBlocks
// checks that the block equals it. Any other Go block fails the test, so that no block
// escapes it.

// wrapMarker opens the comment that wraps the fragment after it; blockLine is where the
// fragment goes in it.
const (
	wrapMarker = "<!-- go-wrap"
	blockLine  = "{{block}}"
)

// block is one Go block of a markdown file, ready to compile.
type block struct {
	file  string // the markdown file, relative to the module root
	line  int    // the line of its opening fence
	src   string // the Go file to compile, with //line directives into the markdown
	whole bool   // the block is a whole file, not a wrapped fragment
	code  string // the block's own text
}

func (b block) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// TestGoBlocksCompile holds README.md and docs/*.md to their rule: every Go block names
// the example under examples/ that the suite runs (TestExampleBlocks checks the two
// agree). A block that does not is an error; it is still type-checked (and vetted) here,
// as a package of its own inside this module (under testdata, which ./... skips), so that
// its author sees whether it compiles while writing the example it needs.
func TestGoBlocksCompile(t *testing.T) {
	root := moduleRoot(t)
	blocks := markdownBlocks(t, root)
	for _, b := range blocks {
		t.Errorf("%s: the Go block names no example (<!-- example: examples/… --> on the line before its fence): "+
			"put its code in a program or test under examples/ that the suite runs, then `go run ./internal/tooling/readme/cmd/markblocks`", b)
	}
	for _, b := range blocks {
		if !b.whole {
			continue
		}
		if formatted, err := format.Source([]byte(b.code)); err == nil && !bytes.Equal(formatted, []byte(b.code)) {
			t.Errorf("%s: the block is not gofmt'd", b)
		}
	}

	if len(blocks) == 0 {
		t.Log("every Go block names its example: none to compile here")
		return
	}
	dir := blockDir(t, root)
	// go vet type-checks every package it is given, main or not, and writes nothing.
	args := []string{"vet"}
	for i, b := range blocks {
		args = append(args, "./"+filepath.ToSlash(mustRel(t, root, writeBlock(t, dir, fmt.Sprintf("b%02d", i), b.src))))
	}
	goCommand(t, root, args...)
	t.Logf("%d Go blocks compiled", len(blocks))
}

// markdownBlocks returns the Go blocks of README.md and docs/*.md to compile here,
// failing the test for a block that follows no rule, and when the files hold no Go
// block at all.
func markdownBlocks(t *testing.T, root string) []block {
	t.Helper()
	files, err := Docs(root)
	if err != nil {
		t.Fatal(err)
	}
	var blocks []block
	marked := 0
	for _, f := range files {
		text, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		bs, n, err := goBlocks(f, filepath.Join(root, f), string(text))
		if err != nil {
			t.Error(err)
		}
		blocks = append(blocks, bs...)
		marked += n
	}
	if len(blocks)+marked == 0 {
		t.Fatal("no Go blocks in README.md and docs/*.md: is the test reading the right files?")
	}
	return blocks
}

// blockDir makes a directory for blocks inside the module (under testdata, which ./...
// skips), removed when the test ends.
func blockDir(t *testing.T, root string) string {
	t.Helper()
	dir, err := os.MkdirTemp(filepath.Join(root, "internal", "readme", "testdata"), "blocks-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// writeBlock writes src as the one file of the package dir/name, and returns its
// directory.
func writeBlock(t *testing.T, dir, name, src string) string {
	t.Helper()
	pkg := filepath.Join(dir, name)
	if err := os.Mkdir(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkg, "block.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return pkg
}

// goCommand runs the go command in root, offline (every import must come from this
// module or its go.mod), failing the test with its output when it fails.
func goCommand(t *testing.T, root string, args ...string) {
	t.Helper()
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=readonly")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s: the Go blocks do not compile (positions are in the markdown):\n%s", args[0], out)
	}
}

// goBlocks returns the Go blocks of the markdown text of file (at path, which the
// blocks' //line directives name) but those that name their example, and how many do;
// or an error naming each block that is neither a whole file nor a wrapped fragment.
func goBlocks(file, path, text string) ([]block, int, error) {
	fences, err := Fences(file, text)
	lines := strings.Split(text, "\n")
	var blocks []block
	var errs []string
	if err != nil {
		errs = append(errs, err.Error())
	}
	marked := 0
	for _, f := range fences {
		if f.Lang != "go" {
			continue
		}
		if f.Example != "" {
			marked++
			continue // compiled where it lives; TestExampleBlocks checks the block against it
		}
		start := f.Line - 1
		b := block{file: file, line: f.Line, code: f.Code}
		wrapper, wrapLine := wrapperBefore(lines, start)
		switch {
		case wrapper != nil:
			src, err := wrap(path, wrapper, wrapLine, b.code, start+2)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s:%d: %v", file, wrapLine, err))
				continue
			}
			b.src = src
		case strings.HasPrefix(strings.TrimSpace(b.code), "package "):
			b.whole = true
			b.src = fmt.Sprintf("//line %s:%d\n%s", path, start+2, b.code)
		default:
			errs = append(errs, fmt.Sprintf("%s:%d: a Go block with no package clause needs a %q comment (see readme_test.go) or an example comment (see examples.go) right before it", file, f.Line, wrapMarker+" … -->"))
			continue
		}
		blocks = append(blocks, b)
	}
	if len(errs) > 0 {
		return blocks, marked, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return blocks, marked, nil
}

// wrapperBefore returns the lines inside the go-wrap comment that ends on the line
// before lines[fence], and the markdown line number of its first one; nil when there is
// none.
func wrapperBefore(lines []string, fence int) ([]string, int) {
	end := fence - 1
	if end < 0 || strings.TrimSpace(lines[end]) != "-->" {
		return nil, 0
	}
	for i := end - 1; i >= 0; i-- {
		if strings.TrimSpace(lines[i]) == wrapMarker {
			return lines[i+1 : end], i + 2
		}
		if strings.Contains(lines[i], "-->") || strings.Contains(lines[i], "<!--") {
			return nil, 0
		}
	}
	return nil, 0
}

// wrap puts code, which starts at markdown line codeLine, in place of the {{block}} line
// of wrapper, which starts at markdown line wrapLine, with //line directives so that the
// compiler's positions point into the markdown.
func wrap(file string, wrapper []string, wrapLine int, code string, codeLine int) (string, error) {
	at := -1
	for i, l := range wrapper {
		if strings.TrimSpace(l) == blockLine {
			if at >= 0 {
				return "", fmt.Errorf("the go-wrap comment has %s twice", blockLine)
			}
			at = i
		}
	}
	if at < 0 {
		return "", fmt.Errorf("the go-wrap comment has no %s line", blockLine)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "//line %s:%d\n%s\n", file, wrapLine, strings.Join(wrapper[:at], "\n"))
	fmt.Fprintf(&b, "//line %s:%d\n%s", file, codeLine, code)
	fmt.Fprintf(&b, "//line %s:%d\n%s\n", file, wrapLine+at+1, strings.Join(wrapper[at+1:], "\n"))
	return b.String(), nil
}

// moduleRoot is the repository's root (repo.Root), or the test fails.
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := repo.Root()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func mustRel(t *testing.T, base, path string) string {
	t.Helper()
	rel, err := filepath.Rel(base, path)
	if err != nil {
		t.Fatal(err)
	}
	return rel
}
