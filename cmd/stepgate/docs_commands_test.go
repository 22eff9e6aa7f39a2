package main

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// commandRefs finds `stepgate CMD [SUB]` in backquotes, and shellRefs the command lines
// of a markdown file's code blocks ("stepgate CMD", "go run ./cmd/stepgate CMD"): the
// command and, when there is one, the word after it.
var (
	commandRefs = regexp.MustCompile("`stepgate ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?")
	shellRefs   = regexp.MustCompile(`^\s*(?:go run \./cmd/)?stepgate ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?`)
)

// TestDocsNameRealCommands checks that every stepgate command named by the docs
// (README.md, docs/*.md, sdk/typescript/README.md, openapi.yaml), the Go SDK and the
// examples' command (doc comments and messages) is one the command line knows: listed
// by "stepgate help", and answering -h with its usage (see knownCommand).
func TestDocsNameRealCommands(t *testing.T) {
	root := filepath.Join("..", "..")
	paths := []string{"README.md", "openapi.yaml", filepath.Join("sdk", "typescript", "README.md")}
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		paths = append(paths, strings.TrimPrefix(d, root+string(filepath.Separator)))
	}
	for _, dir := range []string{"functions", filepath.Join("cmd", "stepgate-examples")} {
		err = filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
				paths = append(paths, strings.TrimPrefix(p, root+string(filepath.Separator)))
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}

	seen := map[string]bool{}
	for _, p := range paths {
		f, err := os.Open(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(nil, 1<<20)
		block := "" // the language of the markdown code block the line is in
		for n := 1; sc.Scan(); n++ {
			line := sc.Text()
			if fence, ok := strings.CutPrefix(line, "```"); ok && strings.HasSuffix(p, ".md") {
				if block == "" {
					block = cmp.Or(strings.TrimSpace(fence), "text")
				} else {
					block = ""
				}
			}
			refs := commandRefs.FindAllStringSubmatch(line, -1)
			if block == "sh" || block == "bash" || block == "console" {
				refs = append(refs, shellRefs.FindAllStringSubmatch(line, -1)...)
			}
			for _, m := range refs {
				words := slices.DeleteFunc(m[1:], func(w string) bool { return w == "" })
				ref := strings.Join(words, " ")
				if seen[ref] {
					continue
				}
				seen[ref] = true
				if err := knownCommand(words); err != nil {
					t.Errorf("%s:%d names `stepgate %s`: %v", p, n, ref, err)
				}
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			t.Fatal(err)
		}
	}
	if !seen["keys secrets"] {
		t.Errorf("no reference to `stepgate keys secrets` found: is the test reading the docs? (saw %v)", seen)
	}
}

// usageLine is a command of usageText: its words, then its synopsis up to the
// description (two spaces or more away).
var usageLine = regexp.MustCompile(`^  ([a-z][a-z-]*(?: [a-z][a-z-]*)*)((?: ?[^ ]| [^ ])*)`)

// knownCommand checks words (a command, and the word after it if any) against
// usageText: either both words are a command listed there, or the first is, with a
// synopsis that takes arguments. It then runs the command it found with -h, which
// prints the command's usage and does nothing else, to check that it exists.
func knownCommand(words []string) error {
	listed := map[string]bool{} // command -> takes arguments
	for line := range strings.SplitSeq(usageText, "\n") {
		m := usageLine.FindStringSubmatch(line)
		if m == nil || strings.HasPrefix(m[1], "stepgate") {
			continue
		}
		listed[m[1]] = listed[m[1]] || strings.ContainsAny(m[2], "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
	}
	cmd := words
	if _, ok := listed[strings.Join(words, " ")]; !ok {
		if args, ok := listed[words[0]]; !ok || len(words) > 1 && !args {
			return errors.New("\"stepgate help\" lists no such command")
		}
		cmd = words[:1]
	}
	c, _, _ := newTestCLI(nil, "")
	err := c.dispatch(context.Background(), append(slices.Clone(cmd), "-h"))
	if uerr := (*usageError)(nil); errors.As(err, &uerr) {
		return err
	}
	return nil // its usage (flag.ErrHelp), or another failure of a command that exists
}
