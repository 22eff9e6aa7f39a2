package main

import (
	"archive/tar"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stepgate/stepgate/internal/helpers/version"
	"github.com/stepgate/stepgate/protocol"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// repoRoot is the module's root, from this package's directory.
var repoRoot = filepath.Join("..", "..", "..")

// writeFiles writes files (name -> contents) under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(data), 0o644))
	}
}

// versionFiles are the files checkVersions reads, all at 0.1.0, speaking protocol 1.0.0.
func versionFiles() map[string]string {
	return map[string]string{
		"sdk/typescript/package.json": `{"name": "@stepgate/sdk", "version": "0.1.0", "files": ["dist/src"]}`,
		"sdk/typescript/package-lock.json": `{"name": "@stepgate/sdk", "version": "0.1.0", "lockfileVersion": 3,
			"packages": {"": {"name": "@stepgate/sdk", "version": "0.1.0"}, "node_modules/x": {"version": "2.0.0"}}}`,
		"sdk/typescript/src/version.ts": "/** doc */\nexport const SDK_VERSION = \"0.1.0\";\n\nexport const PROTOCOL_VERSION = \"1.0.0\";\n",
		"npm/stepgate/package.json": `{"name": "stepgate", "version": "0.1.0", "optionalDependencies": {
			"@stepgate/cli-darwin-arm64": "0.1.0", "@stepgate/cli-linux-x64": "0.1.0"}}`,
		"npm/create-stepgate/package.json": `{"name": "create-stepgate", "version": "0.1.0"}`,
		"go.mod": "module github.com/stepgate/stepgate\n\ngo 1.26.0\n\nrequire (\n" +
			"\tgithub.com/google/uuid v1.6.0\n\tgithub.com/stepgate/stepgate/access v0.1.0\n\tgithub.com/stepgate/stepgate/client v0.1.0\n" +
			"\tgithub.com/stepgate/stepgate/functions v0.1.0\n\tgithub.com/stepgate/stepgate/protocol v0.1.0\n)\n\n" +
			"replace github.com/stepgate/stepgate/functions => ./functions\n",
		"access/go.mod":   "module github.com/stepgate/stepgate/access\n\ngo 1.26.0\n",
		"client/go.mod":   "module github.com/stepgate/stepgate/client\n\ngo 1.26.0\n",
		"protocol/go.mod": "module github.com/stepgate/stepgate/protocol\n\ngo 1.26.0\n\nrequire github.com/stepgate/stepgate/access v0.1.0\n",
		"functions/go.mod": "module github.com/stepgate/stepgate/functions\n\ngo 1.26.0\n\nrequire (\n" +
			"\tgithub.com/stepgate/stepgate/access v0.1.0 // indirect\n\tgithub.com/stepgate/stepgate/client v0.1.0\n" +
			"\tgithub.com/stepgate/stepgate/protocol v0.1.0\n\tgo.opentelemetry.io/otel v1.47.0\n)\n",
	}
}

