package readme

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// A fenced block of the markdown may name the file it shows, with a comment on the line
// right before its fence:
//
//	<!-- example: PATH -->
//	<!-- example: PATH#REGION -->
//
// PATH is relative to the repository's root. The block must then equal the file, or
// its region: the lines between a line "// docs:begin REGION" and a line
// "// docs:end REGION" ("#" instead of "//" for files whose comments start so), with
// the region's common indentation and its blank lines at either end removed, and the
// marker lines of other regions left out. The file is compiled, and run, where it lives (examples/, a package's
// Example), so the block shows code that works; [CheckExamples] fails when the two
// drift apart.

// exampleMarker matches the comment that names a block's source; group 1 is its path,
// group 3 its region, if any.
var exampleMarker = regexp.MustCompile(`^<!--\s*example:\s*([^\s#]+)(#(\S+))?\s*-->$`)

// regionMarker matches a line that begins or ends a region; group 1 is "begin" or
// "end", group 2 the region's name.
var regionMarker = regexp.MustCompile(`^(?://|#)\s*docs:(begin|end)\s+(\S+)$`)

// Fence is one fenced code block of a markdown file.
type Fence struct {
	Line int    // the 1-based line of its opening fence
	Lang string // the first word of its info string: "go", "ts", "sh", or ""
	Code string // its text, every line ending in "\n"
	// Example is the source it names (the marker's "PATH" or "PATH#REGION"), or "".
	Example string
	// Marker is the 1-based line of the example marker, or 0.
	Marker int
}

// Fences returns the fenced code blocks (``` fences) of markdown, the text of the file
// doc, in order, with the example each names. It fails naming the line of a block that
// is not closed, and of an example marker that is not right before a fence.
func Fences(doc, markdown string) ([]Fence, error) {
	lines := strings.Split(markdown, "\n")
	var fences []Fence
	var errs []error
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if exampleMarker.MatchString(line) && (i+1 == len(lines) || !strings.HasPrefix(strings.TrimSpace(lines[i+1]), "```")) {
			errs = append(errs, fmt.Errorf("%s:%d: the example comment is not on the line right before a fence", doc, i+1))
			continue
		}
		if !strings.HasPrefix(line, "```") {
			continue
		}
		indent := lines[i][:len(lines[i])-len(strings.TrimLeft(lines[i], " "))]
		f := Fence{Line: i + 1}
		if info := strings.Fields(line[3:]); len(info) > 0 {
			f.Lang = info[0]
		}
		if i > 0 {
			if m := exampleMarker.FindStringSubmatch(strings.TrimSpace(lines[i-1])); m != nil {
				f.Example, f.Marker = m[1]+m[2], i
			}
		}
		var code strings.Builder
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
			code.WriteString(strings.TrimPrefix(lines[i], indent) + "\n")
		}
		if i == len(lines) {
			errs = append(errs, fmt.Errorf("%s:%d: the block is not closed", doc, f.Line))
			break
		}
		f.Code = code.String()
		fences = append(fences, f)
	}
	return fences, errors.Join(errs...)
}

// Source returns the text an example names ("PATH" or "PATH#REGION", PATH relative to
// root): the file's, or its region's with the region's common indentation removed.
func Source(root, example string) (string, error) {
	file, region, _ := strings.Cut(example, "#")
	if !filepath.IsLocal(filepath.FromSlash(file)) || path.Clean(file) != file {
		return "", fmt.Errorf("%s is not a clean path inside the repository", file)
	}
	text, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
	if err != nil {
		return "", fmt.Errorf("read the example: %w", err)
	}
	if region == "" {
		return string(text), nil
	}
	regions, err := Regions(string(text))
	if err != nil {
		return "", fmt.Errorf("%s: %w", file, err)
	}
	r, ok := regions[region]
	if !ok {
		return "", fmt.Errorf("%s has no region %q (no line \"// docs:begin %s\")", file, region, region)
	}
	return r, nil
}

