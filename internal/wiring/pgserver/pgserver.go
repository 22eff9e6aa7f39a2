// Package pgserver runs a private PostgreSQL server from the Postgres binaries installed
// on the machine, for `stepgate dev` and for tests.
//
// The server is a child process of the caller. On Linux it is started with a parent-death
// signal, so it shuts down when the caller dies, even from SIGKILL: a private server is
// never left behind. (Elsewhere, macOS say, a server whose caller was killed runs on until
// it is stopped.) Its data survives: starting again on the same directory reuses it.
package pgserver

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Config configures [Start].
type Config struct {
	// Dir holds the server: its data directory (Dir/data), its log (Dir/postgres.log)
	// and its unix socket. It is created if missing. Required.
	Dir string

	// Port, when positive, makes the server also listen on 127.0.0.1:Port. Otherwise it
	// listens on its unix socket only.
	Port int

	// BinDir is the directory of the initdb and postgres binaries. Defaults to
	// DefaultSearch's: the binaries matching an existing data directory's version, else
	// postgres on $PATH's, pg_config's, or the newest in PackageDirs.
	BinDir string

	// Logger receives the server's lifecycle events. Defaults to discarding them.
	Logger *slog.Logger

	// MaxConnections is the server's max_connections. Defaults to 200.
	MaxConnections int

	// Settings are more server settings, each "name=value" (as postgres -c takes them),
	// applied after the defaults, so they win: synchronous_standby_names, say.
	Settings []string
}

// Server is a running private PostgreSQL server. Its superuser is postgres, and every
// local connection is trusted.
type Server struct {
	dir    string
	port   int
	binDir string
	cmd    *exec.Cmd
	log    *slog.Logger
	cfg    Config // as started, for a restart

	stopOnce sync.Once
	stopErr  error
}

const (
	// The fixed socket port when the server has no TCP port: each server has its own
	// socket directory, so they never collide.
	defaultPort = 5432
	// Past this, Stop turns a fast shutdown into an immediate one.
	stopTimeout = 30 * time.Second
	// How long Start waits for the orphaned processes of a killed server to exit.
	orphanTimeout = 30 * time.Second
	// The longest unix socket path Linux accepts (sun_path less its NUL).
	maxSocketPath = 107
)

// Start starts a server in cfg.Dir and returns once it accepts connections. It runs
// initdb first when the data directory does not exist yet, and reuses it otherwise.
//
// The server settings are durable (fsync and synchronous_commit stay on); they allow 200
// connections and 128MB of shared buffers. When the caller runs as root, the server runs
// as the postgres OS user, which must exist and be able to reach cfg.Dir; cfg.Dir is then
// owned by that user.
//
// A postmaster.pid left by a dead server is not an obstacle: Start waits for the
// orphans of a killed server to exit. If a server still runs on cfg.Dir, Start returns
// an error. ctx bounds the start only; the server runs until [Server.Stop] or until the
// caller's process exits.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("pgserver: Config.Dir is required")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("pgserver: resolve dir: %w", err)
	}
	s := &Server{
		dir:  dir,
		port: cmp.Or(cfg.Port, defaultPort),
		log:  cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)).With(slog.String("pg_dir", dir)),
		cfg:  cfg,
	}
	if socket := s.socketPath() + ".lock"; len(socket) > maxSocketPath {
		return nil, fmt.Errorf("pgserver: socket path %s is longer than %d bytes: choose a shorter dir", socket, maxSocketPath)
	}
	cred, err := makeDir(dir)
	if err != nil {
		return nil, err
	}

	dataDir := filepath.Join(dir, "data")
	version, err := dataVersion(dataDir)
	if err != nil {
		return nil, err
	}
	binDir, err := findBinDir(cfg.BinDir, version)
	if err != nil {
		return nil, err
	}
	s.binDir = binDir
	logFile, err := os.OpenFile(s.LogPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pgserver: open log: %w", err)
	}
	defer logFile.Close() // the child has its own descriptor
	if cred != nil {
		if err := logFile.Chown(int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgserver: chown log: %w", err)
		}
	}

	if version == "" {
		start := time.Now()
		initdb := s.command(filepath.Join(binDir, "initdb"), cred, logFile,
			"-D", dataDir, "--auth=trust", "--username=postgres", "--encoding=UTF8", "--locale=C", "--no-sync")
		if err := initdb.Run(); err != nil {
			return nil, fmt.Errorf("pgserver: initdb: %w%s", err, s.logTail())
		}
		s.log.InfoContext(ctx, "postgres initialized", slog.Duration("took", time.Since(start)))
	} else if err := checkVersion(binDir, version); err != nil {
		return nil, err
	}
	if err := s.clearStale(ctx, dataDir); err != nil {
		return nil, err
	}

	listen := ""
	if cfg.Port > 0 {
		listen = "127.0.0.1"
	}
	start := time.Now()
	args := []string{
		"-D", dataDir,
		"-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=" + listen,
		"-c", "unix_socket_directories=" + dir,
		"-c", "max_connections=" + strconv.Itoa(cmp.Or(cfg.MaxConnections, 200)),
		"-c", "shared_buffers=128MB",
	}
	for _, kv := range cfg.Settings {
		args = append(args, "-c", kv)
	}
	s.cmd = s.command(filepath.Join(binDir, "postgres"), cred, logFile, args...)
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgserver: start postgres: %w", err)
	}
	if err := s.waitReady(ctx); err != nil {
		return nil, errors.Join(err, s.Stop())
	}
	s.log.InfoContext(ctx, "postgres started", slog.Int("pid", s.PID()), slog.Duration("took", time.Since(start)))
	return s, nil
}

