package main

import (
	"archive/tar"
	"compress/gzip"
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
	"slices"
	"strings"
)

// sdkPackage is the TypeScript SDK's npm name.
const sdkPackage = "@stepgate/sdk"

// sdkFiles are files that the SDK's tarball must hold.
var sdkFiles = []string{
	"package/dist/src/index.js",
	"package/dist/src/index.d.ts",
	"package/dist/src/client.js",
	"package/README.md",
	"package/package.json",
}

// packSDK packs the TypeScript SDK under root into outDir, as `npm publish` would,
// after `npm ci` when its node_modules is missing and `npm run build`, and checks
// that the tarball is @stepgate/sdk at version v with its built files. It returns the
// tarball's path. npm's output goes to stderr.
func packSDK(ctx context.Context, root, v, outDir string, stderr io.Writer) (string, error) {
	dir := filepath.Join(root, "sdk", "typescript")
	if !isDir(filepath.Join(dir, "node_modules")) {
		if err := runIn(ctx, dir, stderr, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"); err != nil {
			return "", err
		}
	}
	if err := runIn(ctx, dir, stderr, "npm", "run", "build", "--silent"); err != nil {
		return "", err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	tarball := filepath.Join(outDir, tarballName(sdkPackage, v))
	if err := os.Remove(tarball); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err := runIn(ctx, dir, stderr, "npm", "pack", "--pack-destination", outDir, "--loglevel=error", "--silent"); err != nil {
		return "", err
	}
	files, err := readTarball(tarball)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("npm pack made no %s in %s (is %s's version %s?)", filepath.Base(tarball), outDir, sdkPackageJSON, v)
	}
	if err != nil {
		return "", err
	}
	var missing []string
	for _, f := range sdkFiles {
		if _, ok := files[f]; !ok {
			missing = append(missing, f)
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("%s lacks %s", tarball, strings.Join(missing, ", "))
	}
	if err := checkPackedJSON(tarball, files["package/package.json"], sdkPackage, v); err != nil {
		return "", err
	}
	return tarball, nil
}

// npmPackageNames are the npm packages of the stepgate binary, in the order to
// publish them: the platform packages (npm/stepgate's optionalDependencies), the
// stepgate package that depends on them, then create-stepgate.
func npmPackageNames(root string) ([]string, error) {
	bin, err := readPackageJSON(root, binPackageJSON)
	if err != nil {
		return nil, err
	}
	create, err := readPackageJSON(root, createPackageJSON)
	if err != nil {
		return nil, err
	}
	names := slices.Sorted(maps.Keys(bin.OptionalDependencies))
	return append(names, bin.Name, create.Name), nil
}

// packNPM runs `go run ./internal/tooling/npmdist -out outDir -platforms all` under root and
// checks that it made a tarball of each of the binary's npm packages at version v. It
// returns their paths in the order to publish them. Its output goes to stderr.
func packNPM(ctx context.Context, root, v, outDir string, stderr io.Writer) ([]string, error) {
	names, err := npmPackageNames(root)
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(outDir); err != nil {
		return nil, err
	}
	if err := runIn(ctx, root, stderr, "go", "run", "./internal/tooling/npmdist", "-out", outDir, "-platforms", "all"); err != nil {
		return nil, err
	}
	made := map[string]string{} // base name -> path
	err = filepath.WalkDir(outDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".tgz") {
			made[d.Name()] = p
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	var paths []string
	var errs []error
	for _, name := range names {
		p, ok := made[tarballName(name, v)]
		if !ok {
			errs = append(errs, fmt.Errorf("no %s (%s@%s) in %s", tarballName(name, v), name, v, outDir))
			continue
		}
		files, err := readTarball(p)
		if err == nil {
			err = checkPackedJSON(p, files["package/package.json"], name, v)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		paths = append(paths, p)
	}
	return paths, errors.Join(errs...)
}

// tarballName is the file name of `npm pack`'s tarball of the package name at
// version v: "@stepgate/sdk" at 0.1.0 is stepgate-sdk-0.1.0.tgz.
func tarballName(name, v string) string {
	return strings.ReplaceAll(strings.TrimPrefix(name, "@"), "/", "-") + "-" + v + ".tgz"
}

// checkPackedJSON checks that the package.json packed in tarball, data, names the
// package name at version v.
func checkPackedJSON(tarball string, data []byte, name, v string) error {
	if data == nil {
		return fmt.Errorf("%s has no package/package.json", tarball)
	}
	var p packageJSON
	if err := json.Unmarshal(data, &p); err != nil {
		return fmt.Errorf("%s: package/package.json: %w", tarball, err)
	}
	if p.Name != name || p.Version != v {
		return fmt.Errorf("%s: package/package.json is %s@%s, want %s@%s", tarball, p.Name, p.Version, name, v)
	}
	return nil
}

// readTarball returns the names of the regular files in the gzipped tarball, with the
// contents of package/package.json.
func readTarball(name string) (map[string][]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		files[h.Name] = nil
		if h.Name == "package/package.json" {
			if files[h.Name], err = io.ReadAll(io.LimitReader(tr, 1<<20)); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
}

// runIn runs the command in dir, its output going to w; its error names the command.
func runIn(ctx context.Context, dir string, w io.Writer, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s (in %s): %w", name, strings.Join(args, " "), dir, err)
	}
	return nil
}
