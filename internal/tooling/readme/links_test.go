package readme

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// checkLinks fails t for every relative link of the markdown files (paths relative to
// root) that does not resolve: `[text](path)`, `![alt](path)`, `[text](path#anchor)`,
// `[text](#anchor)` and reference definitions `[ref]: path`. A path is taken from the
// linking file's directory (from root when it starts with "/") and must name a file or
// directory inside root. An anchor into a .md file (or the file itself) must be one of its
// headings' anchors, computed by GitHub's rules (see [anchorOf]), or an explicit
// `<a id="…">` or `<a name="…">`; an anchor into any other file is not checked. A link
// to its own page with no anchor is broken (it goes nowhere). Links in
// fenced or indented code blocks and in code spans are skipped, and so are absolute URLs
// (any scheme, or "//host").
func checkLinks(t testing.TB, root string, files []string) {
	t.Helper()
	broken, err := brokenLinks(root, files)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range broken {
		t.Errorf("%s", b)
	}
}

// brokenLinks returns one line per link of files (relative to root) that does not
// resolve, as "file:line: link …: why", in the files' order. The error is for a file it
// cannot read.
func brokenLinks(root string, files []string) ([]string, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	anchors := map[string]map[string]bool{} // absolute path of a .md file -> its anchors
	anchorsOf := func(path string) (map[string]bool, error) {
		if a, ok := anchors[path]; ok {
			return a, nil
		}
		text, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		a := parseMarkdown(string(text)).anchors
		anchors[path] = a
		return a, nil
	}
	var broken []string
	for _, f := range files {
		path := filepath.Join(root, f)
		text, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		for _, l := range parseMarkdown(string(text)).links {
			if why := checkLink(root, path, l.dest, anchorsOf); why != "" {
				broken = append(broken, fmt.Sprintf("%s:%d: link %q: %s", f, l.line, l.dest, why))
			}
		}
	}
	return broken, nil
}

// absoluteURL matches a destination with a scheme (https:, mailto:) or a host (//host).
var absoluteURL = regexp.MustCompile(`^([a-zA-Z][a-zA-Z0-9+.-]*:|//)`)

// checkLink says why the link dest in the markdown file at path does not resolve, or ""
// when it does (or is not relative).
func checkLink(root, path, dest string, anchorsOf func(string) (map[string]bool, error)) string {
	if dest == "" {
		return "empty destination"
	}
	if absoluteURL.MatchString(dest) {
		return ""
	}
	target, fragment, hasFragment := strings.Cut(dest, "#")
	if i := strings.IndexByte(target, '?'); i >= 0 {
		target = target[:i]
	}
	target, err := url.PathUnescape(target)
	if err != nil {
		return "bad escape in its path"
	}
	resolved := path
	if target != "" {
		if strings.HasPrefix(target, "/") {
			resolved = filepath.Join(root, filepath.FromSlash(target))
		} else {
			resolved = filepath.Join(filepath.Dir(path), filepath.FromSlash(target))
		}
		if rel, err := filepath.Rel(root, resolved); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return "outside the repository"
		}
		if _, err := os.Stat(resolved); err != nil {
			return "no such file"
		}
		if resolved == path && !hasFragment {
			return "it links to its own page: link a heading of it (#anchor), or another page"
		}
	}
	if !hasFragment || !strings.EqualFold(filepath.Ext(resolved), ".md") {
		return ""
	}
	anchor, err := url.PathUnescape(fragment)
	if err != nil {
		return "bad escape in its anchor"
	}
	anchors, err := anchorsOf(resolved)
	if err != nil {
		return err.Error()
	}
	if !anchors[anchor] {
		return fmt.Sprintf("no heading or <a id> with the anchor %q in %s", anchor, filepath.Base(resolved))
	}
	return ""
}

// link is a link's destination and the line it is on (1-based).
type link struct {
	dest string
	line int
}

// markdown is what checkLinks reads of a markdown file.
type markdown struct {
	links   []link
	anchors map[string]bool // its headings' anchors and its explicit <a id>/<a name>
}

var (
	fence          = regexp.MustCompile("^[ \t]*(`{3,}|~{3,})")
	htmlComment    = regexp.MustCompile(`<!--.*?-->`)
	atxHeading     = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	setextLine     = regexp.MustCompile(`^ {0,3}(?:=+|-+)[ \t]*$`)
	listItem       = regexp.MustCompile(`^ {0,3}(?:[-*+]|\d{1,9}[.)])(?:[ \t]|$)`)
	refDefinition  = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:[ \t]*(<[^>]*>|\S+)`)
	explicitAnchor = regexp.MustCompile(`(?i)<a\s[^>]*?\b(?:id|name)\s*=\s*(?:"([^"]*)"|'([^']*)')`)
)

