package quickstart

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
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

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/tooling/repo"
)

// TestGoQuickstart follows docs/quickstart.md on a fresh clone: the dev gateway, the
// curl line it prints, the journal, then the page's function, registered and invoked.
func TestGoQuickstart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: the quickstart's test runs stepgate dev and its commands (tens of seconds)")
	}
	p := readPage(t, "docs/quickstart.md")
	s := newSession(t, cloneRepo(t))

	// 1. Start the gateway, on a free port: the page's 8080 may be taken.
	dev := s.server(p.commands("## 1. Start the gateway")[0], "", " --addr 127.0.0.1:0")
	banner := dev.expect(t, p.block("It prints where everything is", ""))
	base := submatch(t, banner, `(?m)^  API +(http://\S+)/v1$`)
	s.replace("http://127.0.0.1:8080", base)
	key := submatch(t, banner, `(?m)^STEPGATE_PUBLIC_KEYS=(\S+)`)

	// "Paste the curl line".
	p.prose("Paste the curl line")
	curl := command{line: submatch(t, banner, `(?m)^  (curl .*)$`), want: p.block("and answers", "json")}
	s.run(curl)

	journal := p.commands("In another terminal, read its journal")
	journal[len(journal)-1].want = p.block("", "")
	s.runAll(journal)

	// 2. The function, in refund/main.go, on a free port: the page's 9090 may be taken.
	refundAddr := "127.0.0.1:" + strconv.Itoa(freePort(t))
	s.replace("127.0.0.1:9090", refundAddr)
	s.replace("<the key dev printed>", key)
	code := p.block("Write this as `refund/main.go`", "go")
	require.NoError(t, os.MkdirAll(filepath.Join(s.dir, "refund"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(s.dir, "refund", "main.go"), []byte(s.expand(code)), 0o644))

	// 3. Register it and invoke it. The function's server is ready once it listens.
	s.listening = refundAddr
	s.runAll(p.commands("## 3. Register it and invoke it"))
	s.runAll(p.commands("or register one function by URL"))
	s.runAll(p.commands("To attach to it later"))

	// 5. The test on the page is examples/refundtest's, which go test runs.
	p.skip("## 5. Test it without a gateway", "go")
	p.done()
}

// TestTypeScriptQuickstart follows docs/quickstart-typescript.md on a fresh clone,
// making the npm packages from the checkout as the page says to before they are on
// npm: npmdist, create-stepgate, npm install (from the registry: npm must reach it), the
// dev gateway, the app's server, then sync, invoke and runs get.
func TestTypeScriptQuickstart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: the quickstart's test builds the npm packages and installs an app (tens of seconds)")
	}
	if _, err := exec.LookPath("npm"); err != nil {
		t.Skip("npm is not installed: the TypeScript quickstart's test needs npm, a registry it reaches, and Node 20.6 or later")
	}
	out, err := exec.Command("node", "--version").Output()
	require.NoError(t, err, "node --version: npm is installed, node is not: the TypeScript quickstart needs Node 20.6 or later")
	var major, minor int
	_, err = fmt.Sscanf(strings.TrimSpace(string(out)), "v%d.%d", &major, &minor)
	require.NoError(t, err, "node --version: %s", out)
	require.True(t, major > 20 || major == 20 && minor >= 6, "node %s: the TypeScript quickstart needs Node 20.6 or later (--env-file)", bytes.TrimSpace(out))

	p := readPage(t, "docs/quickstart-typescript.md")
	s := newSession(t, cloneRepo(t))

	// 1. Create the app: stepgate is not on npm yet, so from the checkout.
	p.skip("## 1. Create the app", "sh")
	s.runAll(p.commands("**Before stepgate is on npm**"))
	require.FileExists(t, filepath.Join(s.dir, "package.json"), "the commands end in my-app")
	app := s.dir

	// 2. Start the gateway, on a free port: the page's 8080 may be taken.
	gw := s.server(p.commands("## 2. Start the gateway")[0], "", " -- --addr 127.0.0.1:0")
	banner := gw.expect(t, p.block("It prints, among the rest:", ""))
	base := submatch(t, banner, `(?m)^  API +(http://\S+)/v1$`)
	s.replace("http://127.0.0.1:8080", base)
	key := submatch(t, banner, `(?m)^STEPGATE_PUBLIC_KEYS=(\S+)`)

	// The key goes in .env, as the page's line shows it.
	line := p.block("in `.env`:", "")
	line = regexp.MustCompile(`(?m)^(STEPGATE_PUBLIC_KEYS=)\S+$`).ReplaceAllString(line, "${1}"+key)
	env := filepath.Join(app, ".env")
	b, err := os.ReadFile(env)
	require.NoError(t, err)
	empty := regexp.MustCompile(`(?m)^STEPGATE_PUBLIC_KEYS=\n`)
	require.Regexp(t, empty, string(b), ".env has no empty STEPGATE_PUBLIC_KEYS line to fill")
	require.NoError(t, os.WriteFile(env, empty.ReplaceAll(b, []byte(line)), 0o600))

	// 3. Serve the function, on a free port (PORT, which src/server.ts reads): the
	// page's 3000 may be taken. npm run sync names the port too.
	port := strconv.Itoa(freePort(t))
	s.replace("127.0.0.1:3000", "127.0.0.1:"+port)
	pj := filepath.Join(app, "package.json")
	b, err = os.ReadFile(pj)
	require.NoError(t, err)
	require.Contains(t, string(b), "http://127.0.0.1:3000/", "package.json's sync script")
	require.NoError(t, os.WriteFile(pj, bytes.ReplaceAll(b, []byte("http://127.0.0.1:3000/"), []byte("http://127.0.0.1:"+port+"/")), 0o644))
	serve := p.commands("## 3. Serve the function")
	require.Len(t, serve, 1)
	s.server(serve[0], "PORT="+port+" ", "")
	p.skip("The function, in `src/functions.ts`", "ts") // TestQuickstartIsTheTemplate (npmdist) checks these two
	p.skip("and `src/server.ts`", "ts")

	// 4. Register it and run it, after the export line the gateway printed.
	p.prose("paste the `export STEPGATE_URL=… STEPGATE_TOKEN=…` line")
	s.run(command{line: submatch(t, banner, `(?m)^  (export STEPGATE_URL=.*)$`)})
	s.runAll(p.commands("## 4. Register it and run it"))
	p.done()
}

