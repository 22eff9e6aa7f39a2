package readme

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// benchmarksMaxLines is the most lines BENCHMARKS.md may have: it holds the current
// figures and how to reproduce them; their history is docs/benchmarks-history.md.
const benchmarksMaxLines = 300

// TestBenchmarksPage checks that BENCHMARKS.md stays a page of current figures (at most
// benchmarksMaxLines lines) and that every relative link of it and of
// docs/benchmarks-history.md resolves, anchors included.
func TestBenchmarksPage(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	text, err := os.ReadFile(filepath.Join(root, "BENCHMARKS.md"))
	require.NoError(t, err)
	lines := strings.Count(strings.TrimSuffix(string(text), "\n"), "\n") + 1
	require.LessOrEqual(t, lines, benchmarksMaxLines, "BENCHMARKS.md has %d lines: move dated detail to docs/benchmarks-history.md", lines)

	checkLinks(t, root, []string{"BENCHMARKS.md", filepath.Join("docs", "benchmarks-history.md")})
}
