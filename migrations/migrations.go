// Package migrations brings a database to the schema this build of stepgate needs: River's
// tables, then stepgate's own, from the forward-only NNNN_name.sql files embedded here.
//
// The files are versioned by their NNNN, applied in that order, each once, and recorded
// in stepgate.schema_migration with the SHA-256 of its text; a committed file is never
// edited (Up refuses a database that applied another text, naming the file).
//
// The first, 0000_baseline.sql (version 0), is the schema that migrations 0001-0045 made
// before the first release, written out once, without the functions nothing called.
// Those 45 files (42 committed, 2, 33 and 36 never were) are gone from the build; their
// texts are test data (testdata/history) and their names and checksums are in history.
// Version 0 is one they never recorded, and the migrations after the baseline go on at
// 0046, so every version names one file on every database:
//
//   - a new database runs the baseline, then the migrations after it;
//   - a database whose schema_migration records all of 0001-0045 (by today's names and,
//     where recorded, checksums) has the baseline's schema: Up replaces those rows by
//     the baseline's, without running it, then applies the migrations after it (0047
//     drops the dead functions such a database still has);
//   - a database that records only some of them is refused, naming what it lacks: it
//     is migrated first by the last build before the baseline, or recreated.
//
// TestHistoryUpgrade checks that the two ways reach the same schema, dump for dump.
package migrations

import (
	"cmp"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:generate go run ./internal/schemadump -o schema.sql
//go:generate go tool sqlc generate -f ../journal/sqlc.yaml
//go:generate go run ../journal/internal/argsgen -dir ../journal/internal/dbsqlc

// files are the migrations; schema.sql, beside them, is generated from them.
//
//go:embed [0-9][0-9][0-9][0-9]_*.sql
var files embed.FS

// lockKey is the Postgres advisory lock that serializes [Up] across processes. It is
// "stepgate" in ASCII.
const lockKey int64 = 0x7374657067617465

// migration is one embedded SQL file.
type migration struct {
	version int
	name    string // the file name
	sql     string
}

// checksum is the hex SHA-256 of the file's text, as stepgate.schema_migration records it.
func (m migration) checksum() string {
	sum := sha256.Sum256([]byte(m.sql))
	return hex.EncodeToString(sum[:])
}

var fileName = regexp.MustCompile(`^([0-9]{4})_[a-z0-9_]+\.sql$`)

// load returns the embedded migrations ordered by version.
var load = sync.OnceValues(func() ([]migration, error) {
	entries, err := fs.ReadDir(files, ".")
	if err != nil {
		return nil, fmt.Errorf("migrations: list: %w", err)
	}
	var ms []migration
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migrations: %s is not named NNNN_name.sql", e.Name())
		}
		version, _ := strconv.Atoi(m[1])
		sql, err := fs.ReadFile(files, e.Name())
		if err != nil {
			return nil, fmt.Errorf("migrations: read %s: %w", e.Name(), err)
		}
		ms = append(ms, migration{version: version, name: e.Name(), sql: string(sql)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return cmp.Compare(a.version, b.version) })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("migrations: %s and %s have the same version", ms[i-1].name, ms[i].name)
		}
	}
	return ms, nil
})

func newRiverMigrator(pool *pgxpool.Pool) (*rivermigrate.Migrator[pgx.Tx], error) {
	m, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, fmt.Errorf("migrations: river migrator: %w", err)
	}
	return m, nil
}

// Up applies River's pending migrations, then each embedded migration that the database
// has not recorded in stepgate.schema_migration yet, in version order. First it checks
// the ones recorded: if one this build embeds was applied from another text (its
// SHA-256, recorded with it) or another file name, Up applies nothing and returns a
// [*ChangedError] or an error naming the file. A database that the migrations before the
// baseline made gets the baseline's record in place of theirs first, or is refused when
// it applied only some of them (see the package doc). Each migration
// commits in its own transaction along with its record, so a failed Up leaves the
// database at the last migration that succeeded, and running Up again resumes there.
//
// Up holds a Postgres advisory lock meanwhile, so gateways that start at once migrate
// one after the other; the later ones find nothing to do. The lock takes one of pool's
// connections and River's migrations another: pool must allow two. Recorded versions
// that this build does not know (a newer build migrated the database) are left alone.
func Up(ctx context.Context, pool *pgxpool.Pool) error {
	ms, err := load()
	if err != nil {
		return err
	}
	return up(ctx, pool, ms)
}

