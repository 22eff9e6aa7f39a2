package journal_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/request"
)

// TestRepliesToOneRequestAreSerialized: two replies to one request, checkpointed at
// once (at two seqs, as parallel steps may), are serialized by the run's lock: the
// second sees the first and is refused, so a request never has two replies.
func TestRepliesToOneRequestAreSerialized(t *testing.T) {
	t.Parallel()
	ctx, db := t.Context(), pgtest.DB(t)
	run := mustCreateRun(t, db, claimed)
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		req := message(run, "q-1", journal.RequestTopic("ask"), `1`)
		req.Request = true
		_, err := journal.SendMessage(ctx, tx, req)
		return err
	})
	require.NoError(t, err)
	_, err = journal.Finish(ctx, db, run.ID, 1, journal.Receiving(journal.Receive{Seq: 1, Name: "ask", Topic: journal.RequestTopic("ask"), Timeout: time.Hour}))
	require.NoError(t, err)
	_, err = journal.ClaimRun(ctx, db, run.ID, time.Minute)
	require.NoError(t, err)

	first, err := db.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = first.Rollback(context.WithoutCancel(ctx)) }()
	reply := journal.Entry{Seq: 2, Kind: journal.KindReply, Name: "q-1", Output: []byte(`"yes"`), Window: 2}
	require.NoError(t, journal.Reply(ctx, first, run.ID, 2, reply, journal.Bounds{}))

	second := make(chan error, 1)
	go func() {
		again := journal.Entry{Seq: 3, Kind: journal.KindReply, Name: "q-1", Output: []byte(`"no"`), Window: 2}
		second <- pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error { return journal.Reply(ctx, tx, run.ID, 2, again, journal.Bounds{}) })
	}()
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM pg_locks JOIN pg_stat_activity USING (pid)
			WHERE datname = current_database() AND NOT granted`).Scan(&waiting))
		return waiting > 0
	}, 30*time.Second, 5*time.Millisecond, "the second reply waiting for the run's lock")
	require.NoError(t, first.Commit(ctx))
	err = <-second
	require.ErrorIs(t, err, journal.ErrBadReply)
	require.ErrorContains(t, err, `already replied to request "q-1", at seq 2`)

	r, err := request.RequestOf(ctx, db, run.Tenant, run.ID, "q-1")
	require.NoError(t, err)
	require.Equal(t, request.RequestReplied, r.Status)
	require.JSONEq(t, `"yes"`, string(r.Reply))
	require.Len(t, mustEntries(t, db, run.ID), 2, "a receive and one reply")
}