// parseMarkdown reads the links and anchors of a markdown text, outside code blocks and
// code spans.
func parseMarkdown(text string) markdown {
	md := markdown{anchors: map[string]bool{}}
	slugs := slugger{}
	lines := strings.Split(text, "\n")
	var (
		fenceMark  string // the opening fence while inside a fenced block
		inComment  bool   // inside an HTML comment that spans lines
		inList     bool   // the last block was a list item, so indented lines continue it
		prevBlank  = true
		prevIndent bool // the previous line was in an indented code block
		paragraph  string
	)
	for i, raw := range lines {
		line := strings.TrimRight(raw, "\r")
		n := i + 1
		if inComment {
			end := strings.Index(line, "-->")
			if end < 0 {
				continue
			}
			inComment, line = false, strings.Repeat(" ", end+3)+line[end+3:]
		}
		if fenceMark != "" {
			if m := fence.FindStringSubmatch(line); m != nil && m[1][0] == fenceMark[0] && len(m[1]) >= len(fenceMark) && strings.TrimSpace(line[len(m[0]):]) == "" {
				fenceMark = ""
			}
			continue
		}
		if m := fence.FindStringSubmatch(line); m != nil {
			fenceMark, paragraph, prevBlank = m[1], "", false
			continue
		}
		line = htmlComment.ReplaceAllStringFunc(line, func(c string) string { return strings.Repeat(" ", len(c)) })
		if start := strings.Index(line, "<!--"); start >= 0 {
			inComment, line = true, line[:start]
		}
		blank := strings.TrimSpace(line) == ""
		indented := strings.HasPrefix(line, "    ") || strings.HasPrefix(line, "\t")
		if !blank && indented && !inList && (prevBlank || prevIndent) && paragraph == "" {
			prevIndent, prevBlank = true, false
			continue
		}
		prevIndent = false
		if blank {
			prevBlank, paragraph = true, ""
			continue
		}
		if !indented {
			inList = listItem.MatchString(line)
		}
		if m := atxHeading.FindStringSubmatch(line); m != nil {
			md.anchors[slugs.slug(m[1])] = true
			paragraph = ""
		} else if setextLine.MatchString(line) && paragraph != "" {
			md.anchors[slugs.slug(paragraph)] = true
			paragraph = ""
		} else if !listItem.MatchString(line) && !strings.HasPrefix(strings.TrimSpace(line), "|") && !inList {
			paragraph = strings.TrimSpace(paragraph + " " + strings.TrimSpace(line))
		} else {
			paragraph = ""
		}
		prevBlank = false
		code := stripCodeSpans(line)
		for _, m := range explicitAnchor.FindAllStringSubmatch(code, -1) {
			md.anchors[m[1]+m[2]] = true
		}
		if m := refDefinition.FindStringSubmatch(code); m != nil {
			md.links = append(md.links, link{dest: strings.Trim(m[1], "<>"), line: n})
			continue
		}
		for _, dest := range inlineLinks(code) {
			md.links = append(md.links, link{dest: dest, line: n})
		}
	}
	return md
}

// stripCodeSpans blanks the code spans of a line (`…`, “…”), so that what they hold
// is not read as links or anchors.
func stripCodeSpans(line string) string {
	var b strings.Builder
	for i := 0; i < len(line); {
		if line[i] != '`' {
			b.WriteByte(line[i])
			i++
			continue
		}
		run := 1
		for i+run < len(line) && line[i+run] == '`' {
			run++
		}
		ticks := line[i : i+run]
		end := strings.Index(line[i+run:], ticks)
		if end < 0 { // no closing run: literal backticks
			b.WriteString(ticks)
			i += run
			continue
		}
		b.WriteString(strings.Repeat(" ", run+end+run))
		i += run + end + run
	}
	return b.String()
}

// inlineLinks returns the destinations of the inline links and images of a line, each
// `](dest)` or `](dest "title")` or `](<dest>)`, with parentheses in dest balanced.
func inlineLinks(line string) []string {
	var dests []string
	for i := 0; ; {
		j := strings.Index(line[i:], "](")
		if j < 0 {
			return dests
		}
		start := i + j + 2
		rest := strings.TrimLeft(line[start:], " \t")
		if strings.HasPrefix(rest, "<") {
			if k := strings.IndexByte(rest, '>'); k >= 0 {
				dests = append(dests, rest[1:k])
			}
			i = start
			continue
		}
		depth, k := 0, 0
	scan:
		for ; k < len(rest); k++ {
			switch rest[k] {
			case '(':
				depth++
			case ')':
				if depth == 0 {
					break scan
				}
				depth--
			case ' ', '\t':
				break scan
			}
		}
		if k < len(rest) { // an unclosed "](" is not a link
			dests = append(dests, rest[:k])
		}
		i = start
	}
}

