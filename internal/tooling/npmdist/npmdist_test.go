package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stepgate/stepgate/internal/tooling/repo"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/helpers/version"
)

// packages are the tarballs one build makes, by package name.
type packages map[string]string

// buildPackages builds the host's packages with npmdist and packs the TypeScript SDK,
// into a temporary directory, or skips the test when Node 20 or later, npm, or the
// SDK's devDependencies (npm ci in sdk/typescript) are missing.
func buildPackages(t *testing.T) packages {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the npm packages, installs them and starts stepgate dev")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed: the npm packages' test needs Node 20 or later and npm")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("npm is not installed: the npm packages' test needs Node 20 or later and npm")
	}
	out, err := exec.Command(node, "--version").Output()
	require.NoError(t, err)
	major, _ := strconv.Atoi(strings.SplitN(strings.TrimPrefix(strings.TrimSpace(string(out)), "v"), ".", 2)[0])
	if major < 20 {
		t.Skipf("node %s is older than 20, which the npm packages need", strings.TrimSpace(string(out)))
	}
	root, err := repo.Root()
	require.NoError(t, err)
	sdk := filepath.Join(root, "sdk", "typescript")
	if _, err := os.Stat(filepath.Join(sdk, "node_modules", ".bin", "tsc")); err != nil {
		t.Skipf("the TypeScript SDK's devDependencies are not installed: run npm ci in %s", sdk)
	}
	host, err := hostPlatform()
	if err != nil {
		t.Skip(err)
	}

	dist := t.TempDir()
	var sdkTarball string
	var sdkErr error
	var wg sync.WaitGroup
	wg.Go(func() { sdkTarball, sdkErr = pack(t.Context(), sdk, dist) }) // its prepack compiles it
	tarballs, err := build(t.Context(), config{root: root, out: dist, platforms: []platform{host}, log: testWriter{t}})
	wg.Wait()
	require.NoError(t, err)
	require.NoError(t, sdkErr)

	pkgs := packages{"@stepgate/sdk": sdkTarball}
	for _, tgz := range tarballs {
		var m manifest
		require.NoError(t, json.Unmarshal(runCmd(t, "", nil, "tar", "-xzOf", tgz, "package/package.json"), &m))
		require.Equal(t, version.Version, m.Version, "%s's version", tgz)
		pkgs[m.Name] = tgz
	}
	require.Len(t, pkgs, 4, "the packages: %v", pkgs)
	require.Contains(t, pkgs, host.pkg())
	return pkgs
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// runCmd runs a command in dir with env added to the environment, and returns its
// standard output; it fails the test when the command fails.
func runCmd(t *testing.T, dir string, env []string, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s %s in %s:\n%s%s", name, strings.Join(args, " "), dir, out, stderr.String())
	return out
}

// privateDir returns a new temporary directory the postgres OS user can reach (the
// private Postgres runs as that user when the test runs as root).
func privateDir(t *testing.T) string {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711))
	return dir
}

