// Package programtest builds the example programs of examples/ and runs them in their
// tests, as a reader who copied one would: a binary of their own, configured by the
// environment.
package programtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stepgate/stepgate/internal/tooling/repo"
	"github.com/stretchr/testify/require"
)

// Build builds the main package pkg (a directory relative to the module's root, like
// "examples/refund") into a binary in a temporary directory, and returns the binary's
// path. Each file of pkg named in replace (by its name in pkg) is built with the text
// replace gives it instead of its own (go build -overlay), so that a test can change
// what a program hard-codes, its address, without a copy of it to keep in step. Build
// runs offline: every import comes from this module or its go.mod.
func Build(t testing.TB, pkg string, replace map[string]string) string {
	t.Helper()
	root := ModuleRoot(t)
	tmp := t.TempDir()
	bin := filepath.Join(tmp, filepath.Base(pkg))
	args := []string{"build", "-o", bin}
	if len(replace) > 0 {
		overlay := map[string]string{}
		for name, text := range replace {
			orig := filepath.Join(root, pkg, name)
			_, err := os.Stat(orig)
			require.NoError(t, err, "the replaced file must exist")
			repl := filepath.Join(tmp, "overlay-"+name)
			require.NoError(t, os.WriteFile(repl, []byte(text), 0o644))
			overlay[orig] = repl
		}
		js, err := json.Marshal(map[string]any{"Replace": overlay})
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(tmp, "overlay.json"), js, 0o644))
		args = append(args, "-overlay", filepath.Join(tmp, "overlay.json"))
	}
	cmd := exec.Command("go", append(args, "./"+filepath.ToSlash(pkg))...)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-mod=readonly")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build ./%s:\n%s", pkg, out)
	return bin
}

// Process is a program started by [Start].
type Process struct {
	cmd      *exec.Cmd
	out      output
	exited   chan struct{}
	exitCode int // once exited is closed
}

// output keeps what a program writes: stdout and stderr together, as a terminal shows
// them, and stdout alone. exec copies each from a goroutine of its own.
type output struct {
	mu          sync.Mutex
	all, stdout bytes.Buffer
}

// writer writes to o's buffers, to stdout too when stdout is true.
type writer struct {
	o      *output
	stdout bool
}

func (w writer) Write(p []byte) (int, error) {
	w.o.mu.Lock()
	defer w.o.mu.Unlock()
	if w.stdout {
		w.o.stdout.Write(p)
	}
	return w.o.all.Write(p)
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.all.String()
}

// Start starts bin with env added to the test's environment. It is killed when the test
// ends, if it still runs then, and what it wrote is logged if the test failed.
func Start(t testing.TB, bin string, env ...string) *Process {
	t.Helper()
	p := &Process{cmd: exec.Command(bin), exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = writer{&p.out, true}, writer{&p.out, false}
	require.NoError(t, p.cmd.Start())
	go func() {
		p.cmd.Wait()
		p.exitCode = p.cmd.ProcessState.ExitCode()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("%s said:\n%s", filepath.Base(bin), p.out.String())
		}
	})
	return p
}

// Wait waits for the program to exit, for at most d, and returns its exit code, its
// stdout, and all it wrote (stdout and stderr); it fails the test if it has not exited
// by then.
func (p *Process) Wait(t testing.TB, d time.Duration) (code int, stdout, all string) {
	t.Helper()
	select {
	case <-p.exited:
		return p.exitCode, p.out.stdout.String(), p.out.String()
	case <-time.After(d):
		t.Fatalf("the program did not exit in %s", d)
		return 0, "", ""
	}
}

// AwaitListen returns once the program listens on addr (true), or once it has exited
// because another process took addr first (false, the port was free when the test
// picked it). It fails the test if the program exited otherwise, or does not listen
// within 30 s.
func (p *Process) AwaitListen(t testing.TB, addr string) bool {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			require.Contains(t, p.out.String(), "address already in use", "the program exited")
			return false
		default:
		}
		if listensOn(t, p.cmd.Process.Pid, addr) {
			return true
		}
		select {
		case <-p.exited:
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("the program did not listen on %s in 30s", addr)
	return false
}

// listensOn reports whether process pid holds the listening TCP socket of addr (IPv4),
// from /proc: a listener of another process on addr does not count.
func listensOn(t testing.TB, pid int, addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	n, err := strconv.Atoi(port)
	require.NoError(t, err)
	table, err := os.ReadFile("/proc/net/tcp")
	require.NoError(t, err)
	inode := ""
	for line := range strings.Lines(string(table)) {
		f := strings.Fields(line)
		// local_address is HEX_IP:HEX_PORT; state 0A is LISTEN; the inode is field 9.
		if len(f) > 9 && f[3] == "0A" && strings.HasSuffix(f[1], fmt.Sprintf(":%04X", n)) {
			inode = f[9]
		}
	}
	if inode == "" {
		return false
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false // it exited
	}
	for _, fd := range fds {
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && link == "socket:["+inode+"]" {
			return true
		}
	}
	return false
}

// FreeAddr returns a loopback address with a port no one listens on now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// ModuleRoot is the repository's root (repo.Root), or the test fails.
func ModuleRoot(t testing.TB) string {
	t.Helper()
	root, err := repo.Root()
	require.NoError(t, err)
	return root
}