// URL returns the URL of database dbname on the server's unix socket, as user postgres.
// pgx and libpq parse it.
func (s *Server) URL(dbname string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Path:     "/" + dbname,
		RawQuery: url.Values{"host": {s.dir}, "port": {strconv.Itoa(s.port)}, "sslmode": {"disable"}}.Encode(),
	}
	return u.String()
}

// BinDir returns the directory of the server's binaries (pg_dump and psql are beside
// postgres there).
func (s *Server) BinDir() string { return s.binDir }

// PID returns the process id of the postmaster.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// LogPath returns the path of the file that receives the server's output.
func (s *Server) LogPath() string { return filepath.Join(s.dir, "postgres.log") }

// Stop shuts the server down (fast shutdown: open transactions roll back) and waits for
// it to exit. After 30s it escalates to an immediate shutdown. It returns an error if
// the server did not exit cleanly, for example because it had crashed. Later calls
// return the same result.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() { s.stopErr = s.stop() })
	return s.stopErr
}

func (s *Server) stop() error {
	start := time.Now()
	if err := s.cmd.Process.Signal(syscall.SIGINT); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("pgserver: signal postgres: %w", err)
	}
	escalate := time.AfterFunc(stopTimeout, func() { _ = s.cmd.Process.Signal(syscall.SIGQUIT) })
	defer escalate.Stop()
	if err := s.cmd.Wait(); err != nil {
		return fmt.Errorf("pgserver: postgres (pid %d) exited: %w%s", s.PID(), err, s.logTail())
	}
	s.log.Info("postgres stopped", slog.Int("pid", s.PID()), slog.Duration("took", time.Since(start)))
	return nil
}

func (s *Server) socketPath() string {
	return filepath.Join(s.dir, ".s.PGSQL."+strconv.Itoa(s.port))
}

// command returns a command that runs as cred (nil: as the caller) and dies with the
// caller.
func (s *Server) command(path string, cred *syscall.Credential, out *os.File, args ...string) *exec.Cmd {
	cmd := exec.Command(path, args...)
	cmd.Dir = s.dir // the postgres user may not be allowed into the caller's working dir
	cmd.Env = slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, "PG") })
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr(cred)
	return cmd
}

// waitReady waits until the server accepts connections, or fails if it exits first.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cfg, err := pgconn.ParseConfig(s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgserver: parse own url: %w", err)
	}
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		conn, err := pgconn.ConnectConfig(ctx, cfg)
		if err == nil {
			return conn.Close(ctx)
		}
		if exited(s.PID()) {
			return fmt.Errorf("pgserver: postgres exited during start: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgserver: wait for postgres to accept connections: %w (last: %w)", ctx.Err(), err)
		case <-tick.C:
		}
	}
}

// clearStale makes the way for a server on dataDir. postgres itself ignores a
// postmaster.pid whose process is gone, but it refuses to start when the pid was reused
// by an unrelated process, or while the orphaned children of a killed postmaster still
// hold its shared memory. Processes of a server on dataDir are those whose working
// directory is dataDir: the postmaster moves there, and its children inherit it.
func (s *Server) clearStale(ctx context.Context, dataDir string) error {
	pidFile := filepath.Join(dataDir, "postmaster.pid")
	b, err := os.ReadFile(pidFile)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pgserver: read postmaster.pid: %w", err)
	}
	line, _, _ := bytes.Cut(b, []byte("\n"))
	if pid, err := strconv.Atoi(strings.TrimSpace(string(line))); err == nil && pid > 0 && alive(pid) {
		if runsIn(pid, dataDir) {
			return fmt.Errorf("pgserver: a postgres (pid %d) already runs on %s", pid, dataDir)
		}
		s.log.InfoContext(ctx, "postgres lock file names an unrelated process", slog.Int("pid", pid))
		if err := os.Remove(pidFile); err != nil {
			return fmt.Errorf("pgserver: remove stale postmaster.pid: %w", err)
		}
	}

	ctx, cancel := context.WithTimeout(ctx, orphanTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for waited := false; ; waited = true {
		orphans, err := processesIn(dataDir)
		if err != nil {
			return err
		}
		if len(orphans) == 0 {
			return nil
		}
		if !waited {
			s.log.InfoContext(ctx, "postgres waits for the processes of a dead server to exit", slog.Any("pids", orphans))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgserver: wait for processes %v of a dead postgres to exit: %w", orphans, ctx.Err())
		case <-tick.C:
		}
	}
}