// TestNpm installs a scaffolded app from the packages npmdist builds, as a TypeScript
// user without Go does, and runs its function on `npx stepgate dev`.
func TestNpm(t *testing.T) {
	t.Parallel()
	pkgs := buildPackages(t)
	host, _ := hostPlatform()

	t.Run("ShimWithoutPlatformPackage", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		runCmd(t, dir, nil, "npm", "init", "-y")
		runCmd(t, dir, nil, "npm", "install", "--no-audit", "--no-fund", "--omit=optional", pkgs["stepgate"])
		_, err := os.Stat(filepath.Join(dir, "node_modules", filepath.FromSlash(host.pkg())))
		require.ErrorIs(t, err, os.ErrNotExist, "--omit=optional installed the platform's package")

		shim := filepath.Join(dir, "node_modules", ".bin", "stepgate")
		out, err := exec.CommandContext(t.Context(), shim, "help").CombinedOutput()
		require.Error(t, err)
		require.Equal(t, 1, err.(*exec.ExitError).ExitCode())
		require.Contains(t, string(out), "stepgate: the package "+host.pkg()+", which holds the stepgate binary for "+host.os+"-"+host.cpu+", is not installed.")
		require.Contains(t, string(out), "--omit=optional")
		require.Contains(t, string(out), "npm install --include=optional stepgate@"+version.Version)

		// On a platform with no package (ppc64 here), it says which it has.
		fake := filepath.Join(dir, "ppc64.cjs")
		require.NoError(t, os.WriteFile(fake, []byte(`Object.defineProperty(process, "arch", { value: "ppc64" });`), 0o644))
		out, err = exec.CommandContext(t.Context(), "node", "--require", fake, shim, "help").CombinedOutput()
		require.Error(t, err)
		require.Contains(t, string(out), "stepgate: the npm package has no stepgate binary for "+host.os+"-ppc64 (it has darwin-arm64, darwin-x64, linux-arm64, linux-x64).")
		require.Contains(t, string(out), "go install github.com/stepgate/stepgate/cmd/stepgate@v"+version.Version)
	})

	t.Run("CreateStepgateApp", func(t *testing.T) {
		t.Parallel()
		work := privateDir(t)
		// Made from the packages just built, not the registry's, as the quickstart's
		// "before it is on npm" says: create-stepgate --packages DIR.
		dist := filepath.Dir(pkgs["stepgate"])
		runCmd(t, work, nil, "npm", "exec", "--yes", "--package="+pkgs["create-stepgate"], "--", "create-stepgate", "--packages", dist, "my-app")
		app := filepath.Join(work, "my-app")

		// A folder that is not empty is refused.
		cmd := exec.CommandContext(t.Context(), "npm", "exec", "--yes", "--package="+pkgs["create-stepgate"], "--", "create-stepgate", "my-app")
		cmd.Dir = work
		out, err := cmd.CombinedOutput()
		require.Error(t, err)
		require.Contains(t, string(out), "create-stepgate: "+app+" is not empty")
		// A folder of packages without the SDK's is refused, naming the command that makes it.
		cmd = exec.CommandContext(t.Context(), "npm", "exec", "--yes", "--package="+pkgs["create-stepgate"], "--", "create-stepgate", "--packages", work, "other-app")
		cmd.Dir = work
		out, err = cmd.CombinedOutput()
		require.Error(t, err)
		require.Contains(t, string(out), "go run ./internal/tooling/npmdist -out "+work+" -sdk")

		var pj map[string]any
		b, err := os.ReadFile(filepath.Join(app, "package.json"))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &pj))
		deps, devDeps := pj["dependencies"].(map[string]any), pj["devDependencies"].(map[string]any)
		require.Equal(t, "file:"+pkgs["@stepgate/sdk"], deps["@stepgate/sdk"])
		require.Equal(t, "file:"+pkgs["stepgate"], devDeps["stepgate"])
		require.Equal(t, map[string]any{host.pkg(): "file:" + pkgs[host.pkg()]}, pj["overrides"])
		runCmd(t, app, nil, "npm", "install", "--no-audit", "--no-fund")

		require.Contains(t, string(runCmd(t, app, nil, "npx", "stepgate", "help")), "stepgate: an HTTP-first durable functions gateway.")
		runCmd(t, app, nil, "npm", "run", "typecheck")

		// The gateway, through the shim, on a free port with its data in the app's
		// .stepgate, as `npm run gateway` keeps it.
		gw := start(t, app, nil, filepath.Join(app, "node_modules", ".bin", "stepgate"), "dev", "--addr", "127.0.0.1:0")
		api := gw.waitFor(t, regexp.MustCompile(`(?m)^  API +(http://\S+)/v1$`))
		token := gw.waitFor(t, regexp.MustCompile(`(?m)^STEPGATE_TOKEN=(\S+)$`))
		keys := gw.waitFor(t, regexp.MustCompile(`(?m)^STEPGATE_PUBLIC_KEYS=(\S+)`))
		// Its command lines are the ones an npm user types.
		gw.waitFor(t, regexp.MustCompile(`(?m)^  (npx stepgate) runs list$`))

		// The key goes in .env, where the README says, and `npm run dev` serves the app.
		envPath := filepath.Join(app, ".env")
		b, err = os.ReadFile(envPath)
		require.NoError(t, err)
		require.Contains(t, string(b), "\nSTEPGATE_PUBLIC_KEYS=\n")
		require.NoError(t, os.WriteFile(envPath, []byte(strings.Replace(string(b), "\nSTEPGATE_PUBLIC_KEYS=\n", "\nSTEPGATE_PUBLIC_KEYS="+keys+"\n", 1)), 0o600))
		port := freePort(t)
		fn := start(t, app, []string{"PORT=" + strconv.Itoa(port)}, "npm", "run", "dev")
		fn.waitFor(t, regexp.MustCompile(`functions served at (http://\S+)`))

		cli := []string{"STEPGATE_URL=" + api, "STEPGATE_TOKEN=" + token}
		appURL := "http://127.0.0.1:" + strconv.Itoa(port) + "/"
		require.Contains(t, string(runCmd(t, app, cli, "npx", "stepgate", "apps", "sync", appURL)), "synced 1 function from "+appURL)
		out = runCmd(t, app, cli, "npx", "stepgate", "invoke", "welcome", "--data", `{"name":"Ada"}`, "--wait", "1m")
		require.Regexp(t, `(?m)^run \S+ completed\n\{"at":"[^"]+","greeting":"Hello, Ada!"\}\n$`, string(out))

		// SIGINT to the shim alone reaches the binary, which stops its Postgres and
		// exits 0, and so does the shim.
		require.NoError(t, gw.cmd.Process.Signal(os.Interrupt))
		require.NoError(t, gw.wait(t), "stepgate dev after SIGINT to the shim")
		require.Contains(t, gw.output(), "postgres stopped")
	})
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// process is a command running in its own process group, whose output the test reads.
type process struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    strings.Builder
	grew   chan struct{} // closed and replaced each time out grows
	exited chan struct{}
	err    error // set when exited is closed
}

