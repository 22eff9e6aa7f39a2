package layering_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/stepgate/stepgate/"

// Outside parts that belong to one layer, by import path prefix.
const (
	river = "river" // github.com/riverqueue/…, riverqueue.com/…: jobs are the invoker's
	pgx   = "pgx"   // github.com/jackc/…: the database driver
)

// row is what the packages matching pkg ("a/b", or "a/..." for a/ and everything under
// it) may import of the module (patterns alike; "*" for anything) and of the layered
// outside parts.
type row struct {
	pkg   string
	may   []string
	parts []string
}

// beside is what the journal's packages of one job each may import: the journal, its
// statements and its leaf.
var beside = []string{"journal", "journal/internal/dbsqlc", "journal/storable", "access"}

// The SDK's side of the arrow: what function authors import.
var sdk = []string{"functions/...", "client", "protocol/..."}

// table is the module's layering, the first matching row deciding. The arrows point one
// way: protocol and access at the bottom; the journal (the database) above them; the
// invoker (the run service, River) above the journal; the gateway (HTTP) above the
// invoker; the process wiring (internal/wiring/gatewayproc, cmd) on top. The SDK (functions/)
// and the client share only protocol/ with the server, and no server package depends on
// them, directly or not. Only the invoker and migrations use River; the gateway reaches
// the database through the journal's reads and a pool it is handed.
var table = []row{
	// The conformance suite for waits: its scenarios and their checks import only the
	// protocol, so that the SDK's harness may run them; internal/sdke2e/gatewayrun holds
	// only the tests that run them against a whole gateway (internal/wiring/stack).
	{pkg: "protocol/conformance", may: []string{"protocol"}},
	{pkg: "protocol/...", may: []string{"protocol/...", "access"}},
	{pkg: "access"},
	// The journal: journal itself imports its leaf, storable, and none of the packages of
	// one job each beside it, which build on its types (DB, Identity, its errors) and its
	// statements (internal/dbsqlc).
	{pkg: "journal/storable", parts: []string{pgx}},
	{pkg: "journal", may: []string{"journal/internal/...", "journal/storable", "access"}, parts: []string{pgx}},
	{pkg: "journal/internal/...", may: []string{"journal/internal/...", "access"}, parts: []string{pgx}},
	{pkg: "journal/operation", may: beside, parts: []string{pgx}},
	{pkg: "journal/schedule", may: beside, parts: []string{pgx}},
	{pkg: "journal/appcheck", may: beside, parts: []string{pgx}},
	{pkg: "journal/keyring", may: beside, parts: []string{pgx}},
	{pkg: "journal/series", may: beside, parts: []string{pgx}},
	{pkg: "journal/retention", may: beside, parts: []string{pgx}},
	{pkg: "journal/failure", may: beside, parts: []string{pgx}},
	{pkg: "journal/stats", may: beside, parts: []string{pgx}},
	{pkg: "journal/output", may: beside, parts: []string{pgx}},
	{pkg: "journal/flow", may: beside, parts: []string{pgx}},
	{pkg: "journal/usage", may: beside, parts: []string{pgx}},
	{pkg: "journal/runevents", may: beside, parts: []string{pgx}},
	{pkg: "journal/canceltree", may: beside, parts: []string{pgx}},
	{pkg: "journal/request", may: beside, parts: []string{pgx}},
	{pkg: "auth", may: []string{"access", "journal", "journal/keyring", "protocol/..."}},
	{pkg: "migrations/...", may: []string{"migrations/...", "internal/wiring/pgserver"}, parts: []string{pgx, river}},

	// internal/helpers: runtime helpers of one job each, linked into the gateway, that know
	// nothing of runs (notify reads the journal's channel names) and import no other
	// internal folder.
	{pkg: "internal/helpers/notify", may: []string{"journal", "journal/output", "journal/runevents"}, parts: []string{pgx}},
	{pkg: "internal/helpers/metrics", parts: []string{pgx}},
	{pkg: "internal/helpers/readpool", parts: []string{pgx}},
	{pkg: "internal/helpers/...", may: []string{"internal/helpers/..."}},

	// The run service.
	{pkg: "invoker/internal/call", may: []string{"internal/helpers/egress", "journal", "protocol/..."}},
	{pkg: "invoker/internal/maintenance", may: []string{"invoker/internal/clock", "journal/..."}, parts: []string{pgx, river}},
	{pkg: "invoker/internal/...", may: []string{}},
	{pkg: "invoker", may: []string{"invoker/internal/...", "journal/...", "protocol/...", "auth",
		"internal/helpers/egress", "internal/helpers/metrics", "internal/helpers/notify", "internal/helpers/redact", "internal/helpers/tracing"}, parts: []string{pgx, river}},

	// HTTP.
	{pkg: "gateway/api/...", may: []string{"protocol"}},
	{pkg: "gateway", may: []string{"gateway/api/server", "invoker", "journal/...", "migrations", "access", "auth", "protocol/...",
		"internal/helpers/egress", "internal/helpers/memlimit", "internal/helpers/notify", "internal/helpers/readpool", "internal/helpers/redact", "internal/helpers/tracing"}, parts: []string{pgx}},
	{pkg: "web"},

	// The SDK, its client, and function authors' programs.
	{pkg: "client"},
	{pkg: "functions/...", may: sdk},
	{pkg: "examples/internal/programtest", may: []string{"internal/tooling/repo"}},
	{pkg: "examples/...", may: sdk},

	// internal/wiring: process wiring — a gateway process, a private Postgres, a whole
	// stack for tests — which may serve the examples (built with the SDK) beside the
	// gateway; and the commands on top.
	{pkg: "internal/wiring/gatewayproc", may: []string{"gateway", "invoker", "journal/...", "migrations", "auth", "internal/helpers/..."}, parts: []string{pgx}},
	{pkg: "internal/wiring/pgserver", parts: []string{pgx}},
	{pkg: "internal/wiring/pgtest", may: []string{"internal/wiring/pgserver", "migrations"}, parts: []string{pgx}},
	{pkg: "internal/wiring/stack", may: []string{"*"}, parts: []string{pgx}},
	// The SDK's tests that need a whole gateway, outside the SDK's modules (which do not
	// import the server, not even in tests): test files only.
	{pkg: "internal/sdke2e/..."},
	{pkg: "cmd/...", may: []string{"*"}, parts: []string{pgx}},

	// internal/tooling: docs' tests, releases, this table, test fixtures; nothing above
	// imports it but tests and the commands. Then the benchmarks and the chaos suite.
	{pkg: "internal/tooling/entrytest", may: []string{"journal", "protocol"}},
	{pkg: "internal/tooling/release", may: []string{"internal/tooling/...", "internal/helpers/version", "protocol"}},
	{pkg: "internal/tooling/npmdist", may: []string{"internal/tooling/...", "internal/helpers/version"}},
	{pkg: "internal/tooling/...", may: []string{"internal/tooling/..."}},
	{pkg: "bench/...", may: []string{"protocol"}, parts: []string{pgx}},
	{pkg: "chaos"},
}