// Regions returns the regions of a source file by name, each with its common
// indentation and its blank lines at either end removed, and without the marker lines
// of the regions inside it. It fails
// for a region begun twice, ended before it begins, or not ended.
func Regions(text string) (map[string]string, error) {
	lines := strings.SplitAfter(text, "\n")
	begun := map[string]int{} // the regions open, by name: the index of their first line
	regions := map[string]string{}
	var errs []error

	for i, l := range lines {
		m := regionMarker.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		name := m[2]
		switch _, open := begun[name]; {
		case m[1] == "begin" && open:
			errs = append(errs, fmt.Errorf("line %d: region %q begins again before it ends", i+1, name))
		case m[1] == "begin" && ended(regions, name):
			errs = append(errs, fmt.Errorf("line %d: region %q begins a second time", i+1, name))
		case m[1] == "begin":
			begun[name] = i + 1
		case !open:
			errs = append(errs, fmt.Errorf("line %d: region %q ends but has not begun", i+1, name))
		default:
			regions[name] = dedent(lines[begun[name]:i])
			delete(begun, name)
		}
	}
	for name, first := range begun {
		errs = append(errs, fmt.Errorf("line %d: region %q does not end (no line \"// docs:end %s\")", first, name, name))
	}
	return regions, errors.Join(errs...)
}

func ended(regions map[string]string, name string) bool {
	_, ok := regions[name]
	return ok
}

// dedent joins lines (each ending in "\n", but perhaps the last) without the marker
// lines of regions, without blank lines at either end, and without the indentation all
// the others share; a line of only white space becomes empty.
func dedent(lines []string) string {
	var kept []string
	for _, l := range lines {
		if !regionMarker.MatchString(strings.TrimSpace(l)) {
			kept = append(kept, strings.TrimSuffix(l, "\n"))
		}
	}
	prefix := ""
	first := true
	for _, l := range kept {
		if strings.TrimSpace(l) == "" {
			continue
		}
		indent := l[:len(l)-len(strings.TrimLeft(l, " \t"))]
		if first {
			prefix, first = indent, false
			continue
		}
		for !strings.HasPrefix(indent, prefix) {
			prefix = prefix[:len(prefix)-1]
		}
	}
	// gofmt puts a blank line between a declaration and the comment that ends its
	// region, so blank lines at either end are not the region's.
	for len(kept) > 0 && strings.TrimSpace(kept[0]) == "" {
		kept = kept[1:]
	}
	for len(kept) > 0 && strings.TrimSpace(kept[len(kept)-1]) == "" {
		kept = kept[:len(kept)-1]
	}
	var b strings.Builder
	for _, l := range kept {
		if strings.TrimSpace(l) != "" {
			b.WriteString(strings.TrimPrefix(l, prefix))
		}
		b.WriteString("\n")
	}
	return b.String()
}

// CheckExamples checks every block of the markdown file doc (relative to root) that
// names an example against the example's source, and returns how many it checked and
// one error for each block that differs from its source or whose source cannot be
// read, naming the block's line, the source and the first line that differs.
func CheckExamples(root, doc string) (int, []error) {
	text, err := os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		return 0, []error{err}
	}
	fences, err := Fences(doc, string(text))
	var errs []error
	if err != nil {
		errs = append(errs, err)
	}
	n := 0
	for _, f := range fences {
		if f.Example == "" {
			continue
		}
		n++
		src, err := Source(root, f.Example)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: the block shows %s: %w", doc, f.Line, f.Example, err))
			continue
		}
		if src != f.Code {
			errs = append(errs, fmt.Errorf("%s:%d: the block and %s differ: copy %s's text into the block, or the block's into it if the block is right (%s)",
				doc, f.Line, f.Example, f.Example, firstDifference(f.Code, src)))
		}
	}
	return n, errs
}

// firstDifference says where block and src first differ, by the block's line.
func firstDifference(block, src string) string {
	b, s := strings.SplitAfter(block, "\n"), strings.SplitAfter(src, "\n")
	for i := 0; i < len(b) || i < len(s); i++ {
		switch {
		case i >= len(b):
			return fmt.Sprintf("the source goes on after the block's last line: %q", s[i])
		case i >= len(s):
			return fmt.Sprintf("the block's line %d, %q, is past the source's end", i+1, b[i])
		case b[i] != s[i]:
			return fmt.Sprintf("the block's line %d is %q, the source's %q", i+1, b[i], s[i])
		}
	}
	return "they differ"
}

// Docs returns the markdown files whose blocks the tests check, relative to root:
// README.md and docs/*.md.
func Docs(root string) ([]string, error) {
	docs := []string{"README.md"}
	more, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	for _, m := range more {
		rel, err := filepath.Rel(root, m)
		if err != nil {
			return nil, err
		}
		docs = append(docs, filepath.ToSlash(rel))
	}
	return docs, nil
}
