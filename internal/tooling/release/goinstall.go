package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

// modulePath is the module that users install stepgate from.
const modulePath = "github.com/stepgate/stepgate"

// sdkModules are the Go SDK's modules, nested in the repository at these directories
// (each one's path is modulePath + "/" + its directory) and tagged dir/vX.Y.Z at the
// release's commit. The root go.mod requires them at the release's version and, on
// main, builds them from the tree with replace directives, which the tag vX.Y.Z's
// commit drops (see releaseGoMod).
var sdkModules = []string{"access", "protocol", "client", "functions"}

// releaseGoMod returns go.mod (data) as the commit tagged vX.Y.Z holds it: without the
// replace directives that build the SDK's modules from the tree, so that the SDK comes
// from its own tags and `go install …@vX.Y.Z` accepts the module. Any other replace or
// exclude stays, for checkGoMod to refuse.
func releaseGoMod(data []byte) ([]byte, error) {
	f, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		return nil, err
	}
	for _, m := range sdkModules {
		if err := f.DropReplace(modulePath+"/"+m, ""); err != nil {
			return nil, err
		}
	}
	f.Cleanup()
	return f.Format()
}

// checkGoInstall checks that `go install github.com/stepgate/stepgate/cmd/stepgate@vV`
// will work once the SDK's modules are tagged dir/vV at the commit rev of the git
// repository at root, and vV is tagged on rev with the SDK's replace directives dropped
// from go.mod (releaseGoMod): it makes a module proxy on disk that holds that commit's
// tree as the module at vV and each SDK module at vV, installs the command from it,
// outside any module, and runs the binary's `version`, which must print "stepgate V
// (function protocol P)". It returns what the binary printed.
//
// The other modules come from this machine's module cache when it has them, else from
// proxy.golang.org, verified against the go.sum of the commit. The module itself is
// not looked up in the checksum database, which does not know it before it is
// published. The download goes to a module cache of its own, removed afterwards, so a
// later run installs the tree of its own commit, not the one cached by this one.
func checkGoInstall(ctx context.Context, root, rev, v, proto string) (string, error) {
	gomod, err := gitOutput(ctx, root, "show", rev+":go.mod")
	if err != nil {
		return "", err
	}
	if gomod, err = releaseGoMod(gomod); err != nil {
		return "", err
	}
	if err := checkGoMod(gomod); err != nil {
		return "", err
	}

	tmp, err := os.MkdirTemp("", "stepgate-goinstall-*")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	proxy := filepath.Join(tmp, "proxy")
	if err := writeProxy(ctx, proxy, root, rev, "v"+v, gomod); err != nil {
		return "", fmt.Errorf("module proxy: %w", err)
	}

	goproxy := []string{fileURL(proxy)}
	if cache, err := goEnv(ctx, "GOMODCACHE"); err == nil && cache != "" {
		if download := filepath.Join(cache, "cache", "download"); isDir(download) {
			goproxy = append(goproxy, fileURL(download))
		}
	}
	goproxy = append(goproxy, "https://proxy.golang.org")

	gobin := filepath.Join(tmp, "bin")
	work := filepath.Join(tmp, "work") // outside any module
	if err := os.Mkdir(work, 0o755); err != nil {
		return "", err
	}
	pkg := modulePath + "/cmd/stepgate@v" + v
	install := exec.CommandContext(ctx, "go", "install", pkg)
	install.Dir = work
	install.Env = append(os.Environ(),
		"GOPROXY="+strings.Join(goproxy, ","),
		"GONOSUMDB="+modulePath,
		"GONOPROXY=",
		"GOPRIVATE=",
		"GOWORK=off",
		"GOBIN="+gobin,
		"GOMODCACHE="+filepath.Join(tmp, "modcache"),
		// -modcacherw: the module cache of its own can be removed. -trimpath: the
		// build cache's objects of the modules do not depend on where that cache is,
		// so a second run compiles only what changed.
		"GOFLAGS=-mod=mod -modcacherw -trimpath",
	)
	if out, err := install.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go install %s (GOPROXY=%s): %w\n%s", pkg, strings.Join(goproxy, ","), err, bytes.TrimSpace(out))
	}

	out, err := exec.CommandContext(ctx, filepath.Join(gobin, "stepgate"), "version").CombinedOutput()
	got := strings.TrimSpace(string(out))
	if err != nil {
		return got, fmt.Errorf("the installed stepgate version: %w: %s", err, got)
	}
	return got, checkVersionLine(got, v, proto)
}

// checkVersionLine checks that got, what `stepgate version` printed, is the line of a
// binary installed from the tag of version v, speaking the function protocol proto.
func checkVersionLine(got, v, proto string) error {
	if want := fmt.Sprintf("stepgate %s (function protocol %s)", v, proto); got != want {
		return fmt.Errorf("the installed stepgate version printed %q, want %q", got, want)
	}
	return nil
}

