// Package pgtest gives tests real Postgres databases, migrated and isolated, fast.
//
// The server is the one STEPGATE_TEST_DATABASE_URL names, a superuser URL to a database
// from which databases may be created (postgres://postgres@127.0.0.1:5432/postgres).
// Without it, each test process starts a private server (see [pgserver]) in a temporary
// directory; it stops when the process exits, and the next test process removes its
// directory.
//
// The migrated schema is built once per server and per [migrations.Hash], as a template
// database named tmpl_<hash>, under an advisory lock, so that the test processes of
// `go test ./...` can share a server. Each database that [DB] and [DBURL] return is a
// copy of it.
package pgtest

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/internal/wiring/pgserver"
	"github.com/stepgate/stepgate/migrations"
)

// EnvURL names the environment variable that points the tests at a server.
const EnvURL = "STEPGATE_TEST_DATABASE_URL"

// lockKey serializes the template builds of concurrent test processes on a server.
const lockKey int64 = 0x7067746573740001 // "pgtest", 1

// Tx returns a transaction on a database with the migrated schema that tests share. It
// is rolled back when the test ends, and its Commit refuses, so nothing it writes is
// ever seen by another test: use [DB] to test what needs commits. Concurrent tests
// write to the same tables, so their keys should differ (a random tenant or id).
func Tx(tb testing.TB) pgx.Tx {
	tb.Helper()
	shared := mustSetup(tb).shared
	conn, err := pgx.Connect(tb.Context(), shared)
	if err != nil {
		tb.Fatalf("pgtest: connect: %v", err)
	}
	tx, err := conn.Begin(tb.Context())
	if err != nil {
		_ = conn.Close(context.WithoutCancel(tb.Context()))
		tb.Fatalf("pgtest: begin: %v", err)
	}
	tb.Cleanup(func() {
		ctx := context.WithoutCancel(tb.Context())
		// Closing the connection rolls back too, should the rollback fail (a busy
		// connection).
		_ = tx.Rollback(ctx)
		_ = conn.Close(ctx)
	})
	return rollbackOnlyTx{tx}
}

// rollbackOnlyTx is a [pgx.Tx] that cannot commit. Its nested transactions
// (savepoints) can.
type rollbackOnlyTx struct{ pgx.Tx }

// ErrCommit is what Commit returns on a transaction from [Tx].
var ErrCommit = errors.New("pgtest: a Tx rolls back: use pgtest.DB to commit")

func (rollbackOnlyTx) Commit(context.Context) error { return ErrCommit }

