// The tests are in package main: a command cannot be imported by an external test.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"gopkg.in/yaml.v3"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	specFile  = "../../../openapi.yaml"
	docsDir   = "../../../docs"
	apiPage   = "api.md"
	protoPage = "protocol-reference.md"
)

// TestDocsAreCurrent checks that the committed pages are what the generator makes
// of the committed openapi.yaml.
func TestDocsAreCurrent(t *testing.T) {
	t.Parallel()
	gen := generated(t)
	for _, name := range []string{apiPage, protoPage} {
		committed, err := os.ReadFile(filepath.Join(docsDir, name))
		require.NoError(t, err)
		if string(committed) != gen[name] {
			t.Errorf("docs/%s is not what openapi.yaml generates (%s): run `go generate ./internal/tooling/apidoc`",
				name, firstDifference(string(committed), gen[name]))
		}
	}
}

// TestEveryOperationIsDocumented checks that each operation of openapi.yaml has its
// section, with its operationId, in the page it belongs to: the protocol reference for
// the protocol's operations, the API reference for the others.
func TestEveryOperationIsDocumented(t *testing.T) {
	t.Parallel()
	ops := specOperations(t)
	require.NotEmpty(t, ops)
	forEachVersion(t, func(t *testing.T, pages map[string]string) {
		for _, op := range ops {
			page := apiPage
			if op.tag == protocolTag {
				page = protoPage
			}
			sec, ok := operationSection(pages[page], op.method, op.path)
			if !ok {
				t.Errorf("%s: no section %q for %s", page, "### "+op.method+" "+op.path, op.id)
				continue
			}
			if !strings.Contains(sec, "- Operation: `"+op.id+"`\n") {
				t.Errorf("%s: the section of %s %s does not name its operationId %s", page, op.method, op.path, op.id)
			}
		}
	})
}

// TestEveryPermissionIsShown checks that each operation's section states the
// permission (x-permission) it needs.
func TestEveryPermissionIsShown(t *testing.T) {
	t.Parallel()
	ops := specOperations(t)
	withPermission := 0
	forEachVersion(t, func(t *testing.T, pages map[string]string) {
		for _, op := range ops {
			if op.permission == "" {
				continue
			}
			withPermission++
			page := apiPage
			if op.tag == protocolTag {
				page = protoPage
			}
			sec, _ := operationSection(pages[page], op.method, op.path)
			if !strings.Contains(sec, "- Permission: `"+op.permission+"`\n") {
				t.Errorf("%s: the section of %s %s does not show its permission %s", page, op.method, op.path, op.permission)
			}
		}
	})
	require.NotZero(t, withPermission, "no operation of openapi.yaml has an x-permission: is the test reading it?")
}

// TestLinksResolve checks that every link to a section (a schema, an operation) finds
// its heading, in the same page or the other, that no two headings of a page share an
// anchor, that links to files find them, and that every component schema and header
// has a section in one page.
func TestLinksResolve(t *testing.T) {
	t.Parallel()
	components := specMap(t)["components"].(map[string]any)
	var sections []string // of schemas and headers
	for _, kind := range []string{"schemas", "headers"} {
		m, _ := components[kind].(map[string]any)
		for name := range m {
			sections = append(sections, name)
		}
	}
	require.NotEmpty(t, sections)
	link := regexp.MustCompile(`\]\(([^)\s]*)\)`)
	forEachVersion(t, func(t *testing.T, pages map[string]string) {
		anchors := map[string]map[string]bool{}
		for name, text := range pages {
			anchors[name] = map[string]bool{}
			for _, h := range headings(text) {
				a := slug(h)
				if anchors[name][a] {
					t.Errorf("%s: two headings have the anchor #%s (the second %q): GitHub suffixes the second", name, a, h)
				}
				anchors[name][a] = true
			}
		}
		for name, text := range pages {
			links := 0
			for _, m := range link.FindAllStringSubmatch(text, -1) {
				target := m[1]
				file, anchor, _ := strings.Cut(target, "#")
				switch {
				case (file == apiPage || file == protoPage) && anchor == "":
				case file == "" || file == apiPage || file == protoPage:
					page := cmpOrString(file, name)
					if !anchors[page][anchor] {
						t.Errorf("%s: the link %s finds no heading in %s", name, target, page)
					}
					links++
				case strings.Contains(file, "://"):
				default:
					if _, err := os.Stat(filepath.Join(docsDir, file)); err != nil {
						t.Errorf("%s: the link %s finds no file: %v", name, target, err)
					}
				}
			}
			require.NotZero(t, links, "%s has no link to a section", name)
		}
		for _, s := range sections {
			if !anchors[apiPage][slug(s)] && !anchors[protoPage][slug(s)] {
				t.Errorf("the component %s has a section in neither page", s)
			}
		}
	})
}

