package main

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/internal/pgserver"
)

// devPostgresImage is the image `stepgate dev` runs in Docker when the machine has no
// Postgres server binaries.
const devPostgresImage = "postgres:15"

// postgresBinDirs are where `stepgate dev` looks for Postgres server binaries beyond
// $PATH and pg_config: where packages put them off $PATH.
var postgresBinDirs = []string{
	"/usr/lib/postgresql/*/bin",                          // Debian, Ubuntu
	"/usr/pgsql-*/bin",                                   // RHEL, Fedora (PGDG)
	"/opt/homebrew/opt/postgresql@*/bin",                 // Homebrew on Apple silicon (keg-only)
	"/usr/local/opt/postgresql@*/bin",                    // Homebrew on Intel
	"/opt/homebrew/opt/postgresql/bin",                   //
	"/usr/local/opt/postgresql/bin",                      //
	"/Applications/Postgres.app/Contents/Versions/*/bin", // Postgres.app
}

// postgresRemedies ends the error of a `stepgate dev` that found no Postgres.
const postgresRemedies = `stepgate dev runs a private PostgreSQL: install its server binaries or Docker, then run it again:
  Debian, Ubuntu:  apt-get install -y postgresql
  macOS:           brew install postgresql@15
  or Docker:       https://docs.docker.com/get-started/get-docker/ (stepgate dev then runs the ` + devPostgresImage + ` image)
Or give it a database of yours: DATABASE_URL=postgres://... stepgate dev`

// postgresSearch is where `stepgate dev` looks for Postgres.
type postgresSearch struct {
	path string   // the directories of $PATH, for postgres, initdb, pg_config and docker
	dirs []string // more directories of server binaries: glob patterns
}

func defaultPostgresSearch(getenv func(string) string) postgresSearch {
	return postgresSearch{path: getenv("PATH"), dirs: postgresBinDirs}
}

// lookPath returns the path of the executable file in one of s.path's directories, or
// "" if there is none.
func (s postgresSearch) lookPath(file string) string {
	for _, dir := range filepath.SplitList(s.path) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// binDirs returns the directories that hold both initdb and postgres, in the order
// they are preferred: the one of postgres on $PATH (past its symlinks), pg_config's,
// then the matches of s.dirs, the newest major version first.
func (s postgresSearch) binDirs() []string {
	var dirs []string
	add := func(dir string) {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			dir = real
		}
		for _, bin := range []string{"initdb", "postgres"} {
			if fi, err := os.Stat(filepath.Join(dir, bin)); err != nil || !fi.Mode().IsRegular() {
				return
			}
		}
		if !slices.Contains(dirs, dir) {
			dirs = append(dirs, dir)
		}
	}
	if p := s.lookPath("postgres"); p != "" {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		add(filepath.Dir(p))
	}
	if p := s.lookPath("pg_config"); p != "" {
		if out, err := exec.Command(p, "--bindir").Output(); err == nil {
			add(strings.TrimSpace(string(out)))
		}
	}
	for _, pattern := range s.dirs {
		matches, _ := filepath.Glob(pattern)
		// "/usr/lib/postgresql/9.6/bin" before "/usr/lib/postgresql/15/bin" sorts wrong
		// as text: by version, newest first.
		slices.SortStableFunc(matches, func(a, b string) int { return cmp.Compare(binDirVersion(b), binDirVersion(a)) })
		for _, m := range matches {
			add(m)
		}
	}
	return dirs
}

// binDirVersion returns the version in the name of binDir's parent (15 for
// /usr/lib/postgresql/15/bin, /opt/homebrew/opt/postgresql@15/bin, /usr/pgsql-15/bin), or 0.
func binDirVersion(binDir string) float64 {
	path := filepath.Base(filepath.Dir(binDir))
	start := strings.IndexAny(path, "0123456789")
	if start < 0 {
		return 0
	}
	end := start
	for end < len(path) && (path[end] == '.' || path[end] >= '0' && path[end] <= '9') {
		end++
	}
	n, _ := strconv.ParseFloat(path[start:end], 64)
	return n
}

// binDir returns the directory of the server binaries for a data directory of major
// version want ("" when it is not initialized yet): the first of s.binDirs whose postgres
// is that version, else the first. It returns "" when there are none.
func (s postgresSearch) binDir(want string) string {
	dirs := s.binDirs()
	if len(dirs) == 0 {
		return ""
	}
	if want != "" {
		for _, dir := range dirs {
			// "postgres (PostgreSQL) 15.20 (Debian 15.20-0+deb12u1)"
			out, err := exec.Command(filepath.Join(dir, "postgres"), "--version").Output()
			if f := strings.Fields(string(out)); err == nil && len(f) >= 3 && strings.Split(f[2], ".")[0] == want {
				return dir
			}
		}
	}
	return dirs[0]
}

// devPostgres is the private Postgres of a `stepgate dev`.
type devPostgres struct {
	url    string // of its database stepgate
	source string // what runs it: the machine's binaries (their directory) or Docker (the image)
	stop   func() // stops it
}

