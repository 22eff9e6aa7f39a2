package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
)

// The files whose versions must agree, relative to the module's root.
var (
	sdkPackageJSON    = filepath.Join("sdk", "typescript", "package.json")
	sdkPackageLock    = filepath.Join("sdk", "typescript", "package-lock.json")
	sdkVersionTS      = filepath.Join("sdk", "typescript", "src", "version.ts")
	binPackageJSON    = filepath.Join("npm", "stepgate", "package.json")
	createPackageJSON = filepath.Join("npm", "create-stepgate", "package.json")
	changelogFile     = "CHANGELOG.md"
)

const repositoryURL = "https://github.com/stepgate/stepgate"

var (
	sdkVersionConst   = regexp.MustCompile(`(?m)^export const SDK_VERSION = "([^"]*)";`)
	protocolVersionTS = regexp.MustCompile(`(?m)^export const PROTOCOL_VERSION = "([^"]*)";`)
)

// packageJSON is what the checks read of an npm package.json.
type packageJSON struct {
	Name                 string            `json:"name"`
	Version              string            `json:"version"`
	OptionalDependencies map[string]string `json:"optionalDependencies"`
}

// readPackageJSON reads root/name, naming the file in its errors.
func readPackageJSON(root, name string) (packageJSON, error) {
	var p packageJSON
	data, err := readFile(root, name)
	if err != nil {
		return p, err
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return p, fmt.Errorf("%s: %w", name, err)
	}
	if p.Version == "" {
		return p, fmt.Errorf("%s has no \"version\"", name)
	}
	return p, nil
}

