// Command npmdist builds the npm packages of a stepgate release, so that a TypeScript
// user runs the gateway with npm alone (npx stepgate dev), the way esbuild ships its
// binary:
//
//	go run ./internal/tooling/npmdist -out DIR [-platforms host|all] [-sdk]
//
// For each platform it cross-compiles ./cmd/stepgate (CGO_ENABLED=0, -trimpath,
// -ldflags "-s -w") into a package @stepgate/cli-<os>-<cpu> whose package.json "os" and
// "cpu" let npm install it on that platform only. The package stepgate (npm/stepgate)
// depends on all of them as optional dependencies, and its bin/stepgate.js runs the one
// npm installed. create-stepgate (npm/create-stepgate) scaffolds an app.
//
// Every package is version.Version: npmdist fails, before it builds anything, when a
// version in npm/*/package.json says otherwise. It runs `npm pack` for each package into
// DIR and prints the tarballs' paths, one a line. With -sdk it packs the TypeScript SDK
// (sdk/typescript, after `npm ci` when its devDependencies are missing) into DIR too, so
// that `create-stepgate --packages DIR` makes an app of these packages before they are
// on the registry.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"github.com/stepgate/stepgate/internal/tooling/repo"

	"github.com/stepgate/stepgate/internal/helpers/version"
)

// platform is one target of the binary: Go's names and npm's.
type platform struct {
	goos, goarch string // GOOS, GOARCH
	os, cpu      string // npm's "os" and "cpu" (process.platform, process.arch)
}

// pkg is the name of the platform's package.
func (p platform) pkg() string { return "@stepgate/cli-" + p.os + "-" + p.cpu }

// platforms are the platforms the npm package has a binary for; npm/stepgate's
// optionalDependencies and bin/stepgate.js list the same.
var platforms = []platform{
	{"darwin", "arm64", "darwin", "arm64"},
	{"darwin", "amd64", "darwin", "x64"},
	{"linux", "arm64", "linux", "arm64"},
	{"linux", "amd64", "linux", "x64"},
}

// config is what one build makes.
type config struct {
	root      string     // the repository: go.mod, cmd/stepgate, npm/
	out       string     // where the tarballs go
	platforms []platform // the binaries to build
	log       io.Writer  // progress
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "npmdist:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("npmdist", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "", "the directory for the tarballs (created if missing); required")
	which := fs.String("platforms", "host", "host (this machine's platform only) or all ("+platformNames(platforms)+")")
	withSDK := fs.Bool("sdk", false, "pack the TypeScript SDK (@stepgate/sdk) into DIR too")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || fs.NArg() > 0 {
		return errors.New("usage: go run ./internal/tooling/npmdist -out DIR [-platforms host|all] [-sdk]")
	}
	// -out is relative to the directory the command runs in, not to the package
	// npm packs (npm pack runs in each package's directory).
	abs, err := filepath.Abs(*out)
	if err != nil {
		return err
	}
	cfg := config{out: abs, log: stderr}
	switch *which {
	case "all":
		cfg.platforms = platforms
	case "host":
		p, err := hostPlatform()
		if err != nil {
			return err
		}
		cfg.platforms = []platform{p}
	default:
		return fmt.Errorf("-platforms %q: want host or all", *which)
	}
	root, err := repo.Root()
	if err != nil {
		return err
	}
	cfg.root = root
	tarballs, err := build(ctx, cfg)
	if err != nil {
		return err
	}
	if *withSDK {
		t, err := packSDK(ctx, filepath.Join(root, "sdk", "typescript"), cfg.out, stderr)
		if err != nil {
			return err
		}
		tarballs = append(tarballs, t)
	}
	for _, t := range tarballs {
		fmt.Fprintln(stdout, t)
	}
	return nil
}

func platformNames(ps []platform) string {
	var names []string
	for _, p := range ps {
		names = append(names, p.os+"-"+p.cpu)
	}
	return strings.Join(names, ", ")
}