// start starts a command in dir in a process group of its own, and in Cleanup
// terminates the group (then kills it 10s later) and logs the output if t failed.
func start(t *testing.T, dir string, env []string, name string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(name, args...), grew: make(chan struct{}), exited: make(chan struct{})}
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, w, err := os.Pipe()
	require.NoError(t, err)
	p.cmd.Stdout, p.cmd.Stderr = w, w
	require.NoError(t, p.cmd.Start())
	w.Close()
	go func() {
		sc := bufio.NewScanner(r)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			p.mu.Lock()
			p.out.WriteString(sc.Text() + "\n")
			close(p.grew)
			p.grew = make(chan struct{})
			p.mu.Unlock()
		}
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		pgid := p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.exited
		}
		if t.Failed() {
			t.Logf("%s %s:\n%s", name, strings.Join(args, " "), p.output())
		}
	})
	return p
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// waitFor waits up to 2 minutes for the output to match re, and returns its first
// group.
func (p *process) waitFor(t *testing.T, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	for exited := false; ; {
		p.mu.Lock()
		m, grew := re.FindStringSubmatch(p.out.String()), p.grew
		p.mu.Unlock()
		if m != nil {
			return m[1]
		}
		if exited {
			t.Fatalf("%s exited (%v) before printing %s:\n%s", p.cmd, p.err, re, p.output())
		}
		select {
		case <-grew:
		case <-p.exited:
			exited = true // its whole output is in: look once more
		case <-deadline:
			t.Fatalf("%s printed no %s within 2 minutes:\n%s", p.cmd, re, p.output())
		}
	}
}

// wait waits up to a minute for the process to exit, and returns how it ended.
func (p *process) wait(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	select {
	case <-p.exited:
		return p.err
	case <-ctx.Done():
		t.Fatalf("%s did not exit within a minute:\n%s", p.cmd, p.output())
		return nil
	}
}

