package journal_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
)

// testCallbackKey seals the tests' callback tokens.
var testCallbackKey = journal.CallbackKey("0123456789abcdef0123456789abcdef")

// mustCallback journals a callback at seq 1 of a new claimed run and returns the run.
func mustCallback(t *testing.T, db journal.DB, token string) *journal.Run {
	t.Helper()
	run := mustCreateRun(t, db, claimed)
	_, err := journal.CreateCallback(t.Context(), db, run.ID, run.Invocation, journal.NewCallback{
		Seq: 1, Name: "approval", Token: token, URL: "http://gw/v1/callbacks/" + token, Key: testCallbackKey, Timeout: time.Hour,
	}, journal.Bounds{})
	require.NoError(t, err)
	return run
}

func TestCallbacks(t *testing.T) {
	t.Parallel()

	t.Run("ARepeatedCheckpointKeepsTheFirstToken", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCallback(t, tx, "first")
		out, err := journal.CreateCallback(ctx, tx, run.ID, run.Invocation, journal.NewCallback{
			Seq: 1, Name: "approval", Token: "second", URL: "http://gw/v1/callbacks/second", Key: testCallbackKey, Timeout: time.Hour,
		}, journal.Bounds{})
		require.NoError(t, err)
		var cb journal.CallbackOutput
		require.NoError(t, json.Unmarshal(out, &cb))
		require.Equal(t, "first", cb.Token)
		_, err = journal.ResolveCallback(ctx, tx, journal.CallbackRef{TokenHash: journal.HashToken("second")}, journal.Resolution{})
		require.ErrorIs(t, err, journal.ErrNotFound, "the second token was never stored")

		_, err = journal.CreateCallback(ctx, tx, run.ID, run.Invocation, journal.NewCallback{Seq: 1, Name: "other", Token: "third", URL: "http://gw/v1/callbacks/third", Key: testCallbackKey, Timeout: time.Hour}, journal.Bounds{})
		require.ErrorIs(t, err, journal.ErrConflict)
		_, err = journal.CreateCallback(ctx, tx, run.ID, run.Invocation+1, journal.NewCallback{Seq: 2, Name: "late", Token: "fourth", URL: "http://gw/v1/callbacks/fourth", Key: testCallbackKey, Timeout: time.Hour}, journal.Bounds{})
		require.ErrorIs(t, err, journal.ErrSuperseded)
	})

	t.Run("AnAwaitOfWhatIsNotACallbackIsErrBadAwait", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		_, err := journal.Finish(ctx, tx, run.ID, run.Invocation, journal.WaitingForCallback(
			journal.CallbackWait{Seq: 2, Name: "approval", CallbackSeq: 1}, step(1, "a", `1`)))
		require.ErrorIs(t, err, journal.ErrBadAwait)
	})

	t.Run("OnceOnly", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		mustCallback(t, tx, "once")
		ref := journal.CallbackRef{TokenHash: journal.HashToken("once")}
		cb, err := journal.ResolveCallback(ctx, tx, ref, journal.Resolution{Data: json.RawMessage(`1`)})
		require.NoError(t, err)
		require.False(t, cb.Woken, "nothing waits yet")
		_, err = journal.ResolveCallback(ctx, tx, ref, journal.Resolution{Error: &journal.ErrorInfo{Type: "rejected", Message: "no"}})
		var closed *journal.ClosedCallbackError
		require.ErrorAs(t, err, &closed)
		require.Contains(t, closed.Reason, "already resolved")
	})

	// Whichever of a resolution and the await that reads it commits first, the other
	// sees it: the run gets the resolution once, and is due at once.
	t.Run("ResolutionAndAwaitRace", func(t *testing.T) {
		t.Parallel()
		ctx, db := t.Context(), pgtest.DB(t)
		woken := 0
		defer func() {
			t.Logf("the resolution resumed the stored wait in %d rounds of 20; the await journaled it in the others", woken)
		}()
		for i := range 20 {
			token := newID()
			run := mustCallback(t, db, token)
			var wg sync.WaitGroup
			var resolved *journal.Callback
			var errAwait, errResolve error
			start := make(chan struct{})
			wg.Go(func() {
				<-start
				errAwait = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
					_, err := journal.Finish(ctx, tx, run.ID, run.Invocation, journal.WaitingForCallback(
						journal.CallbackWait{Seq: 2, Name: "approval", CallbackSeq: 1, Timeout: time.Hour}))
					return err
				})
			})
			wg.Go(func() {
				<-start
				errResolve = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) (err error) {
					resolved, err = journal.ResolveCallback(ctx, tx, journal.CallbackRef{TokenHash: journal.HashToken(token)},
						journal.Resolution{Data: json.RawMessage(`{"i":1}`)})
					return err
				})
			})
			close(start)
			wg.Wait()
			require.NoError(t, errAwait, "round %d", i)
			require.NoError(t, errResolve, "round %d", i)
			e := entryAt(t, db, run.ID, 2)
			require.Equal(t, journal.KindAwaitCallback, e.Kind)
			var out struct {
				Data     json.RawMessage `json:"data"`
				Resolver string          `json:"resolver"`
			}
			require.NoError(t, json.Unmarshal(e.Output, &out))
			require.JSONEq(t, `{"i":1}`, string(out.Data), "round %d", i)
			require.Equal(t, journal.ResolverToken, out.Resolver)
			var waits int
			var due bool
			require.NoError(t, db.QueryRow(ctx, `
				SELECT (SELECT count(*) FROM stepgate.run_wait WHERE run_id = $1), wake_at <= now()
				FROM stepgate.run WHERE id = $1`, run.ID).Scan(&waits, &due))
			require.Zero(t, waits, "round %d: no wait is left", i)
			require.True(t, due, "round %d: the run is due (woken: %v)", i, resolved.Woken)
			if resolved.Woken {
				woken++
			}
		}
	})
}

func entryAt(t *testing.T, db journal.DB, runID string, seq int) journal.Entry {
	t.Helper()
	var e journal.Entry
	require.NoError(t, db.QueryRow(context.WithoutCancel(t.Context()),
		`SELECT kind, output FROM stepgate.journal_entry WHERE run_id = $1 AND seq = $2`, runID, seq).Scan(&e.Kind, &e.Output))
	return e
}
