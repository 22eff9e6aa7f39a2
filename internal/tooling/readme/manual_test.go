package readme

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmeMaxLines bounds README.md: the first screen, the two commands, a five-minute tour
// and a feature map; everything else is in docs/.
const readmeMaxLines = 300

// TestReadmeIsShort checks that README.md stays a page a newcomer reads in five minutes,
// and starts with the two commands.
func TestReadmeIsShort(t *testing.T) {
	root := moduleRoot(t)
	text, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(text), "\n"), "\n")
	if len(lines) > readmeMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move detail into a docs/ page and link it", len(lines), readmeMaxLines)
	}
	head := strings.Join(lines[:min(len(lines), 15)], "\n")
	for _, cmd := range []string{"go run ./cmd/stepgate dev", "./test.sh"} {
		if !strings.Contains(head, cmd) {
			t.Errorf("README.md's first 15 lines do not show %q", cmd)
		}
	}
}

// TestManualPagesStartWithWhatTheReaderCanDo checks that every page of docs/ is a title,
// then a paragraph of prose (what its reader will be able to do), and that the manual's
// index, docs/README.md, links every page.
func TestManualPagesStartWithWhatTheReaderCanDo(t *testing.T) {
	root := moduleRoot(t)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	if len(pages) < 20 {
		t.Fatalf("docs/ has %d pages: is the test reading the right folder?", len(pages))
	}
	index, err := os.ReadFile(filepath.Join(root, "docs", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	prose := regexp.MustCompile(`^[A-Z*\[]`)
	for _, p := range pages {
		name := filepath.Base(p)
		text, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(text), "\n")
		if len(lines) < 3 || !strings.HasPrefix(lines[0], "# ") || lines[1] != "" || !prose.MatchString(lines[2]) {
			t.Errorf("docs/%s does not start with a title, a blank line and a paragraph saying what its reader will be able to do", name)
		}
		if name != "README.md" && !strings.Contains(string(index), "]("+name) {
			t.Errorf("docs/README.md (the manual's index) does not link docs/%s", name)
		}
	}
}

// TestDocsLinksResolve checks every relative link of the README, the manual, the
// benchmarks, the changelog and the TypeScript SDK's README: each names a file that
// exists and, for a Markdown page, a heading that is there.
func TestDocsLinksResolve(t *testing.T) {
	root := moduleRoot(t)
	files := []string{"README.md", "BENCHMARKS.md", "CHANGELOG.md", filepath.Join("sdk", "typescript", "README.md")}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		files = append(files, mustRel(t, root, p))
	}
	checkLinks(t, root, files)
}