// --- The pages ------------------------------------------------------------------------

// block is a fenced code block of a page: its language, its text, and the prose
// between the block before it and it.
type block struct{ lang, text, before string }

var fence = regexp.MustCompile("(?ms)^```([a-z]*)\n(.*?)^```\n")

// page is a quickstart's code blocks, which the test takes in order.
type page struct {
	t      *testing.T
	name   string
	blocks []block
	taken  []bool
	next   int // the first block not taken or passed
}

func readPage(t *testing.T, name string) *page {
	root, err := repo.Root()
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	require.NoError(t, err)
	doc := string(b)
	p := &page{t: t, name: name}
	last := 0
	for _, m := range fence.FindAllStringSubmatchIndex(doc, -1) {
		p.blocks = append(p.blocks, block{lang: doc[m[2]:m[3]], text: doc[m[4]:m[5]], before: doc[last:m[0]]})
		last = m[1]
	}
	p.taken = make([]bool, len(p.blocks))
	return p
}

// block returns the text of the next block whose prose before it holds prose ("" for
// the very next block), which must be a block of lang.
func (p *page) block(prose, lang string) string {
	p.t.Helper()
	for i := p.next; i < len(p.blocks); i++ {
		if strings.Contains(p.blocks[i].before, prose) {
			require.Equal(p.t, lang, p.blocks[i].lang, "%s: the block after %q", p.name, prose)
			p.taken[i], p.next = true, i+1
			return p.blocks[i].text
		}
	}
	p.t.Fatalf("%s: no block after %q (the test follows the page: which step moved?)", p.name, prose)
	return ""
}

// prose checks that the page says prose before its next block.
func (p *page) prose(prose string) {
	p.t.Helper()
	require.True(p.t, p.next < len(p.blocks) && strings.Contains(p.blocks[p.next].before, prose), "%s: no %q before its block %d", p.name, prose, p.next+1)
}

// skip passes the next block after prose, which the test does not run.
func (p *page) skip(prose, lang string) { p.block(prose, lang) }

// commands returns the commands of the next sh block after prose.
func (p *page) commands(prose string) []command {
	return parseCommands(p.block(prose, "sh"))
}

// done fails the test for each block the test passed over without running or
// skipping it: a step the page gained, which the test must follow too.
func (p *page) done() {
	for i, taken := range p.taken {
		if !taken {
			p.t.Errorf("%s: the test does not follow its %s block %d, after %q: run it or skip it in the test", p.name, p.blocks[i].lang, i+1, lastLine(p.blocks[i].before))
		}
	}
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	return s[strings.LastIndex(s, "\n")+1:]
}

// command is a command line of an sh block (with its continuation lines), and the
// output the page shows for it: the comment lines right after it, without "# ".
type command struct{ line, want string }