// TestSlug checks anchors against those GitHub makes of such headings.
func TestSlug(t *testing.T) {
	t.Parallel()
	for heading, want := range map[string]string{
		"GET /v1/functions/{name}":                    "get-v1functionsname",
		"POST /v1/signing-keys/rotate":                "post-v1signing-keysrotate",
		"POST /v1/functions/{name}/runs/with-message": "post-v1functionsnamerunswith-message",
		"POST `<function url>`":                       "post-function-url",
		"Operations: runs":                            "operations-runs",
		"Rate limits and Retry-After":                 "rate-limits-and-retry-after",
		"InvocationRequest":                           "invocationrequest",
		"snake_case stays":                            "snake_case-stays",
		"The function protocol":                       "the-function-protocol",
	} {
		require.Equal(t, want, slug(heading), "slug(%q)", heading)
	}
}

// generated renders the pages from the committed openapi.yaml.
func generated(t *testing.T) map[string]string {
	t.Helper()
	api, proto, err := render(specFile, docsDir, apiPage, protoPage)
	require.NoError(t, err)
	return map[string]string{apiPage: api, protoPage: proto}
}

// forEachVersion runs check on the committed pages and on freshly generated ones, so
// that a check fails on a hand edit of a page as well as on a generator change.
func forEachVersion(t *testing.T, check func(t *testing.T, pages map[string]string)) {
	t.Helper()
	committed := map[string]string{}
	for _, name := range []string{apiPage, protoPage} {
		b, err := os.ReadFile(filepath.Join(docsDir, name))
		require.NoError(t, err)
		committed[name] = string(b)
	}
	t.Run("Committed", func(t *testing.T) { check(t, committed) })
	t.Run("Generated", func(t *testing.T) { check(t, generated(t)) })
}

type specOp struct {
	method, path, id, tag, permission string
}

// specMap reads openapi.yaml as plain maps, independently of the generator's reading.
func specMap(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile(specFile)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, yaml.Unmarshal(b, &m))
	return m
}

func specOperations(t *testing.T) []specOp {
	t.Helper()
	var ops []specOp
	for path, item := range specMap(t)["paths"].(map[string]any) {
		for method, v := range item.(map[string]any) {
			op, ok := v.(map[string]any)
			if !ok || !methods[method] {
				continue
			}
			o := specOp{method: strings.ToUpper(method), path: path}
			o.id, _ = op["operationId"].(string)
			o.permission, _ = op["x-permission"].(string)
			if tags, _ := op["tags"].([]any); len(tags) > 0 {
				o.tag, _ = tags[0].(string)
			}
			require.NotEmpty(t, o.id, "%s %s has no operationId", o.method, path)
			ops = append(ops, o)
		}
	}
	return ops
}

// operationSection returns the text of an operation's section: from its heading to
// the next heading of its level or above.
func operationSection(page, method, path string) (string, bool) {
	_, rest, ok := strings.Cut(page, "\n### "+method+" "+path+"\n")
	if !ok {
		return "", false
	}
	for _, end := range []string{"\n### ", "\n## "} {
		if i := strings.Index(rest, end); i >= 0 {
			rest = rest[:i]
		}
	}
	return rest, true
}

// headings returns the text of a page's ATX headings, outside fenced code blocks.
func headings(page string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced {
			continue
		}
		if m := regexp.MustCompile(`^#{1,6} (.+)$`).FindStringSubmatch(line); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

func firstDifference(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y string
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if x != y || i >= len(al) || i >= len(bl) {
			return fmt.Sprintf("line %d is %q, generated %q", i+1, x, y)
		}
	}
	return "no line differs"
}

func cmpOrString(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestPropertyNamesAreIdentifiers checks that every schema property of openapi.yaml is
// named as a field can be, and that a property made by an unquoted comma in a flow
// mapping (as TenantUsage.runs' description once made one) is refused, by name.
func TestPropertyNamesAreIdentifiers(t *testing.T) {
	t.Parallel()
	var doc yaml.Node
	data, err := os.ReadFile(specFile)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(data, &doc))
	require.NoError(t, checkPropertyNames(doc.Content[0]))

	const broken = `
components:
  schemas:
    TenantUsage:
      type: object
      properties:
        tenant: { type: string }
        runs: { type: integer, format: int64, description: Runs stored, not yet deleted by retention. }
      example: { "any name": 1 }
`
	dir := t.TempDir()
	path := filepath.Join(dir, "openapi.yaml")
	require.NoError(t, os.WriteFile(path, []byte(broken), 0o644))
	_, err = loadSpec(path)
	require.Error(t, err)
	require.Contains(t, err.Error(),
		`line 8: #/components/schemas/TenantUsage/properties/runs: "not yet deleted by retention." is not a schema keyword`)
	require.NotContains(t, err.Error(), "any name")

	const spaced = `
paths:
  /v1/usage:
    get:
      responses:
        "200":
          content:
            application/json:
              schema:
                properties:
                  run.count: { type: integer }
`
	require.NoError(t, os.WriteFile(path, []byte(spaced), 0o644))
	_, err = loadSpec(path)
	require.Error(t, err)
	require.Contains(t, err.Error(),
		`line 11: #/paths//v1/usage/get/responses/200/content/application/json/schema/properties: property "run.count" is not an identifier`)
}
