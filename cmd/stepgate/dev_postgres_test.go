package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stepgate/stepgate/internal/wiring/pgserver"
	"github.com/stretchr/testify/require"
)

// pathWith returns a directory for $PATH holding a symlink to each of the given
// executables of the machine; a test skips when one is missing.
func pathWith(t *testing.T, files ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range files {
		p, err := exec.LookPath(f)
		if err != nil {
			t.Skipf("%s is not on this machine's PATH", f)
		}
		require.NoError(t, os.Symlink(p, filepath.Join(dir, f)))
	}
	return dir
}

func TestDevPostgres(t *testing.T) {
	t.Parallel()

	// A machine with neither Postgres binaries nor Docker: the error names the remedies,
	// and nothing is started.
	t.Run("NeitherBinariesNorDocker", func(t *testing.T) {
		t.Parallel()
		s := pgserver.Search{Path: pathWith(t), Dirs: []string{filepath.Join(t.TempDir(), "postgresql", "*", "bin")}}
		dir := filepath.Join(t.TempDir(), "pg")
		var stderr bytes.Buffer
		_, err := startDevPostgres(t.Context(), s, dir, slog.New(slog.DiscardHandler), &stderr)
		require.Error(t, err)
		msg := err.Error()
		require.Contains(t, msg, "no PostgreSQL server binaries (initdb and postgres) on $PATH, from pg_config or where packages put them ("+s.Dirs[0]+"...), and no docker on $PATH.\n")
		require.Contains(t, msg, "apt-get install -y postgresql")
		require.Contains(t, msg, "brew install postgresql@15")
		require.Contains(t, msg, "or Docker:")
		require.Contains(t, msg, "DATABASE_URL=")
		require.Empty(t, stderr.String())
		_, err = os.Stat(dir)
		require.ErrorIs(t, err, os.ErrNotExist)
	})

	// The message `stepgate dev` ends with, through the command's own error path.
	t.Run("ReportedByTheCommand", func(t *testing.T) {
		t.Parallel()
		s := pgserver.Search{Path: pathWith(t)}
		_, err := startDevPostgres(t.Context(), s, filepath.Join(t.TempDir(), "pg"), slog.New(slog.DiscardHandler), &bytes.Buffer{})
		var stderr bytes.Buffer
		require.Equal(t, 1, report(&stderr, err))
		require.True(t, strings.HasPrefix(stderr.String(), "stepgate: no PostgreSQL server binaries"), stderr.String())
	})

	// The machine's binaries, found on $PATH through its symlinks, run the server, and
	// the banner names their directory.
	t.Run("MachineBinaries", func(t *testing.T) {
		t.Parallel()
		if testing.Short() {
			t.Skip("starts a private Postgres")
		}
		path := pathWith(t, "postgres", "initdb")
		real, err := exec.LookPath("postgres")
		require.NoError(t, err)
		real, err = filepath.EvalSymlinks(real)
		require.NoError(t, err)
		s := pgserver.Search{Path: path}
		require.Equal(t, []string{filepath.Dir(real)}, s.BinDirs())

		dir := t.TempDir()
		require.NoError(t, os.Chmod(filepath.Dir(dir), 0o711)) // the postgres OS user runs it when we are root
		pg, err := startDevPostgres(t.Context(), s, filepath.Join(dir, "pg"), slog.New(slog.DiscardHandler), &bytes.Buffer{})
		require.NoError(t, err)
		defer pg.stop()
		require.Equal(t, "the machine's binaries in "+filepath.Dir(real), pg.source)
		conn, err := pgx.Connect(t.Context(), pg.url)
		require.NoError(t, err)
		defer conn.Close(context.WithoutCancel(t.Context()))
		var db string
		require.NoError(t, conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&db))
		require.Equal(t, "stepgate", db)
	})

	// Docker on $PATH whose daemon does not answer (this machine has the command but no
	// daemon): the error says so, with the remedies.
	t.Run("DockerWithoutDaemon", func(t *testing.T) {
		t.Parallel()
		path := pathWith(t, "docker")
		if exec.Command(filepath.Join(path, "docker"), "version", "--format", "{{.Server.Version}}").Run() == nil {
			t.Skip("docker's daemon answers here")
		}
		s := pgserver.Search{Path: path}
		var stderr bytes.Buffer
		_, err := startDevPostgres(t.Context(), s, filepath.Join(t.TempDir(), "pg"), slog.New(slog.DiscardHandler), &stderr)
		require.ErrorContains(t, err, "no PostgreSQL server binaries found, and Docker ("+filepath.Join(path, "docker")+") does not answer")
		require.ErrorContains(t, err, "Start Docker, or install PostgreSQL's server binaries.")
		require.ErrorContains(t, err, "apt-get install -y postgresql")
		require.Empty(t, stderr.String())
	})

	t.Run("NewestVersionFirst", func(t *testing.T) {
		t.Parallel()
		root := t.TempDir()
		for _, v := range []string{"9.6", "15", "13"} {
			bin := filepath.Join(root, v, "bin")
			require.NoError(t, os.MkdirAll(bin, 0o755))
			for _, f := range []string{"initdb", "postgres"} {
				require.NoError(t, os.WriteFile(filepath.Join(bin, f), nil, 0o755))
			}
		}
		require.NoError(t, os.MkdirAll(filepath.Join(root, "17", "bin"), 0o755)) // no binaries
		s := pgserver.Search{Path: pathWith(t), Dirs: []string{filepath.Join(root, "*", "bin")}}
		require.Equal(t, []string{filepath.Join(root, "15", "bin"), filepath.Join(root, "13", "bin"), filepath.Join(root, "9.6", "bin")}, s.BinDirs())
	})
}