// hostPlatform returns the platform of this machine, or an error when the npm
// package has no binary for it.
func hostPlatform() (platform, error) {
	for _, p := range platforms {
		if p.goos == runtime.GOOS && p.goarch == runtime.GOARCH {
			return p, nil
		}
	}
	return platform{}, fmt.Errorf("the npm packages have no binary for this machine's %s/%s (they have %s)", runtime.GOOS, runtime.GOARCH, platformNames(platforms))
}

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// build checks the versions, builds the packages of cfg in a temporary directory,
// packs them into cfg.out and returns the tarballs' absolute paths: the platforms'
// packages, then stepgate, then create-stepgate.
func build(ctx context.Context, cfg config) ([]string, error) {
	if err := checkVersions(cfg.root); err != nil {
		return nil, err
	}
	out, err := filepath.Abs(cfg.out)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	stage, err := os.MkdirTemp("", "stepgate-npmdist-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(stage)

	var tarballs []string
	for _, p := range cfg.platforms {
		dir := filepath.Join(stage, "cli-"+p.os+"-"+p.cpu)
		if err := platformPackage(ctx, cfg, p, dir); err != nil {
			return nil, err
		}
		t, err := pack(ctx, dir, out)
		if err != nil {
			return nil, err
		}
		tarballs = append(tarballs, t)
	}
	for _, name := range []string{"stepgate", "create-stepgate"} {
		dir := filepath.Join(stage, name)
		if err := copyPackage(filepath.Join(cfg.root, "npm", name), dir); err != nil {
			return nil, err
		}
		if err := stamp(filepath.Join(dir, "package.json")); err != nil {
			return nil, err
		}
		t, err := pack(ctx, dir, out)
		if err != nil {
			return nil, err
		}
		tarballs = append(tarballs, t)
	}
	return tarballs, nil
}

// manifest is the part of an npm package.json that npmdist checks and stamps; the
// rest of the file is kept as it is.
type manifest struct {
	Name                 string            `json:"name"`
	Version              string            `json:"version"`
	OptionalDependencies map[string]string `json:"optionalDependencies"`
}

// checkVersions returns an error naming every version in npm/stepgate and
// npm/create-stepgate that is not version.Version, and every platform package that
// npm/stepgate does not depend on.
func checkVersions(root string) error {
	var errs []error
	for _, name := range []string{"stepgate", "create-stepgate"} {
		path := filepath.Join(root, "npm", name, "package.json")
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var m manifest
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		rel := filepath.Join("npm", name, "package.json")
		if m.Version != version.Version {
			errs = append(errs, fmt.Errorf("%s has version %q", rel, m.Version))
		}
		for _, dep := range slices.Sorted(maps.Keys(m.OptionalDependencies)) {
			if v := m.OptionalDependencies[dep]; v != version.Version {
				errs = append(errs, fmt.Errorf("%s depends on %s@%s", rel, dep, v))
			}
		}
		if name == "stepgate" {
			for _, p := range platforms {
				if _, ok := m.OptionalDependencies[p.pkg()]; !ok {
					errs = append(errs, fmt.Errorf("%s does not depend on %s (optionalDependencies)", rel, p.pkg()))
				}
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("the npm packages disagree with internal/helpers/version.Version %q, the release's version: make them agree:\n%w", version.Version, errors.Join(errs...))
	}
	return nil
}

// stamp writes version.Version into the package.json at path, as its version and the
// version of each optional dependency, keeping its other fields and their order.
func stamp(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(b, &fields); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	fields["version"], _ = json.Marshal(version.Version)
	if raw, ok := fields["optionalDependencies"]; ok {
		var deps map[string]string
		if err := json.Unmarshal(raw, &deps); err != nil {
			return fmt.Errorf("%s: optionalDependencies: %w", path, err)
		}
		for dep := range deps {
			deps[dep] = version.Version
		}
		fields["optionalDependencies"], _ = json.Marshal(deps)
	}
	doc, err := orderedFields(b, fields)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return writeJSON(path, doc)
}

// orderedFields returns fields as a JSON object with its keys in the order of the
// object doc, which holds the same keys.
func orderedFields(doc []byte, fields map[string]json.RawMessage) (json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	if _, err := dec.Token(); err != nil { // {
		return nil, err
	}
	var buf bytes.Buffer
	buf.WriteByte('{')
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return nil, err
		}
		if buf.Len() > 1 {
			buf.WriteByte(',')
		}
		kb, _ := json.Marshal(key)
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(fields[key.(string)])
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// writeJSON writes v to path as npm writes a package.json: indented by two spaces,
// with ">" and "&" as they are.
func writeJSON(path string, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	return os.WriteFile(path, buf.Bytes(), 0o644)
}

// platformPackage builds the package of p in dir: its package.json, a README and the
// binary, bin/stepgate.
func platformPackage(ctx context.Context, cfg config, p platform, dir string) error {
	bin := filepath.Join(dir, "bin", "stepgate")
	fmt.Fprintf(cfg.log, "npmdist: building %s (GOOS=%s GOARCH=%s)\n", p.pkg(), p.goos, p.goarch)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/stepgate")
	cmd.Dir = cfg.root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+p.goos, "GOARCH="+p.goarch)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build ./cmd/stepgate for %s/%s: %w\n%s", p.goos, p.goarch, err, out)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		return err
	}
	type repository struct {
		Type string `json:"type"`
		URL  string `json:"url"`
	}
	m := struct {
		Name            string     `json:"name"`
		Version         string     `json:"version"`
		Description     string     `json:"description"`
		License         string     `json:"license"`
		Repository      repository `json:"repository"`
		OS              []string   `json:"os"`
		CPU             []string   `json:"cpu"`
		Files           []string   `json:"files"`
		PreferUnplugged bool       `json:"preferUnplugged"` // Yarn PnP: the binary must be a real file
	}{
		Name:            p.pkg(),
		Version:         version.Version,
		Description:     fmt.Sprintf("The stepgate binary for %s on %s; install stepgate, which depends on it.", osName(p.os), p.cpu),
		License:         "Apache-2.0",
		Repository:      repository{"git", "git+https://github.com/stepgate/stepgate.git"},
		OS:              []string{p.os},
		CPU:             []string{p.cpu},
		Files:           []string{"bin/stepgate"},
		PreferUnplugged: true,
	}
	if err := writeJSON(filepath.Join(dir, "package.json"), m); err != nil {
		return err
	}
	readme := fmt.Sprintf("# %s\n\nThe `stepgate` binary for %s on %s. Install [`stepgate`](https://www.npmjs.com/package/stepgate) instead: it depends on this package and runs the binary (`npx stepgate dev`).\n", p.pkg(), osName(p.os), p.cpu)
	return os.WriteFile(filepath.Join(dir, "README.md"), []byte(readme), 0o644)
}

func osName(os string) string {
	if os == "darwin" {
		return "macOS"
	}
	return "Linux"
}

// copyPackage copies the package in src to dst, leaving out node_modules and
// tarballs.
func copyPackage(src, dst string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			if d.Name() == "node_modules" {
				return filepath.SkipDir
			}
			return os.MkdirAll(target, 0o755)
		}
		if strings.HasSuffix(d.Name(), ".tgz") || !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, info.Mode().Perm())
	})
}

