package pgserver_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stepgate/stepgate/internal/wiring/pgserver"
)

// helperDirEnv makes the test binary a helper process that starts a server in the
// named dir, prints its pid and waits to be killed.
const helperDirEnv = "PGSERVER_TEST_HELPER_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(helperDirEnv); dir != "" {
		os.Exit(helper(dir))
	}
	goleak.VerifyTestMain(m)
}

func helper(dir string) int {
	s, err := pgserver.Start(context.Background(), pgserver.Config{Dir: dir})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("pid %d\n", s.PID())
	_, _ = io.Copy(io.Discard, os.Stdin) // until killed; EOF if the test died
	return 0
}

func TestStart(t *testing.T) {
	t.Parallel()

	t.Run("ServesDurablyOnItsSocket", func(t *testing.T) {
		t.Parallel()
		s := start(t, tempDir(t), 0)
		conn := connect(t, s.URL("postgres"))

		settings := map[string]string{}
		for _, name := range []string{"fsync", "synchronous_commit", "full_page_writes", "max_connections", "shared_buffers", "listen_addresses", "server_encoding"} {
			var v string
			require.NoError(t, conn.QueryRow(t.Context(), "SELECT current_setting($1)", name).Scan(&v))
			settings[name] = v
		}
		require.Equal(t, map[string]string{
			"fsync": "on", "synchronous_commit": "on", "full_page_writes": "on",
			"max_connections": "200", "shared_buffers": "128MB", "listen_addresses": "", "server_encoding": "UTF8",
		}, settings)
		var user string
		require.NoError(t, conn.QueryRow(t.Context(), "SELECT current_user").Scan(&user))
		require.Equal(t, "postgres", user)
	})

	t.Run("ListensOnPort", func(t *testing.T) {
		t.Parallel()
		port := freePort(t)
		s := start(t, tempDir(t), port)
		connect(t, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port))
		connect(t, s.URL("postgres"))
	})

	t.Run("KeepsDataAcrossRestarts", func(t *testing.T) {
		t.Parallel()
		dir := tempDir(t)
		s := start(t, dir, 0)
		_, err := connect(t, s.URL("postgres")).Exec(t.Context(), "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)")
		require.NoError(t, err)
		require.NoError(t, s.Stop())
		require.NoError(t, s.Stop(), "a second Stop returns the first result")

		s = start(t, dir, 0)
		requireKept(t, s)
	})

	t.Run("RecoversAfterServerKilled", func(t *testing.T) {
		t.Parallel()
		dir := tempDir(t)
		s := start(t, dir, 0)
		conn := connect(t, s.URL("postgres"))
		_, err := conn.Exec(t.Context(), "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)")
		require.NoError(t, err)

		// Its postmaster.pid stays, and its orphaned backends outlive it for a moment.
		require.NoError(t, syscall.Kill(s.PID(), syscall.SIGKILL))
		require.ErrorContains(t, s.Stop(), "killed")
		require.FileExists(t, filepath.Join(dir, "data", "postmaster.pid"))

		s = start(t, dir, 0)
		requireKept(t, s)
	})

	t.Run("IgnoresStaleLockFile", func(t *testing.T) {
		t.Parallel()
		exited := exec.Command(os.Args[0], "-test.run=^$")
		require.NoError(t, exited.Run())

		for name, pid := range map[string]int{
			"DeadProcess":      exited.Process.Pid,
			"UnrelatedProcess": 1,
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				dir := tempDir(t)
				require.NoError(t, start(t, dir, 0).Stop())
				pidFile := filepath.Join(dir, "data", "postmaster.pid")
				require.NoError(t, os.WriteFile(pidFile, fmt.Appendf(nil, "%d\n%s\n", pid, filepath.Join(dir, "data")), 0o600))

				connect(t, start(t, dir, 0).URL("postgres"))
			})
		}
	})

	t.Run("RefusesRunningServer", func(t *testing.T) {
		t.Parallel()
		dir := tempDir(t)
		s := start(t, dir, 0)

		_, err := pgserver.Start(t.Context(), pgserver.Config{Dir: dir})
		require.ErrorContains(t, err, "already runs")
		connect(t, s.URL("postgres"))
	})

	t.Run("RefusesUnreachableDirAsRoot", func(t *testing.T) {
		t.Parallel()
		if os.Geteuid() != 0 {
			t.Skip("only root runs the server as another user")
		}
		parent := t.TempDir()
		require.NoError(t, os.Chmod(parent, 0o700))

		_, err := pgserver.Start(t.Context(), pgserver.Config{Dir: filepath.Join(parent, "pg")})
		require.ErrorContains(t, err, "cannot reach")
	})
}

// TestParentDeathStopsServer kills a process that started a server with SIGKILL, which
// it cannot handle, and checks that the server stops anyway.
func TestParentDeathStopsServer(t *testing.T) {
	t.Parallel()
	dir := tempDir(t)
	helper := exec.Command(os.Args[0])
	helper.Env = append(os.Environ(), helperDirEnv+"="+dir)
	stdin, err := helper.StdinPipe()
	require.NoError(t, err)
	defer stdin.Close()
	stdout, err := helper.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	helper.Stderr = &stderr
	require.NoError(t, helper.Start())

	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "helper: %s", &stderr)
	pid, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(line, "pid ")))
	require.NoError(t, err, line)
	require.True(t, running(pid))

	require.NoError(t, helper.Process.Kill())
	require.ErrorContains(t, helper.Wait(), "killed")

	dataDir := filepath.Join(dir, "data")
	require.Eventually(t, func() bool { return !running(pid) && len(processesIn(dataDir)) == 0 },
		30*time.Second, 10*time.Millisecond, "postmaster %d or its children outlived their parent", pid)

	connect(t, start(t, dir, 0).URL("postgres"))
}

// tempDir returns a new directory that the postgres OS user can reach, as the parent
// of [testing.T.TempDir] is private to its owner.
func tempDir(t *testing.T) string {
	dir := t.TempDir()
	require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711))
	return dir
}

func start(t *testing.T, dir string, port int) *pgserver.Server {
	t.Helper()
	s, err := pgserver.Start(t.Context(), pgserver.Config{
		Dir:    dir,
		Port:   port,
		Logger: slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Stop() }) // the error is checked by the tests that stop
	return s
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	require.NoError(t, conn.Ping(t.Context()))
	return conn
}

func requireKept(t *testing.T, s *pgserver.Server) {
	t.Helper()
	var v int
	require.NoError(t, connect(t, s.URL("postgres")).QueryRow(t.Context(), "SELECT v FROM kept").Scan(&v))
	require.Equal(t, 42, v)
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// running reports whether process pid exists and is not a zombie: when its parent
// died, it belongs to an init that may not reap it.
func running(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// "pid (comm) state ..."; comm may hold spaces.
	_, rest, _ := bytes.Cut(stat, []byte(") "))
	return len(rest) > 0 && rest[0] != 'Z'
}

// processesIn returns the live processes whose working directory is dir: a server's.
func processesIn(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if cwd, _ := os.Readlink("/proc/" + e.Name() + "/cwd"); cwd == dir && running(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}