// up is Up applying only ms, the embedded migrations or the first of them (a test's
// database as an older build left it).
func up(ctx context.Context, pool *pgxpool.Pool, ms []migration) error {
	if pool.Config().MaxConns < 2 {
		return errors.New("migrations: the pool needs at least 2 connections")
	}
	river, err := newRiverMigrator(pool)
	if err != nil {
		return err
	}

	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrations: acquire connection: %w", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockKey); err != nil {
		conn.Release()
		return fmt.Errorf("migrations: lock: %w", err)
	}
	defer func() {
		// A connection that may still hold the lock must not return to the pool.
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, lockKey); err != nil {
			_ = conn.Hijack().Close(context.WithoutCancel(ctx))
			return
		}
		conn.Release()
	}()

	if _, err := river.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrations: river: %w", err)
	}

	_, err = conn.Exec(ctx, `
		CREATE SCHEMA IF NOT EXISTS stepgate;
		CREATE TABLE IF NOT EXISTS stepgate.schema_migration (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now(),
			checksum   text -- the file's SHA-256, hex; see checkApplied
		)`)
	if err != nil {
		return fmt.Errorf("migrations: create schema_migration: %w", err)
	}
	applied, err := checkApplied(ctx, conn.Conn(), ms)
	if err != nil {
		return err
	}
	for _, m := range ms {
		if slices.Contains(applied, m.version) {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO stepgate.schema_migration (version, name, checksum) VALUES ($1, $2, $3)`, m.version, m.name, m.checksum())
			return err
		})
		if err != nil {
			return fmt.Errorf("migrations: apply %s: %w", m.name, err)
		}
	}
	return nil
}

// Hash returns a short hex digest of every migration Up applies, River's and the
// embedded files. Two builds with the same Hash produce the same schema, so it names
// migrated template databases in tests.
func Hash() string { return hash() }

var hash = sync.OnceValue(func() string {
	h := sha256.New()
	if river, err := newRiverMigrator(nil); err == nil {
		for _, m := range river.AllVersions() {
			fmt.Fprintf(h, "river %d\x00%s\x00", m.Version, m.SQLUp)
		}
	}
	ms, err := load()
	for _, m := range ms {
		fmt.Fprintf(h, "%s\x00%s\x00", m.name, m.sql)
	}
	if err != nil {
		fmt.Fprintf(h, "error %s", err)
	}
	return hex.EncodeToString(h.Sum(nil))[:12]
})

// Pending returns the migrations this build embeds that db has not recorded, River's
// and stepgate's, by name ("river 6", "0032_parallel.sql"); none when the schema is
// current. db may be any pool whose role reads the migration tables (the gateway's
// system pool does).
func Pending(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	ms, err := load()
	if err != nil {
		return nil, err
	}
	river, err := newRiverMigrator(pool)
	if err != nil {
		return nil, err
	}
	var pending []string
	existing, err := river.ExistingVersions(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: list river's applied: %w", err)
	}
	for _, m := range river.AllVersions() {
		if !slices.ContainsFunc(existing, func(e rivermigrate.Migration) bool { return e.Version == m.Version }) {
			pending = append(pending, fmt.Sprintf("river %d", m.Version))
		}
	}
	rows, _ := pool.Query(ctx, `SELECT version FROM stepgate.schema_migration`) // err resurfaces below
	applied, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return nil, fmt.Errorf("migrations: list applied: %w", err)
	}
	for _, m := range ms {
		if !slices.Contains(applied, m.version) {
			pending = append(pending, m.name)
		}
	}
	return pending, nil
}
