package readme

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestExampleBlocks checks every block of README.md and docs/*.md that names its source
// with an example comment (<!-- example: PATH --> or <!-- example: PATH#REGION -->, see
// examples.go) against the source: they must be equal, so a block shows code that is
// compiled and run where it lives, as it is.
func TestExampleBlocks(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	docs, err := Docs(root)
	require.NoError(t, err)
	total := 0
	for _, doc := range docs {
		n, errs := CheckExamples(root, doc)
		for _, err := range errs {
			t.Error(err)
		}
		total += n
	}
	t.Logf("%d blocks name their example", total)
}

// TestCheckExamples runs the check on fixtures: a block equal to its file or region
// passes; one that differs, or names a file or a region that is not there, fails,
// naming the block's line and the file.
func TestCheckExamples(t *testing.T) {
	t.Parallel()
	const program = "package main\n\nfunc main() {\n\tprintln(\"hi\")\n}\n"
	const withRegion = "package main\n\nfunc main() {\n\t// docs:begin greet\n\n\tif true {\n\n\t\tprintln(\"hi\")\n\t}\n\n\t// docs:end greet\n}\n"
	const greet = "if true {\n\n\tprintln(\"hi\")\n}\n"
	const script = "#!/bin/sh\n# docs:begin run\ngo run ./examples/hello\n# docs:end run\n"
	const ts = "// docs:begin tour\nconst x: number = 1;\n// docs:end tour\n"
	files := map[string]string{
		"examples/hello/main.go":    program,
		"examples/region/main.go":   withRegion,
		"examples/run.sh":           script,
		"sdk/typescript/ex/tour.ts": ts,
	}
	for _, tt := range []struct {
		name, doc string
		checked   int
		err       string // a substring of the one error; "" for none
	}{
		{name: "EqualFile", checked: 1,
			doc: "# Hello\n\n<!-- example: examples/hello/main.go -->\n```go\n" + program + "```\n"},
		{name: "EqualRegion", checked: 1,
			doc: "<!-- example: examples/region/main.go#greet -->\n```go\n" + greet + "```\n"},
		{name: "EqualShellRegion", checked: 1,
			doc: "<!-- example: examples/run.sh#run -->\n```sh\ngo run ./examples/hello\n```\n"},
		{name: "EqualTypeScriptRegion", checked: 1,
			doc: "<!-- example: sdk/typescript/ex/tour.ts#tour -->\n```typescript\nconst x: number = 1;\n```\n"},
		{name: "IndentedFence", checked: 1,
			doc: "1. Run it:\n\n   <!-- example: examples/run.sh#run -->\n   ```sh\n   go run ./examples/hello\n   ```\n"},
		{name: "UnmarkedBlocksAreNotChecked", checked: 0,
			doc: "```go\npackage other\n```\n\n<!-- a comment -->\n```sh\nls\n```\n"},
		{name: "Differs", checked: 1,
			doc: "# Hello\n\n<!-- example: examples/hello/main.go -->\n```go\n" + strings.Replace(program, "hi", "hello", 1) + "```\n",
			err: `doc.md:4: the block and examples/hello/main.go differ: copy examples/hello/main.go's text into the block, or the block's into it if the block is right (the block's line 4 is "\tprintln(\"hello\")\n", the source's "\tprintln(\"hi\")\n")`},
		{name: "BlockLongerThanSource", checked: 1,
			doc: "<!-- example: examples/hello/main.go -->\n```go\n" + program + "// more\n```\n",
			err: `doc.md:2: the block and examples/hello/main.go differ`},
		{name: "RegionDiffers", checked: 1,
			doc: "<!-- example: examples/region/main.go#greet -->\n```go\n\t" + greet + "```\n",
			err: `doc.md:2: the block and examples/region/main.go#greet differ`},
		{name: "MissingFile", checked: 1,
			doc: "text\n<!-- example: examples/gone/main.go -->\n```go\n" + program + "```\n",
			err: `doc.md:3: the block shows examples/gone/main.go: read the example:`},
		{name: "MissingRegion", checked: 1,
			doc: "<!-- example: examples/hello/main.go#greet -->\n```go\n" + greet + "```\n",
			err: `doc.md:2: the block shows examples/hello/main.go#greet: examples/hello/main.go has no region "greet"`},
		{name: "PathOutsideTheRepository", checked: 1,
			doc: "<!-- example: ../etc/passwd -->\n```\nroot\n```\n",
			err: `doc.md:2: the block shows ../etc/passwd: ../etc/passwd is not a clean path inside the repository`},
		{name: "MarkerNotBeforeAFence", checked: 0,
			doc: "<!-- example: examples/hello/main.go -->\n\n```go\n" + program + "```\n",
			err: `doc.md:1: the example comment is not on the line right before a fence`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := t.TempDir()
			for name, text := range files {
				writeFile(t, filepath.Join(root, name), text)
			}
			writeFile(t, filepath.Join(root, "doc.md"), tt.doc)
			n, errs := CheckExamples(root, "doc.md")
			require.Equal(t, tt.checked, n, "blocks checked")
			if tt.err == "" {
				require.Empty(t, errs)
				return
			}
			require.Len(t, errs, 1, "%v", errs)
			require.Contains(t, errs[0].Error(), tt.err)
		})
	}
}

// TestRegions checks the regions a source file holds, and the files whose regions are
// broken.
func TestRegions(t *testing.T) {
	t.Parallel()
	regions, err := Regions("a\n\t// docs:begin outer\n\tb\n\t\t// docs:begin inner\n\t\tc\n\t\t// docs:end inner\n\n\td\n\t// docs:end outer\n# docs:begin sh\necho\n# docs:end sh\n")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"outer": "b\n\tc\n\nd\n", "inner": "c\n", "sh": "echo\n"}, regions)
	regions, err = Regions("// docs:begin r\n\n\tx\n\n\ty\n\n// docs:end r\n")
	require.NoError(t, err)
	require.Equal(t, map[string]string{"r": "x\n\ny\n"}, regions, "blank lines at either end are not the region's")

	for text, want := range map[string]string{
		"// docs:begin a\nx\n":                                             `line 1: region "a" does not end`,
		"x\n// docs:end a\n":                                               `line 2: region "a" ends but has not begun`,
		"// docs:begin a\n// docs:begin a\n// docs:end a\n":                `line 2: region "a" begins again before it ends`,
		"// docs:begin a\n// docs:end a\n// docs:begin a\n// docs:end a\n": `line 3: region "a" begins a second time`,
	} {
		_, err := Regions(text)
		require.ErrorContains(t, err, want, text)
	}
}

// TestFences checks what a block holds: its language, its code, its example.
func TestFences(t *testing.T) {
	t.Parallel()
	fences, err := Fences("doc.md", "# t\n<!-- example: a.go#r -->\n```go title\nx\n```\n```\ny\n```\n")
	require.NoError(t, err)
	require.Equal(t, []Fence{
		{Line: 3, Lang: "go", Code: "x\n", Example: "a.go#r", Marker: 2},
		{Line: 6, Lang: "", Code: "y\n"},
	}, fences)

	_, err = Fences("doc.md", "text\n```go\nx\n")
	require.EqualError(t, err, "doc.md:2: the block is not closed")
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
}