// readFile reads root/name; a missing file's error says it is missing.
func readFile(root, name string) ([]byte, error) {
	data, err := os.ReadFile(filepath.Join(root, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s is missing", name)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return data, nil
}

// sdkGoMods is the go.mod files of the SDK's modules, relative to the root.
func sdkGoMods() []string {
	var files []string
	for _, m := range sdkModules {
		files = append(files, filepath.Join(m, "go.mod"))
	}
	return files
}

// checkVersions checks that every version of the release under root is v (the Go
// module's, version.Version) and that the TypeScript SDK speaks the function protocol
// proto (protocol.Version). Its error lists every disagreement and missing file.
func checkVersions(root, v, proto string) error {
	var errs []error
	want := func(file, what, got string) {
		if got != v {
			errs = append(errs, fmt.Errorf("%s: %s is %q, want %q (internal/helpers/version)", file, what, got, v))
		}
	}

	if p, err := readPackageJSON(root, sdkPackageJSON); err != nil {
		errs = append(errs, err)
	} else {
		want(sdkPackageJSON, `"version"`, p.Version)
	}

	// npm version writes both of the lock file's copies of the package's version.
	if data, err := readFile(root, sdkPackageLock); err != nil {
		errs = append(errs, err)
	} else {
		var lock struct {
			Version  string `json:"version"`
			Packages map[string]struct {
				Version string `json:"version"`
			} `json:"packages"`
		}
		if err := json.Unmarshal(data, &lock); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", sdkPackageLock, err))
		} else {
			want(sdkPackageLock, `"version"`, lock.Version)
			want(sdkPackageLock, `packages[""].version`, lock.Packages[""].Version)
		}
	}

	if data, err := readFile(root, sdkVersionTS); err != nil {
		errs = append(errs, err)
	} else {
		if m := sdkVersionConst.FindSubmatch(data); m == nil {
			errs = append(errs, fmt.Errorf("%s has no `export const SDK_VERSION = \"…\";`", sdkVersionTS))
		} else {
			want(sdkVersionTS, "SDK_VERSION", string(m[1]))
		}
		if m := protocolVersionTS.FindSubmatch(data); m == nil {
			errs = append(errs, fmt.Errorf("%s has no `export const PROTOCOL_VERSION = \"…\";`", sdkVersionTS))
		} else if got := string(m[1]); got != proto {
			errs = append(errs, fmt.Errorf("%s: PROTOCOL_VERSION is %q, want %q (protocol.Version)", sdkVersionTS, got, proto))
		}
	}

	if p, err := readPackageJSON(root, binPackageJSON); err != nil {
		errs = append(errs, err)
	} else {
		want(binPackageJSON, `"version"`, p.Version)
		if len(p.OptionalDependencies) == 0 {
			errs = append(errs, fmt.Errorf("%s has no \"optionalDependencies\" (the platform packages)", binPackageJSON))
		}
		for _, name := range slices.Sorted(maps.Keys(p.OptionalDependencies)) {
			want(binPackageJSON, fmt.Sprintf("optionalDependencies %q", name), p.OptionalDependencies[name])
		}
	}

	if p, err := readPackageJSON(root, createPackageJSON); err != nil {
		errs = append(errs, err)
	} else {
		want(createPackageJSON, `"version"`, p.Version)
	}

	// The Go SDK's modules, which the root go.mod and each other's require at the
	// release's version (the tags dir/vX.Y.Z that the release adds).
	for _, file := range append([]string{"go.mod"}, sdkGoMods()...) {
		data, err := readFile(root, file)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		f, err := modfile.ParseLax(file, data, nil)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, r := range f.Require {
			if own, ok := strings.CutPrefix(r.Mod.Path, modulePath+"/"); ok && slices.Contains(sdkModules, own) {
				want(file, "require "+r.Mod.Path, strings.TrimPrefix(r.Mod.Version, "v"))
			}
		}
	}
	return errors.Join(errs...)
}

// checkChangelog checks that root's CHANGELOG.md has a section "## [v] - YYYY-MM-DD"
// with a real date, which it returns, and the link references of v and of
// [Unreleased] (the changes since v's tag).
func checkChangelog(root, v string) (string, error) {
	data, err := readFile(root, changelogFile)
	if err != nil {
		return "", err
	}
	var errs []error
	var date string
	q := regexp.QuoteMeta(v)
	if m := regexp.MustCompile(`(?m)^## \[` + q + `\] - (\d{4}-\d{2}-\d{2})$`).FindSubmatch(data); m == nil {
		errs = append(errs, fmt.Errorf("%s has no section \"## [%s] - YYYY-MM-DD\"", changelogFile, v))
	} else if _, err := time.Parse(time.DateOnly, string(m[1])); err != nil {
		errs = append(errs, fmt.Errorf("%s: the date of [%s] is %q, not a date", changelogFile, v, m[1]))
	} else {
		date = string(m[1])
	}
	// The first release links to its tag; a later one to the comparison with the one
	// before.
	link := regexp.MustCompile(`(?m)^\[` + q + `\]: ` + regexp.QuoteMeta(repositoryURL) +
		`/(?:releases/tag/v` + q + `|compare/v[^.\s]+\.[^.\s]+\.[^.\s]+\.\.\.v` + q + `)$`)
	if !link.Match(data) {
		errs = append(errs, fmt.Errorf("%s has no link reference \"[%s]: %s/releases/tag/v%s\" (or …/compare/vPREVIOUS...v%s)", changelogFile, v, repositoryURL, v, v))
	}
	unreleased := "[Unreleased]: " + repositoryURL + "/compare/v" + v + "...HEAD"
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(unreleased) + `$`).Match(data) {
		errs = append(errs, fmt.Errorf("%s has no link reference %q", changelogFile, unreleased))
	}
	return date, errors.Join(errs...)
}

// checkClean checks that git has no uncommitted change under root, tracked or not
// (but ignored).
func checkClean(ctx context.Context, root string) error {
	cmd := exec.CommandContext(ctx, "git", "status", "--porcelain")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("git status: %w%s", err, exitStderr(err))
	}
	if len(bytes.TrimSpace(out)) == 0 {
		return nil
	}
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	more := ""
	if len(lines) > 10 {
		more = fmt.Sprintf("\n… and %d more", len(lines)-10)
		lines = lines[:10]
	}
	return fmt.Errorf("uncommitted changes (commit them, or try the rest with -allow-dirty):\n%s%s", strings.Join(lines, "\n"), more)
}

// runSuite runs ./test.sh under root, its output going to stdout and stderr.
func runSuite(ctx context.Context, root string, stdout, stderr io.Writer) error {
	cmd := exec.CommandContext(ctx, "./test.sh")
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = stdout, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("./test.sh: %w (its output above)", err)
	}
	return nil
}

// exitStderr is what a failed command printed on its standard error, when
// exec.Cmd.Output kept it.
func exitStderr(err error) string {
	var xerr *exec.ExitError
	if errors.As(err, &xerr) && len(bytes.TrimSpace(xerr.Stderr)) > 0 {
		return "\n" + strings.TrimSpace(string(xerr.Stderr))
	}
	return ""
}
