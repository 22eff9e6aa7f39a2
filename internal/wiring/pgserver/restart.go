package pgserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// ShutdownMode says how [Server.Restart] stops the server.
type ShutdownMode int

const (
	// Fast is PostgreSQL's fast shutdown (pg_ctl stop -m fast, SIGINT): open
	// transactions roll back, clients are disconnected, and a checkpoint is written
	// before the server exits.
	Fast ShutdownMode = iota
	// Immediate is PostgreSQL's immediate shutdown (pg_ctl stop -m immediate, SIGQUIT):
	// every server process quits at once, without a checkpoint, so the next start
	// recovers from the write-ahead log as after a crash.
	Immediate
)

func (m ShutdownMode) String() string {
	switch m {
	case Fast:
		return "fast"
	case Immediate:
		return "immediate"
	}
	return fmt.Sprintf("ShutdownMode(%d)", int(m))
}

// Restart stops the server in mode, waits for it to exit, keeps it down for down (an
// outage its clients see as refused connections), and starts it again on the same
// directory, port and binaries, so its URL keeps working. It returns once the server
// accepts connections again, or an error when it could not stop or start, or when ctx
// ended first (the server may then be down).
//
// Restart must not run concurrently with [Server.Stop] or another Restart; after Stop
// it returns an error.
func (s *Server) Restart(ctx context.Context, mode ShutdownMode, down time.Duration) error {
	if s.cmd.ProcessState != nil {
		return errors.New("pgserver: restart: the server has stopped")
	}
	start := time.Now()
	sig := syscall.SIGINT
	if mode == Immediate {
		sig = syscall.SIGQUIT
	}
	if err := s.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("pgserver: restart: signal postgres: %w", err)
	}
	escalate := time.AfterFunc(stopTimeout, func() { _ = s.cmd.Process.Signal(syscall.SIGQUIT) })
	err := s.cmd.Wait()
	escalate.Stop()
	// An immediate shutdown ends the postmaster with a failure status; a fast one must
	// end cleanly.
	if err != nil && mode == Fast {
		return fmt.Errorf("pgserver: restart: postgres (pid %d) exited: %w%s", s.PID(), err, s.logTail())
	}
	s.log.InfoContext(ctx, "postgres shut down for a restart", slog.String("mode", mode.String()),
		slog.Int("pid", s.PID()), slog.Duration("took", time.Since(start)))

	if down > 0 {
		t := time.NewTimer(down)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("pgserver: restart: %w", ctx.Err())
		case <-t.C:
		}
	}
	// The same config, binaries and settings; the new Server's logger is dropped with
	// it: s keeps its own.
	cfg := s.cfg
	cfg.BinDir, cfg.Logger = filepath.Dir(s.cmd.Path), slog.New(slog.DiscardHandler)
	n, err := Start(ctx, cfg)
	if err != nil {
		return fmt.Errorf("pgserver: restart: %w", err)
	}
	s.cmd = n.cmd
	s.log.InfoContext(ctx, "postgres restarted", slog.Int("pid", s.PID()), slog.Duration("took", time.Since(start)))
	// The next Stop stops the new postmaster.
	s.stopOnce, s.stopErr = sync.Once{}, nil
	return nil
}