func parseCommands(text string) []command {
	var cs []command
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if c, ok := strings.CutPrefix(l, "#"); ok && len(cs) > 0 {
			cs[len(cs)-1].want += strings.TrimPrefix(c, " ") + "\n"
			continue
		}
		for strings.HasSuffix(l, "\\") && i+1 < len(lines) {
			i++
			l += "\n" + lines[i]
		}
		cs = append(cs, command{line: l})
	}
	return cs
}

// --- Samples of output ------------------------------------------------------------------

// sampleParts are what a sample says in general: an id (a UUID: the sample's stands for
// the id the command printed, and commands after it that name the sample's id get that
// one), "…" (anything, in a line), a local address (any port), a time, a duration, a
// run of spaces (columns are as wide as their values), a public key.
var sampleParts = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|…|127\.0\.0\.1:\d+|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?Z?|\b[0-9.]+(?:ns|µs|ms|s|m|h)\b| +|STEPGATE_PUBLIC_KEYS=[A-Za-z0-9_-]{43}`)

const uuidPattern = `[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`

var uuid = regexp.MustCompile(uuidPattern)

// sampleRegexp turns a sample of output into a regular expression of the output that
// holds it: its lines in order, from the start of a line; a line "…" (or "...") stands
// for any number of lines. With whole, the output must end where the sample does.
// It returns the sample's ids, in the order of the regexp's groups.
func sampleRegexp(sample string, whole bool) (*regexp.Regexp, []string) {
	var re strings.Builder
	var ids []string
	re.WriteString(`(?m)^`)
	for line := range strings.SplitSeq(strings.TrimRight(sample, "\n"), "\n") {
		line = strings.TrimRight(line, " ")
		if t := strings.TrimSpace(line); t == "…" || t == "..." {
			re.WriteString(`(?:[^\n]*\n)*?`)
			continue
		}
		last := 0
		for _, m := range sampleParts.FindAllStringIndex(line, -1) {
			re.WriteString(regexp.QuoteMeta(line[last:m[0]]))
			part := line[m[0]:m[1]]
			switch {
			case uuid.MatchString(part):
				re.WriteString("(" + uuidPattern + ")")
				ids = append(ids, part)
			case part == "…":
				re.WriteString(`[^\n]*?`)
			case strings.HasPrefix(part, "127.0.0.1:"):
				re.WriteString(`127\.0\.0\.1:\d+`)
			case strings.HasPrefix(part, "STEPGATE_PUBLIC_KEYS="):
				re.WriteString(`STEPGATE_PUBLIC_KEYS=[A-Za-z0-9_-]{43}`)
			case strings.TrimSpace(part) == "":
				re.WriteString(` +`)
			case strings.Contains(part, ":"):
				re.WriteString(`\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:\.\d+)?Z?`)
			default:
				re.WriteString(`[0-9.]+(?:ns|µs|ms|s|m|h)(?:[0-9.]+(?:ns|µs|ms|s|m|h))*`)
			}
			last = m[1]
		}
		re.WriteString(regexp.QuoteMeta(line[last:]) + `\n`)
	}
	if whole {
		re.WriteString(`\z`)
	}
	return regexp.MustCompile(re.String()), ids
}

// tidy is output as a sample shows it: no spaces at the ends of lines, and one newline
// at the end.
func tidy(out string) string {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t\r")
	}
	return strings.TrimRight(strings.Join(lines, "\n"), "\n") + "\n"
}

func submatch(t *testing.T, s, re string) string {
	t.Helper()
	m := regexp.MustCompile(re).FindStringSubmatch(s)
	require.NotNil(t, m, "no %s in:\n%s", re, s)
	return m[1]
}

// --- A fresh clone ------------------------------------------------------------------------

// cloneRepo copies the repository's files as a fresh clone has them, with the working
// tree's changes and its new files not yet committed (git ls-files: tracked, or untracked
// and not ignored; so no node_modules, no build output, no .stepgate) into
// DIR/stepgate, and returns that path. DIR, which the commands may write beside the
// clone (../stepgate-npm), is reachable by the postgres OS user, as dev's private
// Postgres runs as that user when the test runs as root.
func cloneRepo(t *testing.T) string {
	t.Helper()
	root, err := repo.Root()
	require.NoError(t, err)
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	list, err := cmd.Output()
	require.NoError(t, err, "git ls-files in %s: the test copies the repository as a fresh clone has it", root)
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		require.NoError(t, os.Chmod(d, 0o711))
	}
	clone := filepath.Join(dir, "stepgate")
	for name := range strings.SplitSeq(strings.TrimSuffix(string(list), "\x00"), "\x00") {
		src := filepath.Join(root, filepath.FromSlash(name))
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the working tree, or not a file
		}
		dst := filepath.Join(clone, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(dst, b, fi.Mode().Perm()))
	}
	return clone
}

// --- The shell --------------------------------------------------------------------------

// session is a terminal of the user's: a working directory and an environment that the
// commands change (cd, export), each command run by bash.
type session struct {
	t         *testing.T
	dir       string
	env       []string
	replace   func(old, new string)
	expand    func(string) string
	ids       map[string]string // a sample's id → the id the command printed
	lastID    string            // the first id of the last output that held one: a page's <run id>, <id>
	listening string            // an address a background command listens on: the next command waits for it
}

func newSession(t *testing.T, dir string) *session {
	s := &session{t: t, dir: dir, ids: map[string]string{}}
	// A user's shell: no DATABASE_URL nor STEPGATE_* of the test's. The Go commands
	// build with -trimpath and without cgo, so that the builds of each clone (a new
	// directory each time) and npmdist's share the build cache.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STEPGATE_") && !strings.HasPrefix(kv, "DATABASE_URL=") && !strings.HasPrefix(kv, "GOFLAGS=") && !strings.HasPrefix(kv, "CGO_ENABLED=") {
			s.env = append(s.env, kv)
		}
	}
	s.env = append(s.env, "GOFLAGS=-trimpath", "CGO_ENABLED=0")
	var pairs []string
	s.replace = func(old, new string) { pairs = append(pairs, old, new) }
	s.expand = func(line string) string {
		line = strings.NewReplacer(pairs...).Replace(line)
		for sample, id := range s.ids {
			line = strings.ReplaceAll(line, sample, id)
		}
		if s.lastID != "" {
			line = strings.NewReplacer("<run id>", s.lastID, "<id>", s.lastID).Replace(line)
		}
		return line
	}
	return s
}

func (s *session) runAll(cs []command) {
	for _, c := range cs {
		s.run(c)
	}
}

// run runs c, as bash does in the session's directory and environment, and takes over
// the directory and environment it leaves. It fails the test when c fails, or when its
// output is not what c.want shows. A command ending in & starts in the background.
func (s *session) run(c command) {
	t := s.t
	t.Helper()
	line := s.expand(c.line)
	if bg, ok := strings.CutSuffix(strings.TrimSpace(line), "&"); ok {
		s.start(bg, "")
		return
	}
	if s.listening != "" {
		waitListening(t, s.listening)
		s.listening = ""
	}
	state := filepath.Join(t.TempDir(), "state")
	script := line + "\n__rc=$?\npwd > '" + state + ".pwd'\nenv -0 > '" + state + ".env'\nexit $__rc\n"
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.Dir, cmd.Env = s.dir, s.env
	started := time.Now()
	b, err := cmd.CombinedOutput()
	out := string(b)
	t.Logf("$ %s  (in %s, %s)\n%s", line, s.dir, time.Since(started).Round(time.Millisecond), out)
	require.NoError(t, err, "%s", line)
	pwd, err := os.ReadFile(state + ".pwd")
	require.NoError(t, err)
	s.dir = strings.TrimSpace(string(pwd))
	env, err := os.ReadFile(state + ".env")
	require.NoError(t, err)
	s.env = strings.Split(strings.TrimSuffix(string(env), "\x00"), "\x00")
	if c.want != "" {
		s.check(line, out, c.want, true)
	}
	if id := uuid.FindString(out); id != "" {
		s.lastID = id
	}
}

// check checks that out holds the sample want (ending with it, if whole), and maps the
// sample's ids to the output's.
func (s *session) check(line, out, want string, whole bool) {
	s.t.Helper()
	re, ids := sampleRegexp(want, whole)
	m := re.FindStringSubmatch(tidy(out))
	if m == nil {
		s.t.Errorf("the page's sample of %s's output is not what it prints.\nThe page:\n%s\nThe output:\n%s", line, want, out)
		// Go on with the ids in the order they come.
		m = append([]string{""}, uuid.FindAllString(out, len(ids))...)
	}
	for i, id := range ids {
		if i+1 < len(m) {
			s.ids[id] = m[i+1]
		}
	}
}

// server starts c, a command that runs until stopped (a gateway, a server of
// functions), with prefix before it and suffix after it, and checks its output against
// c.want as it comes.
func (s *session) server(c command, prefix, suffix string) *process {
	s.t.Helper()
	p := s.start(prefix+s.expand(c.line)+suffix, c.line)
	if c.want != "" {
		p.expect(s.t, c.want)
	}
	return p
}

// start starts line with bash in the session's directory and environment, in a process
// group of its own, which the test's cleanup terminates.
func (s *session) start(line, name string) *process {
	t := s.t
	t.Helper()
	p := &process{name: cmpOr(name, line), grew: make(chan struct{}), exited: make(chan struct{})}
	p.cmd = exec.Command("bash", "-c", line)
	p.cmd.Dir, p.cmd.Env = s.dir, s.env
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, w, err := os.Pipe()
	require.NoError(t, err)
	p.cmd.Stdout, p.cmd.Stderr = w, w
	require.NoError(t, p.cmd.Start())
	w.Close()
	go p.read(r)
	t.Cleanup(func() {
		pgid := p.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGINT)
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.exited
		}
		t.Logf("$ %s  (in the background)\n%s", line, p.output())
	})
	return p
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func freePort(t *testing.T) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// waitListening waits up to 5 minutes (a go run may build first) for addr to accept
// connections.
func waitListening(t *testing.T, addr string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("nothing listens on %s after 5 minutes: %v", addr, err)
		}
		select {
		case <-time.After(100 * time.Millisecond): // polls a port: nothing to wait on
		case <-t.Context().Done():
			t.Fatal(t.Context().Err())
		}
	}
}

// process is a command running in the background, whose output the test reads.
type process struct {
	name   string
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    strings.Builder
	grew   chan struct{} // closed and replaced each time out grows
	exited chan struct{}
	err    error // set when exited is closed
}

func (p *process) read(r io.Reader) {
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
}

func (p *process) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// expect waits up to 10 minutes (a go run may build first) for the process's output to
// hold the sample want, and returns the output.
func (p *process) expect(t *testing.T, want string) string {
	t.Helper()
	re, _ := sampleRegexp(want, false)
	deadline := time.After(10 * time.Minute)
	for exited := false; ; {
		p.mu.Lock()
		out, grew := p.out.String(), p.grew
		p.mu.Unlock()
		if re.MatchString(tidy(out)) {
			return out
		}
		if exited {
			t.Fatalf("%s exited (%v) without printing the page's sample:\n%s\nIt printed:\n%s", p.name, p.err, want, out)
		}
		select {
		case <-grew:
		case <-p.exited:
			exited = true // its whole output is in: look once more
		case <-deadline:
			t.Fatalf("%s did not print the page's sample within 10 minutes:\n%s\nIt printed:\n%s", p.name, want, out)
		}
	}
}

// TestSampleRegexp checks how a page's sample is compared with what a command printed:
// the sample of `runs get` the Go quickstart had before the test (a function line of
// the older form) does not match, and the page's sample does.
func TestSampleRegexp(t *testing.T) {
	t.Parallel()
	out := `run                 01a252be-1cce-71ec-aa22-0cc6aab9d4ea
