// Command schemadump writes migrations/schema.sql: the schema a database has after every
// migration (River's and stepgate's), as pg_dump prints it, without what changes from one
// machine or run to the next. Every migration is reviewed as a diff of that file, and
// ./test.sh checks it is fresh. `go generate ./migrations` runs it:
//
//	go run ./internal/schemadump -o schema.sql
//
// It migrates a new database on a private Postgres server started from the machine's
// binaries (as `stepgate dev` does), then dumps it with that server's pg_dump.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stepgate/stepgate/internal/wiring/pgserver"
	"github.com/stepgate/stepgate/migrations"
	"github.com/stepgate/stepgate/migrations/internal/pgdump"
)

func main() {
	out := flag.String("o", "schema.sql", "the file to write")
	flag.Parse()
	if err := run(context.Background(), *out); err != nil {
		log.Fatalf("schemadump: %v", err)
	}
}

func run(ctx context.Context, out string) error {
	dir, err := os.MkdirTemp("", "schemadump")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := pgserver.Start(ctx, pgserver.Config{Dir: dir})
	if err != nil {
		return err
	}
	defer srv.Stop()

	cfg, err := pgxpool.ParseConfig(srv.URL("postgres"))
	if err != nil {
		return err
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		return err
	}

	text, err := pgdump.Schema(ctx, filepath.Join(srv.BinDir(), "pg_dump"), srv.URL("postgres"))
	if err != nil {
		return err
	}
	return os.WriteFile(out, text, 0o644)
}
