package maintenance

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnqueueFunc inserts, in tx, a job that invokes each of runIDs as soon as possible (the
// invoker's enqueueNow): the Reaper and the Sweeper requeue runs with it.
type EnqueueFunc func(ctx context.Context, tx pgx.Tx, runIDs []string) error

// Requeue runs pick in a transaction and enqueues, in the same one, a job that invokes
// each run it returns as soon as possible. It returns the runs, none if it failed.
func Requeue(ctx context.Context, pool *pgxpool.Pool, enqueue EnqueueFunc, pick func(tx pgx.Tx) ([]string, error)) ([]string, error) {
	var ids []string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if ids, err = pick(tx); err != nil {
			return err
		}
		return enqueue(ctx, tx, ids)
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}