// DB returns a pool of at most 4 connections on a new database with the migrated schema.
// The pool closes when the test ends; see [DBURL] for the database's lifecycle.
func DB(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(DBURL(tb))
	if err != nil {
		tb.Fatalf("pgtest: parse url: %v", err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(tb.Context(), cfg)
	if err != nil {
		tb.Fatalf("pgtest: open pool: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// DBURL returns the URL of a new database with the migrated schema, for components that
// open their own connections. It is dropped when the test passes, closing whatever is
// still connected; it is kept, and its URL logged, when the test fails.
func DBURL(tb testing.TB) string {
	tb.Helper()
	s := mustSetup(tb)
	return s.createDB(tb, s.template)
}

// DBURLKeepingJobs is DBURL whose database also keeps a copy of every River job as
// inserted, in public.inserted_job (id, kind, args, priority, metadata), readable by
// every role: a gateway deletes a run's scheduled job once it has claimed the run
// itself (journal.ClaimWokenRun), so river_job no longer shows every job enqueued.
func DBURLKeepingJobs(tb testing.TB) string {
	tb.Helper()
	u := DBURL(tb)
	conn, err := pgx.Connect(tb.Context(), u)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	defer conn.Close(context.WithoutCancel(tb.Context()))
	_, err = conn.Exec(tb.Context(), `
		CREATE TABLE public.inserted_job AS SELECT id, kind, args, priority, metadata FROM river_job WHERE false;
		GRANT SELECT ON public.inserted_job TO PUBLIC;
		CREATE FUNCTION public.keep_inserted_job() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER AS $$
		BEGIN
			INSERT INTO public.inserted_job SELECT NEW.id, NEW.kind, NEW.args, NEW.priority, NEW.metadata;
			RETURN NULL;
		END $$;
		CREATE TRIGGER keep_inserted_job AFTER INSERT ON river_job FOR EACH ROW EXECUTE FUNCTION public.keep_inserted_job();`)
	if err != nil {
		tb.Fatalf("pgtest: keep inserted jobs: %v", err)
	}
	return u
}

// EmptyDBURL returns the URL of a new empty database, as a new installation has, for
// testing migrations. Its lifecycle is that of [DBURL].
func EmptyDBURL(tb testing.TB) string {
	tb.Helper()
	return mustSetup(tb).createDB(tb, "template0")
}

// setup is what the test process knows of its server.
type setup struct {
	maintURL string // the URL of the database that tests connect to for CREATE DATABASE
	private  bool   // the server dies with this process
	template string // the migrated template database
	shared   string // the URL of the database of Tx
}

var setupOnce = sync.OnceValues(func() (*setup, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := &setup{maintURL: os.Getenv(EnvURL)}
	if s.maintURL == "" {
		srv, err := startPrivate(ctx)
		if err != nil {
			return nil, err
		}
		s.maintURL, s.private = srv.URL("postgres"), true
	}
	if err := s.prepare(ctx); err != nil {
		return nil, err
	}
	return s, nil
})

func mustSetup(tb testing.TB) *setup {
	tb.Helper()
	s, err := setupOnce()
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// prepare creates the template database and the shared database of Tx, unless another
// test process did.
func (s *setup) prepare(ctx context.Context) error {
	hash := migrations.Hash()
	s.template = "tmpl_" + hash
	sharedName := "shared_" + hash
	s.shared = s.urlOf(sharedName)

	conn, err := pgx.Connect(ctx, s.maintURL)
	if err != nil {
		return fmt.Errorf("pgtest: connect to %s: %w", EnvURL, err)
	}
	defer conn.Close(context.WithoutCancel(ctx)) // which releases the lock
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockKey); err != nil {
		return fmt.Errorf("pgtest: lock: %w", err)
	}

	var ready bool
	err = conn.QueryRow(ctx, `SELECT datistemplate FROM pg_database WHERE datname = $1`, s.template).Scan(&ready)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("pgtest: look up template: %w", err)
	case !ready: // a process died while building it
		if _, err := conn.Exec(ctx, `DROP DATABASE `+ident(s.template)+` WITH (FORCE)`); err != nil {
			return fmt.Errorf("pgtest: drop unfinished template: %w", err)
		}
	}
	if !ready {
		if err := s.buildTemplate(ctx, conn); err != nil {
			return err
		}
	}

	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1)`, sharedName).Scan(&exists); err != nil {
		return fmt.Errorf("pgtest: look up shared database: %w", err)
	}
	if !exists {
		if _, err := conn.Exec(ctx, `CREATE DATABASE `+ident(sharedName)+` TEMPLATE `+ident(s.template)); err != nil {
			return fmt.Errorf("pgtest: create shared database: %w", err)
		}
	}
	return nil
}

// buildTemplate creates and migrates the template database. Marking it a template is
// the last step, so a template that is not marked is unfinished. No one may connect to
// it afterwards, as a template with connections cannot be copied.
func (s *setup) buildTemplate(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+ident(s.template)+` TEMPLATE template0 ENCODING 'UTF8'`); err != nil {
		return fmt.Errorf("pgtest: create template: %w", err)
	}
	cfg, err := pgxpool.ParseConfig(s.urlOf(s.template))
	if err != nil {
		return fmt.Errorf("pgtest: parse template url: %w", err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("pgtest: open template: %w", err)
	}
	err = migrations.Up(ctx, pool)
	pool.Close()
	if err != nil {
		return fmt.Errorf("pgtest: migrate template: %w", err)
	}
	if _, err := conn.Exec(ctx, `ALTER DATABASE `+ident(s.template)+` WITH IS_TEMPLATE true ALLOW_CONNECTIONS false`); err != nil {
		return fmt.Errorf("pgtest: mark template: %w", err)
	}
	return nil
}

// createDB creates a database from template and returns its URL. It is dropped when tb
// ends, unless tb failed.
func (s *setup) createDB(tb testing.TB, template string) string {
	tb.Helper()
	name := dbName(tb.Name())
	if err := s.exec(tb.Context(), `CREATE DATABASE `+ident(name)+` TEMPLATE `+ident(template)); err != nil {
		tb.Fatalf("pgtest: create database: %v", err)
	}
	u := s.urlOf(name)
	tb.Cleanup(func() {
		if tb.Failed() {
			note := ""
			if s.private {
				note = fmt.Sprintf(" (the private server stops with the test process: set %s to keep it)", EnvURL)
			}
			tb.Logf("pgtest: kept database %s: %s%s", name, u, note)
			return
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(tb.Context()), time.Minute)
		defer cancel()
		if err := s.exec(ctx, `DROP DATABASE `+ident(name)+` WITH (FORCE)`); err != nil {
			tb.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return u
}

// exec runs sql on a connection of its own to the maintenance database, as CREATE and
// DROP DATABASE cannot run in a transaction.
func (s *setup) exec(ctx context.Context, sql string) error {
	conn, err := pgx.Connect(ctx, s.maintURL)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// urlOf returns the URL of database name on the server.
func (s *setup) urlOf(name string) string {
	u, err := url.Parse(s.maintURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		// A keyword/value string, where the last setting wins.
		return s.maintURL + " dbname=" + name
	}
	u.Path = "/" + name
	u.RawPath = ""
	return u.String()
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9]+`)

// dbName returns a new database name that tells which test made it.
func dbName(testName string) string {
	const maxLen = 63 - len("test__") - 8 // Postgres truncates identifiers at 63 bytes
	name := strings.Trim(unsafeChars.ReplaceAllString(strings.ToLower(strings.TrimPrefix(testName, "Test")), "_"), "_")
	if len(name) > maxLen {
		name = name[:maxLen]
	}
	return "test_" + name + "_" + strings.ToLower(rand.Text()[:8])
}

func ident(name string) string { return pgx.Identifier{name}.Sanitize() }

// startPrivate starts this process's server, after removing the directories of the
// servers of test processes that have exited.
func startPrivate(ctx context.Context) (*pgserver.Server, error) {
	const prefix = "stepgate-pgtest-"
	old, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
	for _, dir := range old {
		owner, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(dir), prefix), "-")
		if pid, err := strconv.Atoi(owner); err == nil && !alive(pid) && !alive(postmasterPID(dir)) {
			_ = os.RemoveAll(dir)
		}
	}
	dir, err := os.MkdirTemp("", prefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: create server dir: %w", err)
	}
	// The gateway package's parallel tests peak near 190 connections.
	srv, err := pgserver.Start(ctx, pgserver.Config{Dir: dir, MaxConnections: 400})
	if err != nil {
		return nil, fmt.Errorf("pgtest: start private server (or set %s): %w", EnvURL, err)
	}
	return srv, nil
}

// postmasterPID returns the pid in the lock file of a server dir, or 0.
func postmasterPID(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "data", "postmaster.pid"))
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, _ := strconv.Atoi(strings.TrimSpace(line))
	return pid
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