function            orders.checkout@1
status              completed
identity            subject dev, tenant default, roles admin,stepgate-operator
finished            2026-12-07 23:02:00.760 UTC (took 97ms)

journal (1 entry):
  1  step  reserve  {"order_id":"01a252be-1cce-71ec-aa22-0cc6aab9d4ea","reserve…  attempt 1  949µs
`
	re, ids := sampleRegexp(`run       01a22695-50c6-78c3-842a-34f7cc3d78ac
function  orders.checkout (revision 1)
...
journal
  1  step   reserve   {"order_id":"01a2…","reserved":true}   attempt 1
`, true)
	require.Nil(t, re.FindStringSubmatch(out), "the sample of the older form matches")
	require.Equal(t, []string{"01a22695-50c6-78c3-842a-34f7cc3d78ac"}, ids)

	re, ids = sampleRegexp(`run  01a22695-50c6-78c3-842a-34f7cc3d78ac
function  orders.checkout@1
…
finished  2026-12-01 10:00:00.000 UTC (took 3s)

journal (1 entry):
  1  step  reserve  {"order_id":"…","reserve…  attempt 1  1ms
`, true)
	m := re.FindStringSubmatch(out)
	require.NotNil(t, m, "%s", re)
	require.Equal(t, []string{"01a22695-50c6-78c3-842a-34f7cc3d78ac"}, ids)
	require.Equal(t, "01a252be-1cce-71ec-aa22-0cc6aab9d4ea", m[1], "the run's id, for the sample's")
	// The whole output: a line the sample does not show fails it.
	require.Nil(t, re.FindStringSubmatch(out+"recoveries 0\n"))
	re, _ = sampleRegexp("functions served at http://127.0.0.1:3000/ (register them: npm run sync)\n", false)
	require.True(t, re.MatchString("\n> my-app@0.1.0 dev\n\nfunctions served at http://127.0.0.1:41234/ (register them: npm run sync)\nmore\n"))
}