// TestQuickstartIsTheTemplate checks that docs/quickstart-typescript.md shows the files
// create-stepgate writes, as they are.
func TestQuickstartIsTheTemplate(t *testing.T) {
	t.Parallel()
	root, err := repo.Root()
	require.NoError(t, err)
	doc, err := os.ReadFile(filepath.Join(root, "docs", "quickstart-typescript.md"))
	require.NoError(t, err)
	template := func(name string) string {
		b, err := os.ReadFile(filepath.Join(root, "npm", "create-stepgate", "template", "src", name))
		require.NoError(t, err)
		return string(b)
	}
	block := func(after string) string {
		m := regexp.MustCompile(regexp.QuoteMeta(after) + "(?s).*?```ts\n(.*?)```").FindStringSubmatch(string(doc))
		require.NotNil(t, m, "the quickstart's block after %q", after)
		return m[1]
	}
	require.Equal(t, template("functions.ts"), block("The function, in `src/functions.ts`:"))
	// The server's block leaves out its import of ./functions.js (a block compiles alone).
	const imp = "import { functions } from \"./functions.js\";\n"
	server := template("server.ts")
	require.Contains(t, server, imp)
	require.Equal(t, strings.Replace(server, imp, "", 1), block("and `src/server.ts`, which imports `functions` from `./functions.js`:"))
}

// TestVersionsDisagree checks that npmdist refuses npm packages whose versions are not
// version.Version, naming each, before it builds anything.
func TestVersionsDisagree(t *testing.T) {
	t.Parallel()
	root, err := repo.Root()
	require.NoError(t, err)
	fake := t.TempDir()
	for _, name := range []string{"stepgate", "create-stepgate"} {
		require.NoError(t, copyPackage(filepath.Join(root, "npm", name), filepath.Join(fake, "npm", name)))
	}
	edit := func(name, from, to string) {
		path := filepath.Join(fake, "npm", name, "package.json")
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Contains(t, string(b), from)
		require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(b), from, to, 1)), 0o644))
	}
	v := `"` + version.Version + `"`
	edit("stepgate", `"version": `+v, `"version": "9.9.9"`)
	edit("stepgate", `"@stepgate/cli-linux-arm64": `+v+`,`, ``)
	edit("create-stepgate", `"version": `+v, `"version": "0.0.1"`)
	require.NoError(t, checkVersions(root), "the repository's own packages")

	out := t.TempDir()
	_, err = build(t.Context(), config{root: fake, out: out, platforms: platforms, log: testWriter{t}})
	require.EqualError(t, err, `the npm packages disagree with internal/helpers/version.Version "`+version.Version+`", the release's version: make them agree:
npm/stepgate/package.json has version "9.9.9"
npm/stepgate/package.json does not depend on @stepgate/cli-linux-arm64 (optionalDependencies)
npm/create-stepgate/package.json has version "0.0.1"`)
	entries, err := os.ReadDir(out)
	require.NoError(t, err)
	require.Empty(t, entries)
}

// TestPackRelativeOut checks that a relative -out is relative to the directory the
// command runs in, as the quickstart's `go run ./internal/tooling/npmdist -out
// ../stepgate-npm -sdk` expects, not to the package npm packs (the SDK's tarball went
// to sdk/stepgate-npm).
func TestPackRelativeOut(t *testing.T) {
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("npm is not installed: the test packs a package with npm pack")
	}
	pkg := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(pkg, "package.json"), []byte(`{"name":"relative-out","version":"1.2.3"}`+"\n"), 0o644))
	cwd := t.TempDir()
	t.Chdir(cwd)
	require.NoError(t, os.Mkdir("dist", 0o755))

	tgz, err := pack(t.Context(), pkg, filepath.Join("dist", "..", "dist"))
	require.NoError(t, err)
	want := filepath.Join(cwd, "dist", "relative-out-1.2.3.tgz")
	require.Equal(t, want, tgz)
	require.FileExists(t, want)
	_, err = os.Stat(filepath.Join(pkg, "dist"))
	require.ErrorIs(t, err, os.ErrNotExist, "the tarball went under the package's directory")
}
