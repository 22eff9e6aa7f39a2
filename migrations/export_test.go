package migrations

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// History returns the names and checksums of the migrations the baseline replaces.
func History() (names, checksums []string) {
	for _, h := range history {
		names = append(names, h.name)
		checksums = append(checksums, h.checksum)
	}
	return names, checksums
}

// UpTo is Up as a build whose last migration is version last would run it.
func UpTo(ctx context.Context, pool *pgxpool.Pool, last int) error {
	ms, err := load()
	if err != nil {
		return err
	}
	var upTo []migration
	for _, m := range ms {
		if m.version <= last {
			upTo = append(upTo, m)
		}
	}
	return up(ctx, pool, upTo)
}
