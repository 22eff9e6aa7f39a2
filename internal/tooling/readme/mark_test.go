package readme

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMarkExamples marks the blocks of a fixture that equal an example: a whole file, a
// region in place of its go-wrap comment, a TypeScript block in place of its
// ts-fragment comment; it leaves alone a block that equals nothing, one already
// marked, and one that equals two examples. Marking again changes nothing, and the
// marked fixture passes CheckExamples.
func TestMarkExamples(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	const program = "package main\n\nfunc main() {}\n"
	writeFile(t, filepath.Join(root, "examples/a/main.go"), program)
	writeFile(t, filepath.Join(root, "examples/b/b.go"), "package b\n\nfunc f() {\n\t// docs:begin call\n\tf()\n\t// docs:end call\n}\n")
	writeFile(t, filepath.Join(root, "examples/c/c.go"), "package c\n\n// docs:begin same\nx := 1\n// docs:end same\n// docs:begin again\nx := 1\n// docs:end again\n")
	writeFile(t, filepath.Join(root, "sdk/typescript/examples/t.ts"), "// docs:begin run\nawait step.run();\n// docs:end run\n")
	writeFile(t, filepath.Join(root, "examples/testdata/skipped.go"), "ls\n")
	sources, err := Sources(root, ExampleDirs...)
	require.NoError(t, err)

	doc := "# Doc\n\n```go\n" + program + "```\n\n" +
		"<!-- go-wrap\npackage b\nfunc g() {\n{{block}}\n}\n-->\n```go\nf()\n```\n\n" +
		"<!-- ts-fragment\ndeclare const step: any;\n-->\n```ts\nawait step.run();\n```\n\n" +
		"```sh\nls\n```\n\n" +
		"<!-- example: examples/a/main.go -->\n```go\n" + program + "```\n\n" +
		"- item\n\n  ```go\n  x := 1\n  ```\n"
	want := "# Doc\n\n<!-- example: examples/a/main.go -->\n```go\n" + program + "```\n\n" +
		"<!-- example: examples/b/b.go#call -->\n```go\nf()\n```\n\n" +
		"<!-- example: sdk/typescript/examples/t.ts#run -->\n```ts\nawait step.run();\n```\n\n" +
		"```sh\nls\n```\n\n" +
		"<!-- example: examples/a/main.go -->\n```go\n" + program + "```\n\n" +
		"- item\n\n  ```go\n  x := 1\n  ```\n"
	marked, marks, ambiguous, err := MarkExamples("doc.md", doc, sources)
	require.NoError(t, err)
	require.Equal(t, want, marked)
	require.Equal(t, []Mark{
		{Line: 3, Example: "examples/a/main.go"},
		{Line: 15, Example: "examples/b/b.go#call", Replaced: "go-wrap"},
		{Line: 22, Example: "sdk/typescript/examples/t.ts#run", Replaced: "ts-fragment"},
	}, marks)
	require.Equal(t, []string{"doc.md:39: the block equals examples/c/c.go#again, examples/c/c.go#same"}, ambiguous)

	again, marks, _, err := MarkExamples("doc.md", marked, sources)
	require.NoError(t, err)
	require.Equal(t, marked, again, "marking is idempotent")
	require.Empty(t, marks)

	writeFile(t, filepath.Join(root, "doc.md"), marked)
	n, errs := CheckExamples(root, "doc.md")
	require.Empty(t, errs)
	require.Equal(t, 4, n)
}
