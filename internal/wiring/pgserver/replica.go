package pgserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// StartStandby makes a streaming standby of primary in cfg.Dir and starts it: a base
// backup of primary (pg_basebackup, with the WAL it needs), then standby.signal and a
// primary_conninfo that names the standby name (its application_name, which the
// primary's synchronous_standby_names may list). The standby follows the primary's WAL
// from then on and accepts read-only connections (hot standby). cfg.Dir must not hold a
// data directory yet; cfg.BinDir defaults to the primary's.
func StartStandby(ctx context.Context, primary *Server, name string, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("pgserver: Config.Dir is required")
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("pgserver: resolve dir: %w", err)
	}
	dataDir := filepath.Join(dir, "data")
	if _, err := os.Stat(dataDir); err == nil {
		return nil, fmt.Errorf("pgserver: %s exists: a standby is made from a new base backup", dataDir)
	}
	cred, err := makeDir(dir)
	if err != nil {
		return nil, err
	}
	if cfg.BinDir == "" {
		cfg.BinDir = primary.binDir
	}
	backup := &Server{dir: dir}
	log, err := os.OpenFile(filepath.Join(dir, "basebackup.log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pgserver: open log: %w", err)
	}
	defer log.Close()
	conninfo := fmt.Sprintf("host=%s port=%d user=postgres application_name=%s", primary.dir, primary.port, name)
	start := time.Now()
	cmd := backup.command(filepath.Join(cfg.BinDir, "pg_basebackup"), cred, log,
		"-D", dataDir, "-X", "stream", "--checkpoint=fast", "--no-sync", "-d", conninfo)
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		b, _ := os.ReadFile(log.Name())
		return nil, fmt.Errorf("pgserver: pg_basebackup: %w: %s", err, b)
	}
	if err := os.WriteFile(filepath.Join(dataDir, "standby.signal"), nil, 0o600); err != nil {
		return nil, fmt.Errorf("pgserver: write standby.signal: %w", err)
	}
	auto, err := os.OpenFile(filepath.Join(dataDir, "postgresql.auto.conf"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pgserver: open postgresql.auto.conf: %w", err)
	}
	_, err = fmt.Fprintf(auto, "primary_conninfo = '%s'\n", conninfo)
	if cerr := auto.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("pgserver: write primary_conninfo: %w", err)
	}
	if cred != nil {
		if err := chownAll(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	s, err := Start(ctx, cfg)
	if err != nil {
		return nil, err
	}
	s.log.InfoContext(ctx, "postgres standby started", slog.String("primary", primary.dir), slog.String("name", name),
		slog.Duration("took", time.Since(start)))
	return s, nil
}

// Promote makes a standby the primary (pg_promote) and returns once it accepts writes,
// or an error when it did not within a minute.
func (s *Server) Promote(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgconn.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgserver: promote: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	res := conn.ExecParams(ctx, "SELECT pg_promote(true, 60)", nil, nil, nil, nil).Read()
	if res.Err != nil {
		return fmt.Errorf("pgserver: promote: %w", res.Err)
	}
	if len(res.Rows) != 1 || string(res.Rows[0][0]) != "t" {
		return fmt.Errorf("pgserver: promote: postgres did not finish promoting within 60s%s", s.logTail())
	}
	s.log.InfoContext(ctx, "postgres promoted", slog.Int("pid", s.PID()))
	return nil
}

// Kill kills the server and every process of it at once with SIGKILL, as a machine
// that dies: no shutdown, no last WAL sent, and waits for the postmaster to exit. The
// server is stopped for good (Stop then returns the kill).
func (s *Server) Kill() error {
	pid := s.PID()
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("pgserver: kill postgres (pid %d): %w", pid, err)
	}
	s.stopOnce.Do(func() {
		_ = s.cmd.Wait()
		s.stopErr = fmt.Errorf("pgserver: postgres (pid %d) was killed", pid)
	})
	s.log.Info("postgres killed", slog.Int("pid", pid))
	return nil
}

// Port returns the server's port: its TCP port on 127.0.0.1 when it listens there, and
// its unix socket's number either way.
func (s *Server) Port() int { return s.port }

// HostPort returns "127.0.0.1:port" when the server listens on TCP, else "".
func (s *Server) HostPort() string {
	if s.cfg.Port <= 0 {
		return ""
	}
	return "127.0.0.1:" + strconv.Itoa(s.port)
}

// Dir returns the server's directory (Config.Dir, absolute).
func (s *Server) Dir() string { return s.dir }
