// Package sdkmodules_test keeps the Go SDK's modules apart from the server's: the
// function side (functions), the typed client (client), the wire types (protocol) and
// the identity and permissions they share (access) are modules of their own, nested in
// this repository at the directories of their import paths, so that `go get` of the SDK
// resolves only what the SDK uses, not the server's River, pgx, Prometheus, chromedp and
// code generators. The tests fail when an SDK module requires or imports the server's
// module, gains a requirement that is not on the allow list below, or when the modules'
// wiring (the requires and replaces that build them from this tree at the release's
// version) is broken.
package sdkmodules_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/mod/modfile"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/internal/helpers/version"
	"github.com/stepgate/stepgate/internal/tooling/repo"
)

const root = "github.com/stepgate/stepgate"

// sdk is the SDK's modules, by directory under the repository's root (their module
// path is root + "/" + the directory), each with the SDK modules it may require.
var sdk = map[string][]string{
	"access":    nil,
	"protocol":  {"access"},
	"client":    nil,
	"functions": {"access", "client", "protocol"},
}

// allowed is every module but the SDK's own that an SDK module's go.mod may require
// (directly or indirect), with why. A new one is a new dependency of every user of
// the SDK: add it here with its reason, in the same change.
var allowed = map[string]string{
	// What the SDK's packages import.
	"github.com/oapi-codegen/runtime":    "protocol: the generated wire types and HTTP client",
	"github.com/apapsch/go-jsonmerge/v2": "protocol: oapi-codegen's runtime (its union types)",
	"github.com/google/uuid":             "protocol: the generated types' uuid fields; names",
	"go.opentelemetry.io/otel":           "functions: the trace context (W3C traceparent) of an invocation, propagated to its steps",
	"go.opentelemetry.io/otel/trace":     "functions: the trace context's span context",
	"github.com/cespare/xxhash/v2":       "otel's attribute hashing",
	// Only the SDK's own tests import these; a user's build never compiles them.
	"github.com/stretchr/testify":   "tests",
	"go.uber.org/goleak":            "tests: no goroutine outlives a test",
	"gopkg.in/yaml.v3":              "protocol's tests: they read openapi.yaml",
	"go.yaml.in/yaml/v3":            "testify's YAML assertions",
	"github.com/davecgh/go-spew":    "testify",
	"github.com/pmezard/go-difflib": "testify",
}

// server is the outside modules that only the server uses, which the allow list must
// never take in; a check of the check.
var server = []string{
	"github.com/riverqueue/", "riverqueue.com/", "github.com/jackc/", "github.com/prometheus/",
	"github.com/chromedp/", "github.com/labstack/echo", "github.com/oapi-codegen/oapi-codegen",
	"github.com/sqlc-dev/", "honnef.co/go/tools",
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := repo.Root()
	require.NoError(t, err)
	return dir
}

func parseGoMod(t *testing.T, file string) *modfile.File {
	t.Helper()
	data, err := os.ReadFile(file)
	require.NoError(t, err)
	f, err := modfile.Parse(file, data, nil)
	require.NoError(t, err)
	return f
}

// TestAllowListHasNoServerModule: the allow list takes in none of what the server uses.
func TestAllowListHasNoServerModule(t *testing.T) {
	t.Parallel()
	for mod := range allowed {
		for _, s := range server {
			assert.Falsef(t, strings.HasPrefix(mod, s), "the allow list takes in %s, a server dependency", mod)
		}
	}
}

