package main

import (
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
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/internal/wiring/pgserver"
)

// devPostgresImage is the image `stepgate dev` runs in Docker when the machine has no
// Postgres server binaries.
const devPostgresImage = "postgres:15"

// postgresRemedies ends the error of a `stepgate dev` that found no Postgres.
const postgresRemedies = `stepgate dev runs a private PostgreSQL: install its server binaries or Docker, then run it again:
  Debian, Ubuntu:  apt-get install -y postgresql
  macOS:           brew install postgresql@15
  or Docker:       https://docs.docker.com/get-started/get-docker/ (stepgate dev then runs the ` + devPostgresImage + ` image)
Or give it a database of yours: DATABASE_URL=postgres://... stepgate dev`

// devPostgres is the private Postgres of a `stepgate dev`.
type devPostgres struct {
	url    string // of its database stepgate
	source string // what runs it: the machine's binaries (their directory) or Docker (the image)
	stop   func() // stops it
}

// startDevPostgres starts the private Postgres of a `stepgate dev` with its data in dir,
// and creates its database stepgate: from the machine's server binaries (see
// pgserver.Search), or else, when docker is on $PATH, in Docker (the postgres:15 image,
// published on a free port of 127.0.0.1, its data in a volume named after dir), stopped
// by stop. Without either, its error names the remedies.
func startDevPostgres(ctx context.Context, s pgserver.Search, dir string, log *slog.Logger, stderr io.Writer) (*devPostgres, error) {
	b, err := os.ReadFile(filepath.Join(dir, "data", "PG_VERSION"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if binDir := s.BinDir(strings.TrimSpace(string(b))); binDir != "" {
		pg, err := pgserver.Start(ctx, pgserver.Config{Dir: dir, BinDir: binDir, Logger: log})
		if err != nil {
			return nil, fmt.Errorf("start private postgres: %w", err)
		}
		if err := createDatabase(ctx, pg.URL("postgres"), "stepgate"); err != nil {
			return nil, errors.Join(err, pg.Stop())
		}
		return &devPostgres{url: pg.URL("stepgate"), source: "the machine's binaries in " + pg.BinDir(), stop: func() { _ = pg.Stop() }}, nil
	}
	docker := s.LookPath("docker")
	if docker == "" {
		return nil, fmt.Errorf("no PostgreSQL server binaries (initdb and postgres) on $PATH, from pg_config or where packages put them (%s...), and no docker on $PATH.\n%s",
			strings.Join(s.Dirs[:min(2, len(s.Dirs))], ", "), postgresRemedies)
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
			return nil, fmt.Errorf("the Postgres in Docker (container %s) does not accept connections on %s: %w\n%s", name, hostPort, err, logs)
		case <-tick.C:
		}
	}
	if err := createDatabase(ctx, u("postgres"), "stepgate"); err != nil {
		return nil, err
	}
	return &devPostgres{url: u("stepgate"), source: "Docker, image " + devPostgresImage + " (container " + name + ")"}, nil
}