// checkGoMod checks that go.mod, whose contents are data, is stepgate's and has none
// of the directives that `go install pkg@version` refuses (replace, exclude).
func checkGoMod(data []byte) error {
	f, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		return err
	}
	switch {
	case f.Module == nil || f.Module.Mod.Path != modulePath:
		return fmt.Errorf("go.mod is not module %s", modulePath)
	case len(f.Replace) > 0:
		r := f.Replace[0]
		return fmt.Errorf("go.mod:%d: replace %s: `go install …@version` refuses a module with replace directives", r.Syntax.Start.Line, r.Old.Path)
	case len(f.Exclude) > 0:
		x := f.Exclude[0]
		return fmt.Errorf("go.mod:%d: exclude %s: `go install …@version` refuses a module with exclude directives", x.Syntax.Start.Line, x.Mod.Path)
	}
	return nil
}

// writeProxy writes under dir the files a module proxy serves (see `go help
// goproxy`) for stepgate at version v, and for each of the SDK's modules at v: their
// list, .info, .mod and .zip, each zip made from commit rev of the git repository at
// root as the go command makes a module's zip from a tag (the root's without the
// nested modules' directories), the root's with go.mod gomod.
func writeProxy(ctx context.Context, dir, root, rev, v string, gomod []byte) error {
	when, err := gitOutput(ctx, root, "log", "-1", "--format=%cI", rev)
	if err != nil {
		return err
	}
	t, err := time.Parse(time.RFC3339, strings.TrimSpace(string(when)))
	if err != nil {
		return fmt.Errorf("the commit time of %s: %w", rev, err)
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{v, t.UTC()})
	if err != nil {
		return err
	}

	// The tree of rev as `git archive` exports it, which is what the go command zips
	// when it downloads a tagged module from its repository.
	src := filepath.Join(dir, "src")
	if err := gitExport(ctx, root, rev, src); err != nil {
		return err
	}
	defer os.RemoveAll(src)
	if err := os.WriteFile(filepath.Join(src, "go.mod"), gomod, 0o644); err != nil {
		return err
	}
	// The root's zip leaves out the directories with a go.mod of their own, as the go
	// command's does: the SDK's modules, each zipped from its directory.
	if err := writeProxyModule(dir, modulePath, v, info, src, gomod); err != nil {
		return fmt.Errorf("%s of %s: %w", modulePath, rev, err)
	}
	for _, m := range sdkModules {
		mod, err := os.ReadFile(filepath.Join(src, m, "go.mod"))
		if err != nil {
			return fmt.Errorf("the SDK module %s at %s: %w", m, rev, err)
		}
		if err := writeProxyModule(dir, modulePath+"/"+m, v, info, filepath.Join(src, m), mod); err != nil {
			return fmt.Errorf("%s/%s of %s: %w", modulePath, m, rev, err)
		}
	}
	return nil
}

// writeProxyModule writes under dir the proxy's files of module path at version v: the
// zip of src, the .mod gomod, the .info info and the list.
func writeProxyModule(dir, path, v string, info []byte, src string, gomod []byte) error {
	escaped, err := module.EscapePath(path)
	if err != nil {
		return err
	}
	at := filepath.Join(dir, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return err
	}
	z, err := os.Create(filepath.Join(at, v+".zip"))
	if err != nil {
		return err
	}
	err = modzip.CreateFromDir(z, module.Version{Path: path, Version: v}, src)
	if cerr := z.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("the module's zip: %w", err)
	}
	for name, data := range map[string][]byte{
		"list":      []byte(v + "\n"),
		v + ".info": info,
		v + ".mod":  gomod,
	} {
		if err := os.WriteFile(filepath.Join(at, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// gitExport writes the files of commit rev of the git repository at root into dir,
// which it creates, as `git archive` exports them.
func gitExport(ctx context.Context, root, rev, dir string) error {
	cmd := exec.CommandContext(ctx, "git", "archive", "--format=tar", rev)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	xerr := untar(out, dir)
	if xerr != nil {
		_, _ = io.Copy(io.Discard, out) // let git finish
	}
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("git archive %s: %w: %s", rev, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return xerr
}

// untar writes the directories and regular files of the tar stream r into dir. It
// refuses a name that would land outside dir.
func untar(r io.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err = os.MkdirAll(dir, 0o755); err == nil {
			root, err = os.OpenRoot(dir)
		}
	}
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		name := filepath.FromSlash(strings.TrimSuffix(h.Name, "/"))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(name, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := root.MkdirAll(filepath.Dir(name), 0o755); err != nil {
				return err
			}
			f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fs.FileMode(h.Mode)&0o777|0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		default:
			// git archive also writes a pax header with the commit id; the module
			// zip holds regular files only.
		}
	}
}

// gitOutput runs git in dir and returns its standard output.
func gitOutput(ctx context.Context, dir string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git %s: %w%s", strings.Join(args, " "), err, exitStderr(err))
	}
	return out, nil
}

// goEnv returns the go command's value of the variable name.
func goEnv(ctx context.Context, name string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", name).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

func fileURL(dir string) string {
	return (&url.URL{Scheme: "file", Path: filepath.ToSlash(dir)}).String()
}

func isDir(name string) bool {
	fi, err := os.Stat(name)
	return err == nil && fi.IsDir()
}
