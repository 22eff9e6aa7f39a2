package journal_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/output"
	"github.com/stepgate/stepgate/journal/retention"
	"github.com/stepgate/stepgate/journal/usage"
)

// TestTenantUsage: the tenant usage counters (docs/schema.md) equal what the tables hold, however
// writers and retention interleave, and concurrent starts pass a tenant's cap of runs by
// at most one run per writer in flight.
func TestTenantUsage(t *testing.T) {
	t.Parallel()

	// truth is what the tables of tenant hold, counted.
	truth := func(t *testing.T, db *pgxpool.Pool, tenant string) usage.TenantUsage {
		var u usage.TenantUsage
		require.NoError(t, db.QueryRow(t.Context(), `
			SELECT (SELECT count(*) FROM stepgate.run WHERE tenant = $1),
				(SELECT coalesce(sum(bytes), 0) FROM stepgate.stream WHERE tenant = $1),
				(SELECT coalesce(sum(octet_length(data::text)), 0) FROM stepgate.message WHERE tenant = $1 AND consumed_seq IS NULL),
				(SELECT coalesce(sum(octet_length(data::text)), 0) FROM stepgate.event WHERE tenant = $1),
				(SELECT coalesce(sum((SELECT e.journal_bytes FROM stepgate.journal_entry e WHERE e.tenant = r.tenant AND e.run_id = r.id
					ORDER BY e.seq DESC LIMIT 1)), 0) FROM stepgate.run r WHERE r.tenant = $1 AND r.finished_at IS NOT NULL)`,
			tenant).Scan(&u.Runs, &u.StreamBytes, &u.MailboxBytes, &u.EventBytes, &u.JournalBytes))
		return u
	}

	t.Run("CountsMatchTheRowsUnderConcurrency", func(t *testing.T) {
		t.Parallel()
		ctx, db := t.Context(), pgtest.DB(t)
		tenant, other := newTenant(), newTenant()
		mustRegister(t, db, tenant, "fn")
		mustRegister(t, db, other, "fn")
		target := mustCreateRunOf(t, db, tenant, "fn") // queued: messages wait in its mailbox
		otherRun := mustCreateRunOf(t, db, other, "fn", claimed)
		_, err := usage.TenantUsageOf(ctx, db, tenant)
		require.NoError(t, err)

		const writers, rounds = 4, 15
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for w := range writers {
			wg.Go(func() {
				errs <- func() error {
					for i := range rounds {
						err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
							run, _, err := journal.CreateRun(ctx, tx, journal.NewRun{
								ID: newID(), Tenant: tenant, Function: "fn", Input: json.RawMessage(`{}`), Claim: true, Lease: time.Minute,
								Identity: journal.Identity{Subject: "tester", Tenant: tenant, Roles: []string{"admin"}},
							})
							if err != nil {
								return err
							}
							chunks := []json.RawMessage{json.RawMessage(`"abc"`), json.RawMessage(fmt.Sprintf(`{"w":%d,"i":%d}`, w, i))}
							if _, err := output.WriteStream(ctx, tx, run.ID, 1, output.StreamWrite{Key: "log", Seq: 1, Chunks: chunks}, output.StreamBounds{}); err != nil {
								return err
							}
							_, err = journal.SendMessage(ctx, tx, journal.NewMessage{Tenant: tenant, RunID: target.ID,
								ID: fmt.Sprintf("m-%d-%d", w, i), Topic: "t", Data: json.RawMessage(`{"a": [1, 2, 3]}`)})
							if err != nil {
								return err
							}
							if _, _, err := journal.SendEvent(ctx, tx, journal.NewEvent{Tenant: tenant, ID: fmt.Sprintf("e-%d-%d", w, i), Name: "noted",
								Data: json.RawMessage(fmt.Sprintf(`{"w": %d, "i": %d}`, w, i)), Identity: journal.Identity{Subject: "tester", Tenant: tenant}}); err != nil {
								return err
							}
							if _, err := tx.Exec(ctx, `INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, output, invocation, journal_bytes)
								VALUES ($1, $2, 1, 'step', 'one', '"12345"', 1, 7)`, tenant, run.ID); err != nil {
								return err
							}
							// Every other round finishes the run; retention deletes finished runs
							// (and, every third, the events) while the other writers write.
							if i%3 == 1 {
								if _, err := tx.Exec(ctx, `DELETE FROM stepgate.event WHERE tenant = $1 AND id = $2`, tenant, fmt.Sprintf("e-%d-%d", w, i-1)); err != nil {
									return err
								}
							}
							if i%2 == 0 {
								_, err = tx.Exec(ctx, `UPDATE stepgate.run SET status = 'completed', lease_until = NULL, finished_at = now() WHERE id = $1`, run.ID)
							}
							return err
						})
						if err != nil {
							return err
						}
						if i%3 == 0 {
							if _, err := db.Exec(ctx, `UPDATE stepgate.message SET consumed_seq = 1 WHERE run_id = $1 AND id = $2`,
								target.ID, fmt.Sprintf("m-%d-%d", w, i)); err != nil {
								return err
							}
						}
						// Fewer deletes than finished runs: some are left, with their journals.
						if i%2 == 1 {
							if _, err := retention.DeleteExpiredRuns(ctx, db, -time.Hour, 1); err != nil {
								return err
							}
						}
					}
					return nil
				}()
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		got, err := usage.TenantUsageOf(ctx, db, tenant)
		require.NoError(t, err)
		want := truth(t, db, tenant)
		require.Equal(t, want, got)
		require.Positive(t, want.StreamBytes)
		require.Positive(t, want.MailboxBytes)
		require.Positive(t, want.EventBytes)
		require.Positive(t, want.JournalBytes)

		// Another tenant's usage is its own.
		_, err = output.WriteStream(ctx, mustBegin(t, db), otherRun.ID, 1, output.StreamWrite{Key: "x", Seq: 1, Chunks: []json.RawMessage{json.RawMessage(`1`)}}, output.StreamBounds{})
		require.NoError(t, err)
		o, err := usage.TenantUsageOf(ctx, db, other)
		require.NoError(t, err)
		require.Equal(t, usage.TenantUsage{Runs: 1}, o, "the write above was rolled back")
	})

	t.Run("ConcurrentStartsPassTheCapByAtMostOneEach", func(t *testing.T) {
		t.Parallel()
		ctx, db := t.Context(), pgtest.DB(t)
		tenant := newTenant()
		mustRegister(t, db, tenant, "fn")
		const max, writers = 10, 4
		var wg sync.WaitGroup
		errs := make(chan error, writers)
		for range writers {
			wg.Go(func() {
				for {
					_, _, err := journal.CreateRun(ctx, db, journal.NewRun{
						ID: newID(), Tenant: tenant, Function: "fn", Input: json.RawMessage(`{}`), MaxTenantRuns: max,
						Identity: journal.Identity{Subject: "tester", Tenant: tenant, Roles: []string{"admin"}},
					})
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			var qe *journal.QuotaError
			require.True(t, errors.As(err, &qe), "%v", err)
			require.Contains(t, qe.Message, fmt.Sprintf("its limit of %d (STEPGATE_MAX_TENANT_RUNS)", max))
		}
		want := truth(t, db, tenant)
		require.GreaterOrEqual(t, want.Runs, int64(max))
		require.LessOrEqual(t, want.Runs, int64(max+writers-1), "at most one run past the cap per other writer in flight")
		got, err := usage.TenantUsageOf(ctx, db, tenant)
		require.NoError(t, err)
		require.Equal(t, want, got)
	})
}

// mustBegin begins a transaction on db, rolled back when the test ends.
func mustBegin(t *testing.T, db *pgxpool.Pool) pgx.Tx {
	tx, err := db.Begin(t.Context())
	require.NoError(t, err)
	t.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(t.Context())) })
	return tx
}

// TestUsageStripePerConnection: each database connection counts a tenant's usage in a
// row of its own (its backend's pid), so two connections never write one row; once a
// connection has ended, FoldUsage moves its rows into the tenant's row of stripe 0, and
// the tenant's usage, the sum, does not change. A live connection's rows stay.
func TestUsageStripePerConnection(t *testing.T) {
	t.Parallel()
	ctx, db := t.Context(), pgtest.DB(t)
	tenant := newTenant()
	mustRegister(t, db, tenant, "fn")
	conn := func() *pgx.Conn {
		c, err := db.Acquire(ctx)
		require.NoError(t, err)
		return c.Hijack() // a connection of its own, closed below
	}
	first, second := conn(), conn()
	defer second.Close(ctx)
	for _, c := range []*pgx.Conn{first, first, second} {
		mustCreateRunOf(t, c, tenant, "fn")
	}
	stripes := func() map[int64]int64 {
		rows, err := db.Query(ctx, `SELECT stripe, runs FROM stepgate.tenant_usage WHERE tenant = $1`, tenant)
		require.NoError(t, err)
		out := map[int64]int64{}
		for rows.Next() {
			var stripe, runs int64
			require.NoError(t, rows.Scan(&stripe, &runs))
			out[stripe] = runs
		}
		require.NoError(t, rows.Err())
		return out
	}
	firstPID, secondPID := int64(first.PgConn().PID()), int64(second.PgConn().PID())
	require.Equal(t, map[int64]int64{firstPID: 2, secondPID: 1}, stripes(), "a row per connection")

	require.NoError(t, first.Close(ctx))
	require.Eventually(t, func() bool {
		var alive bool
		return db.QueryRow(ctx, `SELECT stepgate.backend_alive($1)`, firstPID).Scan(&alive) == nil && !alive
	}, 10*time.Second, 5*time.Millisecond, "the first connection's backend ends")
	_, err := usage.FoldUsage(ctx, db, 1000)
	require.NoError(t, err)
	require.Equal(t, map[int64]int64{0: 2, secondPID: 1}, stripes(), "the ended connection's row folded into stripe 0; the live one's kept")
	u, err := usage.TenantUsageOf(ctx, db, tenant)
	require.NoError(t, err)
	require.Equal(t, int64(3), u.Runs, "the sum does not change")
}