func TestVersions(t *testing.T) {
	t.Parallel()

	t.Run("Repository", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, checkVersions(repoRoot, version.Version, protocol.Version))
	})
	t.Run("Agree", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		writeFiles(t, dir, versionFiles())
		require.NoError(t, checkVersions(dir, "0.1.0", "1.0.0"))
	})

	// Each case changes or removes one file of versionFiles; the error must name it.
	tests := []struct {
		name, file, old, new string // new "" with old "" removes the file
		want                 string
	}{
		{"SDKPackage", "sdk/typescript/package.json", `"0.1.0"`, `"0.2.0"`,
			`sdk/typescript/package.json: "version" is "0.2.0", want "0.1.0"`},
		{"SDKPackageNoVersion", "sdk/typescript/package.json", `"version": "0.1.0", `, ``,
			`sdk/typescript/package.json has no "version"`},
		{"SDKPackageLock", "sdk/typescript/package-lock.json", `"version": "0.1.0", "lockfileVersion"`, `"version": "0.0.1", "lockfileVersion"`,
			`sdk/typescript/package-lock.json: "version" is "0.0.1", want "0.1.0"`},
		{"SDKPackageLockPackage", "sdk/typescript/package-lock.json", `"name": "@stepgate/sdk", "version": "0.1.0"}`, `"name": "@stepgate/sdk", "version": "0.0.1"}`,
			`sdk/typescript/package-lock.json: packages[""].version is "0.0.1", want "0.1.0"`},
		{"SDKVersion", "sdk/typescript/src/version.ts", `SDK_VERSION = "0.1.0"`, `SDK_VERSION = "0.1.1"`,
			`sdk/typescript/src/version.ts: SDK_VERSION is "0.1.1", want "0.1.0"`},
		{"SDKVersionGone", "sdk/typescript/src/version.ts", `export const SDK_VERSION`, `const SDK_VERSION`,
			"sdk/typescript/src/version.ts has no `export const SDK_VERSION"},
		{"ProtocolVersion", "sdk/typescript/src/version.ts", `PROTOCOL_VERSION = "1.0.0"`, `PROTOCOL_VERSION = "1.1.0"`,
			`sdk/typescript/src/version.ts: PROTOCOL_VERSION is "1.1.0", want "1.0.0" (protocol.Version)`},
		{"BinaryPackage", "npm/stepgate/package.json", `"version": "0.1.0"`, `"version": "0.0.9"`,
			`npm/stepgate/package.json: "version" is "0.0.9", want "0.1.0"`},
		{"PlatformPackage", "npm/stepgate/package.json", `"@stepgate/cli-linux-x64": "0.1.0"`, `"@stepgate/cli-linux-x64": "^0.1.0"`,
			`npm/stepgate/package.json: optionalDependencies "@stepgate/cli-linux-x64" is "^0.1.0", want "0.1.0"`},
		{"NoPlatformPackages", "npm/stepgate/package.json", `"optionalDependencies"`, `"dependencies"`,
			`npm/stepgate/package.json has no "optionalDependencies"`},
		{"CreatePackage", "npm/create-stepgate/package.json", `"0.1.0"`, `"0.2.0"`,
			`npm/create-stepgate/package.json: "version" is "0.2.0", want "0.1.0"`},
		{"CreatePackageMissing", "npm/create-stepgate/package.json", "", "",
			`npm/create-stepgate/package.json is missing`},
		{"BinaryPackageMissing", "npm/stepgate/package.json", "", "",
			`npm/stepgate/package.json is missing`},
		{"SDKPackageNotJSON", "sdk/typescript/package.json", `{`, `[`,
			`sdk/typescript/package.json: `},
		{"SDKModuleRequire", "functions/go.mod", `protocol v0.1.0`, `protocol v0.0.9`,
			`functions/go.mod: require github.com/stepgate/stepgate/protocol is "0.0.9", want "0.1.0"`},
		{"RootRequire", "go.mod", `client v0.1.0`, `client v0.2.0`,
			`go.mod: require github.com/stepgate/stepgate/client is "0.2.0", want "0.1.0"`},
		{"SDKModuleMissing", "access/go.mod", "", "",
			`access/go.mod is missing`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			files := versionFiles()
			if tt.old == "" && tt.new == "" {
				delete(files, tt.file)
			} else {
				require.Contains(t, files[tt.file], tt.old)
				files[tt.file] = strings.Replace(files[tt.file], tt.old, tt.new, 1)
			}
			writeFiles(t, dir, files)
			err := checkVersions(dir, "0.1.0", "1.0.0")
			require.Error(t, err)
			require.Contains(t, err.Error(), filepath.FromSlash(tt.want))
		})
	}

	t.Run("EveryDisagreement", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		writeFiles(t, dir, versionFiles())
		err := checkVersions(dir, "0.2.0", "2.0.0")
		require.Error(t, err)
		// The SDK's package.json, lock file (twice) and version.ts (twice), npm/stepgate
		// and its two platform packages, create-stepgate; the Go SDK's modules as the
		// root go.mod requires them (4), as protocol's does (1) and functions' (3).
		require.Len(t, strings.Split(err.Error(), "\n"), 17, err.Error())
	})
}

const changelog = `# Changelog

## [Unreleased]

## [0.1.0] - 2026-12-04

### Added

- Everything.

[Unreleased]: https://github.com/stepgate/stepgate/compare/v0.1.0...HEAD
[0.1.0]: https://github.com/stepgate/stepgate/releases/tag/v0.1.0
`