// TestGoMod: each SDK module's go.mod is the module of its directory, requires nothing of
// the server's module and nothing outside the SDK but what the allow list has, requires
// the SDK's other modules at the release's version (internal/helpers/version) and
// builds them from this tree (replace ../dir); and the server's go.mod requires and
// replaces every SDK module likewise.
func TestGoMod(t *testing.T) {
	t.Parallel()
	dir := repoRoot(t)
	want := "v" + version.Version
	for m, may := range sdk {
		t.Run(m, func(t *testing.T) {
			t.Parallel()
			f := parseGoMod(t, filepath.Join(dir, m, "go.mod"))
			require.Equal(t, root+"/"+m, f.Module.Mod.Path, "%s/go.mod is the module of its directory", m)
			for _, r := range f.Require {
				p := r.Mod.Path
				if own, ok := strings.CutPrefix(p, root+"/"); ok {
					assert.Truef(t, slices.Contains(may, own), "%s/go.mod requires %s: an SDK module may require only the SDK's modules %v", m, p, may)
					assert.Equalf(t, want, r.Mod.Version, "%s/go.mod requires %s at the release's version (internal/helpers/version)", m, p)
					continue
				}
				assert.NotEqualf(t, root, p, "%s/go.mod requires the server's module %s", m, root)
				_, ok := allowed[p]
				assert.Truef(t, ok, "%s/go.mod requires %s, which is not on the SDK's allow list (internal/tooling/sdkmodules): "+
					"every user of the SDK would get it; drop it, or add it to the list with why", m, p)
			}
			for _, r := range f.Replace {
				own, ok := strings.CutPrefix(r.Old.Path, root+"/")
				assert.Truef(t, ok && slices.Contains(may, own) && r.New.Path == "../"+own && r.New.Version == "",
					"%s/go.mod: replace %s => %s %s: only the SDK's modules, by their directory", m, r.Old.Path, r.New.Path, r.New.Version)
			}
			assert.Empty(t, f.Exclude, "%s/go.mod has no exclude", m)
		})
	}

	f := parseGoMod(t, filepath.Join(dir, "go.mod"))
	required := map[string]string{}
	for _, r := range f.Require {
		required[r.Mod.Path] = r.Mod.Version
	}
	replaced := map[string]string{}
	for _, r := range f.Replace {
		replaced[r.Old.Path] = r.New.Path
	}
	for m := range sdk {
		assert.Equalf(t, want, required[root+"/"+m], "go.mod requires %s/%s at the release's version", root, m)
		assert.Equalf(t, "./"+m, replaced[root+"/"+m], "go.mod builds %s/%s from ./%s", root, m, m)
	}
	for old := range replaced {
		own, _ := strings.CutPrefix(old, root+"/")
		_, ok := sdk[own]
		assert.Truef(t, ok, "go.mod replaces %s: only the SDK's modules are replaced (go install …@version refuses a module with other replace directives)", old)
	}
}

// pkg is what `go list -json` says of a package that this test reads.
type pkg struct {
	ImportPath string
	Standard   bool
	Module     *struct{ Path string }
}

// TestImports: the packages that each SDK module's packages and their tests import,
// directly or not, are the standard library's, the SDK's, or of an allowed module; none
// is the server's.
func TestImports(t *testing.T) {
	t.Parallel()
	dir := repoRoot(t)
	for m := range sdk {
		t.Run(m, func(t *testing.T) {
			t.Parallel()
			cmd := exec.CommandContext(t.Context(), "go", "list", "-e", "-deps", "-test", "-json=ImportPath,Standard,Module", "./...")
			cmd.Dir = filepath.Join(dir, m)
			cmd.Env = append(os.Environ(), "GOFLAGS=-mod=readonly", "GOWORK=off")
			out, err := cmd.Output()
			if ee, ok := err.(*exec.ExitError); ok {
				t.Fatalf("go list in %s: %v\n%s", m, err, ee.Stderr)
			}
			require.NoError(t, err)
			dec := json.NewDecoder(strings.NewReader(string(out)))
			n := 0
			for dec.More() {
				var p pkg
				require.NoError(t, dec.Decode(&p))
				n++
				if p.Standard || p.Module == nil {
					continue
				}
				mod := p.Module.Path
				if own, ok := strings.CutPrefix(mod, root+"/"); ok {
					_, sdkMod := sdk[own]
					assert.Truef(t, sdkMod, "%s imports %s, of %s, which is not an SDK module", m, p.ImportPath, mod)
					continue
				}
				assert.NotEqualf(t, root, mod, "the SDK module %s imports %s, of the server's module", m, p.ImportPath)
				_, ok := allowed[mod]
				assert.Truef(t, ok, "the SDK module %s imports %s, of %s, which is not on the allow list", m, p.ImportPath, mod)
			}
			require.Positive(t, n, "go list listed %s's packages", m)
		})
	}
}

// TestManifestSaysTheReleaseVersion: the Go SDK's manifest names it stepgate-go/ and the
// release's version; the SDK's module, which cannot import internal/helpers/version,
// keeps that string as a constant (functions.go's sdkName) that this test holds to it.
func TestManifestSaysTheReleaseVersion(t *testing.T) {
	t.Parallel()
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	functions.Register(app, "hello", func(ctx context.Context, _ struct{}) (string, error) { return "hi", nil })
	srv := httptest.NewServer(app)
	t.Cleanup(srv.Close)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL+"/", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var m struct {
		SDK string `json:"sdk"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
	require.Equal(t, "stepgate-go/"+version.Version, m.SDK,
		"the SDK's manifest names the release's version: change sdkName in functions/functions.go and SDK in functions/internal/gatewaytest/sdk.go with internal/helpers/version")
}
