package readme

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ExampleDirs are the directories, relative to the repository's root, whose files
// [Sources] offers as examples by default.
var ExampleDirs = []string{"examples", "sdk/typescript/examples"}

// Sources returns the examples under paths (files or directories, relative to root,
// walked whole but for testdata and node_modules), by their text: each file as
// "PATH", and each of its regions as "PATH#REGION". A file whose regions are broken
// offers none of them, and is reported in the error.
func Sources(root string, paths ...string) (map[string][]string, error) {
	bySource := map[string][]string{}
	var errs []string
	add := func(rel string) error {
		text, err := os.ReadFile(filepath.Join(root, rel))
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		bySource[string(text)] = append(bySource[string(text)], rel)
		regions, err := Regions(string(text))
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", rel, err))
			return nil
		}
		for name, r := range regions {
			if strings.TrimSpace(r) != "" {
				bySource[r] = append(bySource[r], rel+"#"+name)
			}
		}
		return nil
	}
	for _, p := range paths {
		err := filepath.WalkDir(filepath.Join(root, filepath.FromSlash(p)), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == "testdata" || d.Name() == "node_modules" {
					return filepath.SkipDir
				}
				return nil
			}
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			return add(rel)
		})
		if err != nil {
			return nil, err
		}
	}
	for _, examples := range bySource {
		slices.Sort(examples)
	}
	if len(errs) > 0 {
		return bySource, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return bySource, nil
}

// A Mark is an example comment [MarkExamples] put before a block.
type Mark struct {
	Line    int    // the block's fence, in the markdown it was given
	Example string // "PATH" or "PATH#REGION"
	// Replaced is the comment the mark replaced ("go-wrap" or "ts-fragment"), or "".
	Replaced string
}

// MarkExamples returns markdown with an example comment right before each block that
// has none and equals the text of exactly one example of sources (see [Sources]); the
// go-wrap or ts-fragment comment right before such a block, if any, is replaced, since
// the example is compiled where it lives. A block that equals several examples is left
// as it is and named in ambiguous. Marking marked markdown again changes nothing.
func MarkExamples(doc, markdown string, sources map[string][]string) (marked string, marks []Mark, ambiguous []string, err error) {
	fences, err := Fences(doc, markdown)
	if err != nil {
		return markdown, nil, nil, err
	}
	lines := strings.Split(markdown, "\n")
	// From the last block up, so that the line numbers of the blocks before stay right.
	for _, f := range slices.Backward(fences) {
		if f.Example != "" {
			continue
		}
		examples := sources[f.Code]
		if len(examples) == 0 {
			continue
		}
		if len(examples) > 1 {
			ambiguous = append(ambiguous, fmt.Sprintf("%s:%d: the block equals %s", doc, f.Line, strings.Join(examples, ", ")))
			continue
		}
		fence := f.Line - 1
		indent := lines[fence][:len(lines[fence])-len(strings.TrimLeft(lines[fence], " "))]
		m := Mark{Line: f.Line, Example: examples[0]}
		from := fence // the lines [from, fence) give way to the mark
		if start, kind := commentBefore(lines, fence); start >= 0 {
			from, m.Replaced = start, kind
		}
		lines = slices.Replace(lines, from, fence, indent+"<!-- example: "+m.Example+" -->")
		marks = append(marks, m)
	}
	slices.Reverse(marks)
	slices.Reverse(ambiguous)
	return strings.Join(lines, "\n"), marks, ambiguous, nil
}

// commentBefore returns the first line of the go-wrap or ts-fragment comment that ends
// on the line right before lines[fence], and which it is; -1 when there is none.
func commentBefore(lines []string, fence int) (int, string) {
	end := fence - 1
	if end < 0 || !strings.HasSuffix(strings.TrimSpace(lines[end]), "-->") {
		return -1, ""
	}
	for i := end; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		for _, kind := range []string{"go-wrap", "ts-fragment"} {
			if strings.HasPrefix(l, "<!-- "+kind) || strings.HasPrefix(l, "<!--"+kind) {
				return i, kind
			}
		}
		if strings.Contains(l, "<!--") || (i < end && strings.Contains(l, "-->")) {
			return -1, ""
		}
	}
	return -1, ""
}