func TestChangelog(t *testing.T) {
	t.Parallel()

	t.Run("Repository", func(t *testing.T) {
		t.Parallel()
		date, err := checkChangelog(repoRoot, version.Version)
		require.NoError(t, err)
		require.NotEmpty(t, date)
	})
	t.Run("Fixture", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"CHANGELOG.md": changelog})
		date, err := checkChangelog(dir, "0.1.0")
		require.NoError(t, err)
		require.Equal(t, "2026-12-04", date)
	})
	t.Run("LaterRelease", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		later := strings.NewReplacer(
			"## [Unreleased]\n", "## [Unreleased]\n\n## [0.2.0] - 2027-01-31\n",
			"compare/v0.1.0...HEAD", "compare/v0.2.0...HEAD\n[0.2.0]: https://github.com/stepgate/stepgate/compare/v0.1.0...v0.2.0",
		).Replace(changelog)
		writeFiles(t, dir, map[string]string{"CHANGELOG.md": later})
		date, err := checkChangelog(dir, "0.2.0")
		require.NoError(t, err, later)
		require.Equal(t, "2027-01-31", date)
	})

	tests := []struct {
		name, old, new, want string
	}{
		{"OtherVersion", "## [0.1.0]", "## [0.0.9]", `CHANGELOG.md has no section "## [0.1.0] - YYYY-MM-DD"`},
		{"NoDate", "## [0.1.0] - 2026-12-04", "## [0.1.0]", `CHANGELOG.md has no section "## [0.1.0] - YYYY-MM-DD"`},
		{"BadDate", "2026-12-04", "2026-13-04", `CHANGELOG.md: the date of [0.1.0] is "2026-13-04", not a date`},
		{"NoLink", "[0.1.0]: https://github.com/stepgate/stepgate/releases/tag/v0.1.0", "", `CHANGELOG.md has no link reference "[0.1.0]: https://github.com/stepgate/stepgate/releases/tag/v0.1.0"`},
		{"LinkToAnotherTag", "releases/tag/v0.1.0", "releases/tag/v0.0.1", `CHANGELOG.md has no link reference "[0.1.0]:`},
		{"NoUnreleasedLink", "compare/v0.1.0...HEAD", "compare/v0.0.1...HEAD", `CHANGELOG.md has no link reference "[Unreleased]: https://github.com/stepgate/stepgate/compare/v0.1.0...HEAD"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			require.Contains(t, changelog, tt.old)
			writeFiles(t, dir, map[string]string{"CHANGELOG.md": strings.Replace(changelog, tt.old, tt.new, 1)})
			_, err := checkChangelog(dir, "0.1.0")
			require.ErrorContains(t, err, tt.want)
		})
	}
	t.Run("Missing", func(t *testing.T) {
		t.Parallel()
		_, err := checkChangelog(t.TempDir(), "0.1.0")
		require.EqualError(t, err, "CHANGELOG.md is missing")
	})
}

func TestGoMod(t *testing.T) {
	t.Parallel()

	onMain, err := os.ReadFile(filepath.Join(repoRoot, "go.mod"))
	require.NoError(t, err)
	// main builds the SDK's modules from the tree (replace); the tag's go.mod does not.
	require.ErrorContains(t, checkGoMod(onMain), "refuses a module with replace directives")
	data, err := releaseGoMod(onMain)
	require.NoError(t, err)
	require.NoError(t, checkGoMod(data))
	require.NotContains(t, string(data), "replace")
	for _, m := range sdkModules {
		require.Contains(t, string(data), "\tgithub.com/stepgate/stepgate/"+m+" v"+version.Version+"\n", "the tag's go.mod still requires the SDK module %s", m)
	}
	again, err := releaseGoMod(data)
	require.NoError(t, err)
	require.Equal(t, string(data), string(again))
	other, err := releaseGoMod([]byte(string(onMain) + "\nreplace github.com/jackc/pgx/v5 => ../pgx\n"))
	require.NoError(t, err)
	require.ErrorContains(t, checkGoMod(other), "replace github.com/jackc/pgx/v5: ")

	replaced := string(data) + "\nreplace github.com/jackc/pgx/v5 => ../pgx\n"
	require.ErrorContains(t, checkGoMod([]byte(replaced)), "replace github.com/jackc/pgx/v5: `go install …@version` refuses a module with replace directives")
	excluded := string(data) + "\nexclude github.com/jackc/pgx/v5 v5.0.0\n"
	require.ErrorContains(t, checkGoMod([]byte(excluded)), "exclude github.com/jackc/pgx/v5: `go install …@version` refuses a module with exclude directives")
	fork := strings.Replace(string(data), "module github.com/stepgate/stepgate", "module example.com/fork", 1)
	require.EqualError(t, checkGoMod([]byte(fork)), "go.mod is not module github.com/stepgate/stepgate")
}

// TestGoInstall installs the command from a module proxy holding the committed tree
// (HEAD) as the release's version, as users will once it is tagged. It takes a minute
// or two when the build cache has none of it.
func TestGoInstall(t *testing.T) {
	t.Parallel()
	if err := exec.Command("git", "-C", repoRoot, "rev-parse", "--verify", "HEAD").Run(); err != nil {
		t.Skipf("not a git checkout with a commit (%v): the committed tree cannot be zipped", err)
	}
	got, err := checkGoInstall(t.Context(), repoRoot, "HEAD", version.Version, protocol.Version)
	require.NoError(t, err)
	require.Equal(t, "stepgate "+version.Version+" (function protocol "+protocol.Version+")", got)
}

func TestInstalledVersion(t *testing.T) {
	t.Parallel()

	require.NoError(t, checkVersionLine("stepgate 0.1.0 (function protocol 1.0.0)", "0.1.0", "1.0.0"))
	for _, got := range []string{
		"stepgate 0.1.0 (devel 1a2b3c4) (function protocol 1.0.0)",
		"stepgate 0.1.0 (function protocol 1.1.0)",
		"stepgate: unknown command \"version\"",
	} {
		require.ErrorContains(t, checkVersionLine(got, "0.1.0", "1.0.0"), `want "stepgate 0.1.0 (function protocol 1.0.0)"`)
	}
}

// writeTarball writes a gzipped tarball as npm pack makes them, holding files.
func writeTarball(t *testing.T, name string, files map[string]string) {
	t.Helper()
	f, err := os.Create(name)
	require.NoError(t, err)
	gz := gzip.NewWriter(f)
	tw := tar.NewWriter(gz)
	for n, data := range files {
		require.NoError(t, tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}))
		_, err := tw.Write([]byte(data))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, gz.Close())
	require.NoError(t, f.Close())
}

func TestTarballs(t *testing.T) {
	t.Parallel()

	require.Equal(t, "stepgate-sdk-0.1.0.tgz", tarballName("@stepgate/sdk", "0.1.0"))
	require.Equal(t, "stepgate-cli-linux-x64-0.1.0.tgz", tarballName("@stepgate/cli-linux-x64", "0.1.0"))
	require.Equal(t, "create-stepgate-0.1.0.tgz", tarballName("create-stepgate", "0.1.0"))

	dir := t.TempDir()
	name := filepath.Join(dir, "stepgate-0.1.0.tgz")
	writeTarball(t, name, map[string]string{
		"package/package.json":    `{"name": "stepgate", "version": "0.1.0"}`,
		"package/bin/stepgate.js": "#!/usr/bin/env node\n",
	})
	files, err := readTarball(name)
	require.NoError(t, err)
	require.Contains(t, files, "package/bin/stepgate.js")
	require.NoError(t, checkPackedJSON(name, files["package/package.json"], "stepgate", "0.1.0"))
	require.EqualError(t, checkPackedJSON(name, files["package/package.json"], "stepgate", "0.2.0"),
		name+": package/package.json is stepgate@0.1.0, want stepgate@0.2.0")
	require.EqualError(t, checkPackedJSON(name, nil, "stepgate", "0.1.0"), name+" has no package/package.json")
}

func TestPublishPlan(t *testing.T) {
	t.Parallel()

	dir := t.TempDir()
	writeFiles(t, dir, versionFiles())
	plan := publishPlan(dir, "0.1.0", "/out/sdk/stepgate-sdk-0.1.0.tgz", nil, "/out/npm")
	require.Equal(t, `ready: git tag access/v0.1.0 protocol/v0.1.0 client/v0.1.0 functions/v0.1.0 && git push origin access/v0.1.0 protocol/v0.1.0 client/v0.1.0 functions/v0.1.0
then v0.1.0, on this commit with go.mod taking the Go SDK from those tags (docs/releasing.md):
  git switch --detach && go mod edit -dropreplace=github.com/stepgate/stepgate/access -dropreplace=github.com/stepgate/stepgate/protocol -dropreplace=github.com/stepgate/stepgate/client -dropreplace=github.com/stepgate/stepgate/functions && go mod tidy
  git commit -m 'go.mod: the Go SDK at v0.1.0 from its tags' -- go.mod go.sum && git tag v0.1.0 && git push origin v0.1.0 && git switch -
then npm publish, in this order:
  go run ./internal/tooling/npmdist -out /out/npm -platforms all
  npm publish --access public /out/npm/stepgate-cli-darwin-arm64-0.1.0.tgz
  npm publish --access public /out/npm/stepgate-cli-linux-x64-0.1.0.tgz
  npm publish --access public /out/npm/stepgate-0.1.0.tgz
  npm publish --access public /out/sdk/stepgate-sdk-0.1.0.tgz
  npm publish --access public /out/npm/create-stepgate-0.1.0.tgz
`, plan)
}

// TestSuite is not parallel: it writes a script and runs it, which fails with "text
// file busy" when another test forks at that moment and its child still holds the
// script open for writing (golang.org/issue/22315). Before the parallel tests start,
// nothing else forks.
func TestSuite(t *testing.T) {
	for _, tt := range []struct {
		name, script string
		ok           bool
	}{
		{"Passes", "#!/bin/sh\necho all passed\n", true},
		{"Fails", "#!/bin/sh\necho one failed >&2\nexit 1\n", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "test.sh"), []byte(tt.script), 0o755))
			var out strings.Builder
			err := runSuite(t.Context(), dir, &out, &out)
			if tt.ok {
				require.NoError(t, err)
				require.Equal(t, "all passed\n", out.String())
				return
			}
			require.EqualError(t, err, "./test.sh: exit status 1 (its output above)")
			require.Equal(t, "one failed\n", out.String())
		})
	}
}