// logTail returns the end of the server log, to explain a failure.
func (s *Server) logTail() string {
	f, err := os.Open(s.LogPath())
	if err != nil {
		return ""
	}
	defer f.Close()
	const max = 2048
	if fi, err := f.Stat(); err == nil && fi.Size() > max {
		_, _ = f.Seek(-max, io.SeekEnd)
	}
	b, _ := io.ReadAll(f)
	if len(b) == 0 {
		return ""
	}
	return fmt.Sprintf("; end of %s:\n%s", s.LogPath(), bytes.TrimSpace(b))
}

// makeDir creates dir, a server's directory, if missing, and returns the credential the
// server's processes run as (nil: as the caller); when it is another user's, dir must be
// reachable by that user and is made theirs.
func makeDir(dir string) (*syscall.Credential, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pgserver: create dir: %w", err)
	}
	cred, err := credential()
	if err != nil || cred == nil {
		return cred, err
	}
	if err := checkReachable(dir, cred); err != nil {
		return nil, err
	}
	if err := chownAll(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		return nil, err
	}
	return cred, nil
}

// credential returns the postgres OS user's credential when the caller is root, as
// postgres refuses to run as root, and nil otherwise.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgserver: running as root needs a postgres OS user: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("pgserver: postgres OS user: %w", err)
	}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	groups, err := u.GroupIds()
	if err != nil {
		return nil, fmt.Errorf("pgserver: groups of postgres OS user: %w", err)
	}
	for _, g := range groups {
		if id, err := strconv.ParseUint(g, 10, 32); err == nil {
			cred.Groups = append(cred.Groups, uint32(id))
		}
	}
	return cred, nil
}

// checkReachable returns an error unless cred may traverse every parent of dir.
func checkReachable(dir string, cred *syscall.Credential) error {
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("pgserver: stat parent dir: %w", err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return nil
		}
		perm := fi.Mode().Perm()
		var bit fs.FileMode
		switch {
		case st.Uid == cred.Uid:
			bit = 0o100
		case st.Gid == cred.Gid || slices.Contains(cred.Groups, st.Gid):
			bit = 0o010
		default:
			bit = 0o001
		}
		if perm&bit == 0 {
			return fmt.Errorf("pgserver: the postgres OS user cannot reach %s: %s is %s; choose a dir it can reach", dir, p, perm)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// chownAll gives dir and everything in it to uid:gid.
func chownAll(dir string, uid, gid int) error {
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) == uid && int(st.Gid) == gid {
			return nil
		}
		return os.Lchown(path, uid, gid)
	})
	if err != nil {
		return fmt.Errorf("pgserver: chown dir to postgres: %w", err)
	}
	return nil
}

// dataVersion returns the major version of the data directory, or "" if it is not
// initialized.
func dataVersion(dataDir string) (string, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "PG_VERSION"))
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("pgserver: read data version: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// ErrNoBinaries is Start's error when Config.BinDir is empty and DefaultSearch finds no
// server binaries.
var ErrNoBinaries = errors.New("pgserver: no PostgreSQL binaries found: install PostgreSQL or set Config.BinDir")

// findBinDir returns binDir if set, else DefaultSearch's directory for the data
// directory's major version.
func findBinDir(binDir, version string) (string, error) {
	if binDir != "" {
		return binDir, nil
	}
	if dir := DefaultSearch(os.Getenv).BinDir(version); dir != "" {
		return dir, nil
	}
	return "", ErrNoBinaries
}

// checkVersion returns an error unless the binaries in binDir can run a data directory
// of major version want.
func checkVersion(binDir, want string) error {
	out, err := exec.Command(filepath.Join(binDir, "postgres"), "--version").Output()
	if err != nil {
		return fmt.Errorf("pgserver: postgres --version: %w", err)
	}
	// "postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)"
	fields := strings.Fields(string(out))
	if len(fields) < 3 {
		return fmt.Errorf("pgserver: postgres --version: unexpected %q", out)
	}
	have, _, _ := strings.Cut(fields[2], ".")
	if have != want {
		return fmt.Errorf("pgserver: the data directory is for PostgreSQL %s but %s holds PostgreSQL %s", want, binDir, fields[2])
	}
	return nil
}

// alive reports whether a process pid exists, whoever owns it.
func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