// startDevPostgres starts the private Postgres of a `stepgate dev` with its data in dir,
// and creates its database stepgate: from the machine's server binaries (see
// postgresSearch), or else, when docker is on $PATH, in Docker (the postgres:15 image,
// published on a free port of 127.0.0.1, its data in a volume named after dir), stopped
// by stop. Without either, its error names the remedies.
func startDevPostgres(ctx context.Context, s postgresSearch, dir string, log *slog.Logger, stderr io.Writer) (*devPostgres, error) {
	b, err := os.ReadFile(filepath.Join(dir, "data", "PG_VERSION"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if binDir := s.binDir(strings.TrimSpace(string(b))); binDir != "" {
		pg, err := pgserver.Start(ctx, pgserver.Config{Dir: dir, BinDir: binDir, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("start private postgres: %w", err)
		}
		if err := createDatabase(ctx, pg.URL("postgres"), "stepgate"); err != nil {
			return nil, errors.Join(err, pg.Stop())
		}
		return &devPostgres{url: pg.URL("stepgate"), source: "the machine's binaries in " + pg.BinDir(), stop: func() { _ = pg.Stop() }}, nil
	}
	docker := s.lookPath("docker")
	if docker == "" {
		return nil, fmt.Errorf("no PostgreSQL server binaries (initdb and postgres) on $PATH, from pg_config or where packages put them (%s...), and no docker on $PATH.\n%s",
			strings.Join(s.dirs[:min(2, len(s.dirs))], ", "), postgresRemedies)
	}
	return startDockerPostgres(ctx, docker, dir, stderr)
}

// startDockerPostgres runs devPostgresImage in Docker for startDevPostgres.
func startDockerPostgres(ctx context.Context, docker, dir string, stderr io.Writer) (*devPostgres, error) {
	if out, err := exec.CommandContext(ctx, docker, "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("no PostgreSQL server binaries found, and Docker (%s) does not answer: %w: %s\nStart Docker, or install PostgreSQL's server binaries.\n%s",
			docker, err, strings.TrimSpace(string(out)), postgresRemedies)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	// One container and one volume per folder: its data (the tenant's keys among it)
	// outlives the container, as the machine's Postgres keeps it in dir.
	sum := sha256.Sum256([]byte(abs))
	name := "stepgate-dev-" + hex.EncodeToString(sum[:6])
	fmt.Fprintf(stderr, "stepgate dev: no PostgreSQL server binaries found: running Postgres in Docker (image %s, container %s, volume %s); the first time, docker pulls the image\n",
		devPostgresImage, name, name)
	run := exec.CommandContext(ctx, docker, "run", "--rm", "--detach", "--name", name,
		"--publish", "127.0.0.1::5432", "--env", "POSTGRES_HOST_AUTH_METHOD=trust",
		"--volume", name+":/var/lib/postgresql/data", devPostgresImage, "-c", "max_connections=200")
	var runErr strings.Builder
	run.Stderr = &runErr
	if err := run.Run(); err != nil {
		msg := strings.TrimSpace(runErr.String())
		if strings.Contains(msg, "Conflict") {
			return nil, fmt.Errorf("start Postgres in Docker: a container %s runs already: another stepgate dev in %s, or one left behind (docker stop %s)", name, dir, name)
		}
		return nil, fmt.Errorf("start Postgres in Docker: docker run %s: %w: %s", devPostgresImage, err, msg)
	}
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = exec.CommandContext(ctx, docker, "stop", name).Run()
	}
	pg, err := waitDockerPostgres(ctx, docker, name)
	if err != nil {
		stop()
		return nil, err
	}
	pg.stop = stop
	return pg, nil
}

// waitDockerPostgres waits up to two minutes for the Postgres in container name to
// accept connections, and creates its database stepgate.
func waitDockerPostgres(ctx context.Context, docker, name string) (*devPostgres, error) {
	out, err := exec.CommandContext(ctx, docker, "port", name, "5432/tcp").Output()
	if err != nil {
		return nil, fmt.Errorf("start Postgres in Docker: docker port %s: %w", name, err)
	}
	hostPort, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if _, _, err := net.SplitHostPort(hostPort); err != nil {
		return nil, fmt.Errorf("start Postgres in Docker: docker port %s: %q: %w", name, out, err)
	}
	u := func(db string) string {
		return (&url.URL{Scheme: "postgres", User: url.User("postgres"), Host: hostPort, Path: "/" + db, RawQuery: "sslmode=disable"}).String()
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		// The image's first start initializes the data on a server without TCP, then
		// restarts it: a connection is the sign it is ready.
		conn, err := pgx.Connect(ctx, u("postgres"))
		if err == nil {
			conn.Close(ctx)
			break
		}
		select {
		case <-ctx.Done():
			logs, _ := exec.Command(docker, "logs", "--tail", "20", name).CombinedOutput()
			return nil, fmt.Errorf("Postgres in Docker (container %s) does not accept connections on %s: %w\n%s", name, hostPort, err, logs)
		case <-tick.C:
		}
	}
	if err := createDatabase(ctx, u("postgres"), "stepgate"); err != nil {
		return nil, err
	}
	return &devPostgres{url: u("stepgate"), source: "Docker, image " + devPostgresImage + " (container " + name + ")"}, nil
}
