package migrations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ChangedError is the error of [Up] when a migration the database applied has another
// text in this build: a committed migration was edited, so the database's schema may not
// be the one this build expects. Up applies nothing then.
type ChangedError struct {
	Name     string // the file, as this build embeds it
	Applied  string // the checksum recorded when the database applied it
	Embedded string // the checksum of this build's text
}

func (e *ChangedError) Error() string {
	return fmt.Sprintf("migrations: %s changed after this database applied it (applied text sha256 %s, this build's %s): "+
		"a committed migration is never edited; restore its text and put the change in a new migration",
		e.Name, short(e.Applied), short(e.Embedded))
}

func short(sum string) string { return sum[:min(len(sum), 12)] }

// checkApplied returns the versions the database recorded in stepgate.schema_migration,
// after checking each against this build: a version this build embeds must have been
// applied from the same file name and the same text. Rows recorded before checksums were
// kept get this build's checksum (their text is trusted once, on the first start of a
// build that checks). A database that the migrations before the baseline made is brought
// to the baseline first ([adoptHistory]). Versions this build does not know (a newer build migrated the
// database) are left alone. conn must hold the migration lock.
func checkApplied(ctx context.Context, conn *pgx.Conn, ms []migration) ([]int, error) {
	// The column came after the table; add it once, without taking the table's lock
	// on every start.
	var has bool
	err := conn.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM information_schema.columns
		               WHERE table_schema = 'stepgate' AND table_name = 'schema_migration' AND column_name = 'checksum')`).Scan(&has)
	if err != nil {
		return nil, fmt.Errorf("migrations: look for schema_migration.checksum: %w", err)
	}
	if !has {
		if _, err := conn.Exec(ctx, `ALTER TABLE stepgate.schema_migration ADD COLUMN checksum text`); err != nil {
			return nil, fmt.Errorf("migrations: add schema_migration.checksum: %w", err)
		}
	}

	if baseline, ok := baselineOf(ms); ok {
		if err := adoptHistory(ctx, conn, baseline); err != nil {
			return nil, err
		}
	}

	type row struct {
		Version  int
		Name     string
		Checksum *string
	}
	rows, _ := conn.Query(ctx, `SELECT version, name, checksum FROM stepgate.schema_migration ORDER BY version`) // err resurfaces below
	recorded, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	if err != nil {
		return nil, fmt.Errorf("migrations: list applied: %w", err)
	}
	byVersion := make(map[int]migration, len(ms))
	for _, m := range ms {
		byVersion[m.version] = m
	}
	applied := make([]int, 0, len(recorded))
	for _, r := range recorded {
		applied = append(applied, r.Version)
		m, ok := byVersion[r.Version]
		if !ok {
			continue
		}
		if r.Name != m.name {
			return nil, fmt.Errorf("migrations: this database applied %s as version %d, this build has %s: "+
				"a committed migration is never renamed or replaced", r.Name, r.Version, m.name)
		}
		switch {
		case r.Checksum == nil:
			if _, err := conn.Exec(ctx, `UPDATE stepgate.schema_migration SET checksum = $2 WHERE version = $1`, r.Version, m.checksum()); err != nil {
				return nil, fmt.Errorf("migrations: record the checksum of %s: %w", m.name, err)
			}
		case *r.Checksum != m.checksum():
			return nil, &ChangedError{Name: m.name, Applied: *r.Checksum, Embedded: m.checksum()}
		}
	}
	return applied, nil
}