// pack runs `npm pack` in dir with the tarball going to out, and returns its absolute
// path. A relative out is relative to the working directory, not to dir.
func pack(ctx context.Context, dir, out string) (string, error) {
	out, err := filepath.Abs(out)
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "npm", "pack", "--json", "--pack-destination", out)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("npm pack in %s: %w\n%s", dir, err, stderr.Bytes())
	}
	var packed []struct {
		Filename string `json:"filename"`
	}
	if err := json.Unmarshal(stdout, &packed); err != nil || len(packed) != 1 {
		return "", fmt.Errorf("npm pack in %s: unexpected output %q", dir, stdout)
	}
	return filepath.Join(out, packed[0].Filename), nil
}

// packSDK packs the TypeScript SDK in dir into out (its prepack compiles it), after
// installing its devDependencies with `npm ci` when they are missing.
func packSDK(ctx context.Context, dir, out string, log io.Writer) (string, error) {
	if !isFile(filepath.Join(dir, "node_modules", ".bin", "tsc")) {
		fmt.Fprintln(log, "npmdist: npm ci in", dir)
		cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
		cmd.Dir, cmd.Stdout, cmd.Stderr = dir, log, log
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("npm ci in %s: %w", dir, err)
		}
	}
	return pack(ctx, dir, out)
}