func TestAnchorOf(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"Traces (issue 14): their cost, off and on":                                    "traces-issue-14-their-cost-off-and-on",
		"A fresh full `stepgate bench` (issue 29), 2026-12-04 18:40, commit `1633c7e`": "a-fresh-full-stepgate-bench-issue-29-2026-12-04-1840-commit-1633c7e",
		"Concurrency limits, striped (issue 12): 0.31× → 0.76×, 0.46× → 0.80×":         "concurrency-limits-striped-issue-12-031--076-046--080",
		"Deadlines on time (issue 23, item 2): p99 0.46–2.34 s → 6–21 ms":              "deadlines-on-time-issue-23-item-2-p99-046234-s--621-ms",
		"The garbage collector's target (issue 13, move 6): 1.01× to 1.10×":            "the-garbage-collectors-target-issue-13-move-6-101-to-110",
		"snake_case and _emphasis_ and **bold**":                                       "snake_case-and-emphasis-and-bold",
		"See [the page](other.md) <em>now</em>":                                        "see-the-page-now",
		"Café déjà vu":                                                                 "café-déjà-vu",
	} {
		require.Equal(t, want, Anchor(heading), "heading %q", heading)
	}
}

// recorder is a testing.TB that keeps the errors reported to it.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestCheckLinks runs the checker on a fixture with good links and broken ones: it must
// report each broken link and anchor, and nothing else.
func TestCheckLinks(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	write := func(name, text string) {
		path := filepath.Join(root, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
	}
	write("sub/other.md", strings.Join([]string{
		"# Other",
		"",
		"## Fair share (issue 12): 0.31× → 0.76×",
		"",
		"## Setup",
		"",
		"## Setup",
		"",
		"Below",
		"-----",
		"",
		`<a id="kept"></a>`,
		`<a name='named'></a>`,
		"",
		"```sh",
		"# not a heading",
		"```",
		"",
		"[up](../page.md#page)",
	}, "\n"))
	write("sub/data.txt", "x\n")
	write("img.png", "x")
	write("page.md", strings.Join([]string{
		"# Page", // 1
		"",       // 2
		"Good: [a](sub/other.md), [b](sub/other.md#fair-share-issue-12-031--076), [c](sub/other.md#setup-1)",              // 3
		"and [d](#page), [e](sub/), [f](sub/data.txt#L3), ![g](img.png), [h](sub/other.md#kept), [i](sub/other.md#named)", // 4
		"and [j](/sub/other.md#below), [k](sub/other.md \"title\"), [l](<sub/other.md>), [m](#not-a-heading-x)",           // 5
		"and [n](https://example.com/missing.md), [o](mailto:a@example.com), [p](//example.com/x), `[q](nope.md)`",        // 6
		"",                                 // 7
		"```",                              // 8
		"[r](in-a-fence.md)",               // 9
		"```",                              // 10
		"",                                 // 11
		"    [s](in-an-indented-block.md)", // 12
		"",                                 // 13
		"Broken: [t](missing.md), [u](sub/other.md#setup-2), [v](#nope), [w](../outside.md)",          // 14
		"and [x](sub/other.md#not-a-heading), ![y](missing.png), [self](page.md), [ok](page.md#page)", // 15
		"",                    // 16
		"[ref]: sub/gone.md",  // 17
		"",                    // 18
		"## Not a heading x",  // 19
		"",                    // 20
		"<!-- a comment",      // 21
		"handlers[name](ctx)", // 22
		"-->",                 // 23
		"<!-- [z](in-a-comment.md) --> [ok](page.md)", // 24
	}, "\n"))

	broken, err := brokenLinks(root, []string{"page.md", "sub/other.md"})
	require.NoError(t, err)
	require.Equal(t, []string{
		`page.md:14: link "missing.md": no such file`,
		`page.md:14: link "sub/other.md#setup-2": no heading or <a id> with the anchor "setup-2" in other.md`,
		`page.md:14: link "#nope": no heading or <a id> with the anchor "nope" in page.md`,
		`page.md:14: link "../outside.md": outside the repository`,
		`page.md:15: link "sub/other.md#not-a-heading": no heading or <a id> with the anchor "not-a-heading" in other.md`,
		`page.md:15: link "missing.png": no such file`,
		`page.md:15: link "page.md": it links to its own page: link a heading of it (#anchor), or another page`,
		`page.md:17: link "sub/gone.md": no such file`,
	}, broken)

	r := &recorder{TB: t}
	checkLinks(r, root, []string{"page.md"})
	require.Len(t, r.errs, 8, "checkLinks reports each broken link as an error")
}