// sdkHosts may import the SDK though they are not function authors' code: each serves
// the examples beside a gateway (stepgate dev, the examples' binary, the test stack).
var sdkHosts = []string{"cmd/stepgate", "cmd/stepgate-examples", "internal/wiring/stack"}

func matches(pattern, pkg string) bool {
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return pkg == base || strings.HasPrefix(pkg, base+"/")
	}
	return pattern == "*" || pattern == pkg
}

func partOf(imp string) string {
	switch {
	case strings.HasPrefix(imp, "github.com/riverqueue/"), strings.HasPrefix(imp, "riverqueue.com/"):
		return river
	case strings.HasPrefix(imp, "github.com/jackc/"):
		return pgx
	}
	return ""
}

// TestLayering checks every package's imports (its non-test files') against the table,
// and that no package but the SDK's own, the examples and the sdkHosts depends on the
// SDK, directly or not.
func TestLayering(t *testing.T) {
	t.Parallel()
	list := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{join .Imports \" \"}}|{{join .Deps \" \"}}", module+"...")
	out, err := list.Output()
	if ee, ok := err.(*exec.ExitError); ok {
		t.Fatalf("go list: %v\n%s", err, ee.Stderr)
	}
	require.NoError(t, err)
	checked := 0
	for line := range strings.Lines(strings.TrimSpace(string(out))) {
		fields := strings.Split(strings.TrimSpace(line), "|")
		require.Len(t, fields, 3, "go list printed %q", line)
		pkg, ok := strings.CutPrefix(fields[0], module)
		require.True(t, ok, "go list printed %q, outside the module", fields[0])
		i := slices.IndexFunc(table, func(r row) bool { return matches(r.pkg, pkg) })
		if !assert.Truef(t, i >= 0, "%s has no row in the layering table (internal/tooling/layering): add one saying what it may import", pkg) {
			continue
		}
		r := table[i]
		checked++
		for _, imp := range strings.Fields(fields[1]) {
			if own, ours := strings.CutPrefix(imp, module); ours {
				allowed := slices.ContainsFunc(r.may, func(p string) bool { return matches(p, own) })
				assert.Truef(t, allowed, "%s imports %s, which its row (%s) does not allow: change the import, or the table with a reason", pkg, own, r.pkg)
			} else if part := partOf(imp); part != "" {
				assert.Truef(t, slices.Contains(r.parts, part), "%s imports %s (%s), which its row (%s) does not allow", pkg, imp, part, r.pkg)
			}
		}
		if matches("functions/...", pkg) || matches("examples/...", pkg) || slices.Contains(sdkHosts, pkg) {
			continue
		}
		for _, dep := range strings.Fields(fields[2]) {
			own, ours := strings.CutPrefix(dep, module)
			assert.Truef(t, !ours || !matches("functions/...", own),
				"%s depends on %s: the server must not import the SDK; what the gateway and the SDK share belongs under protocol/", pkg, own)
		}
	}
	require.Greater(t, checked, 40, "the module's packages were listed")
}
