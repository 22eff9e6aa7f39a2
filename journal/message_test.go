package journal_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
)

func message(run *journal.Run, id, topic, data string) journal.NewMessage {
	return journal.NewMessage{
		Tenant: run.Tenant, RunID: run.ID, ID: id, Topic: topic, Data: json.RawMessage(data),
		Identity: journal.Identity{Subject: "sender", Tenant: run.Tenant, Roles: []string{}},
	}
}

func TestMessages(t *testing.T) {
	t.Parallel()

	t.Run("AReceiveTakesTheOldestOfItsTopicOnce", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		for _, m := range []journal.NewMessage{message(run, "1", "other", `0`), message(run, "2", "q", `1`), message(run, "3", "q", `2`)} {
			sent, err := journal.SendMessage(ctx, tx, m)
			require.NoError(t, err)
			require.False(t, sent.Resumed, "the run is running: the message waits")
			require.Equal(t, journal.StatusRunning, sent.Status)
		}
		f, err := journal.Finish(ctx, tx, run.ID, 1, journal.Receiving(journal.Receive{Seq: 1, Name: "q", Topic: "q", Timeout: time.Hour}))
		require.NoError(t, err)
		require.Equal(t, dbNow(t, tx), *f.WakeAt, "a message was there: due now")
		e := mustEntries(t, tx, run.ID)[0]
		require.Equal(t, journal.KindReceive, e.Kind)
		var out struct {
			Message struct {
				ID       string           `json:"id"`
				Identity journal.Identity `json:"identity"`
			} `json:"message"`
		}
		require.NoError(t, json.Unmarshal(e.Output, &out))
		require.Equal(t, "2", out.Message.ID)
		require.Equal(t, "sender", out.Message.Identity.Subject)

		_, err = journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.NoError(t, err)
		_, err = journal.Finish(ctx, tx, run.ID, 2, journal.Receiving(journal.Receive{Seq: 2, Name: "q", Topic: "q", Timeout: time.Hour}))
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(mustEntries(t, tx, run.ID)[1].Output, &out))
		require.Equal(t, "3", out.Message.ID)

		// The topic is empty now: the third receive waits, and the next message resumes it.
		_, err = journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.NoError(t, err)
		f, err = journal.Finish(ctx, tx, run.ID, 3, journal.Receiving(journal.Receive{Seq: 3, Name: "q", Topic: "q", Timeout: time.Hour}))
		require.NoError(t, err)
		require.True(t, f.WakeAt.After(dbNow(t, tx)), "waits until its timeout")
		require.Equal(t, "q", mustGetRun(t, tx, run).Awaiting.Topic)
		sent, err := journal.SendMessage(ctx, tx, message(run, "4", "q", `3`))
		require.NoError(t, err)
		require.True(t, sent.Resumed)
		require.Equal(t, 3, *sent.Message.ConsumedSeq)
		require.Equal(t, dbNow(t, tx), *mustGetRun(t, tx, run).WakeAt)
		require.Len(t, mustEntries(t, tx, run.ID), 3)
		var waits int
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM stepgate.run_wait WHERE run_id = $1`, run.ID).Scan(&waits))
		require.Zero(t, waits)
	})

	t.Run("RefusalsAndDuplicates", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx)
		_, err := journal.SendMessage(ctx, tx, journal.NewMessage{Tenant: newTenant(), RunID: run.ID, ID: "x", Topic: "t"})
		require.ErrorIs(t, err, journal.ErrNotFound, "another tenant's run")

		first, err := journal.SendMessage(ctx, tx, message(run, "d", "t", `"first"`))
		require.NoError(t, err)
		_, err = journal.CancelRun(ctx, tx, run.Tenant, run.ID, journal.Identity{Subject: "ops"})
		require.NoError(t, err)
		dup, err := journal.SendMessage(ctx, tx, message(run, "d", "t", `"second"`))
		require.NoError(t, err, "a duplicate answers the first message, finished run or not")
		require.True(t, dup.Duplicate)
		require.JSONEq(t, `"first"`, string(dup.Message.Data))
		require.Equal(t, first.Message.CreatedAt, dup.Message.CreatedAt)
		sent, err := journal.SendMessage(ctx, tx, message(run, "e", "t", `1`))
		require.ErrorIs(t, err, journal.ErrFinished)
		require.Equal(t, journal.StatusCancelled, sent.Status)
	})

	t.Run("TheMailboxIsBounded", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx)
		_, err := tx.Exec(ctx, `
			INSERT INTO stepgate.message (tenant, run_id, id, topic, data, identity)
			SELECT $1, $2, 'm' || i, 'full', 'null', '{}' FROM generate_series(1, $3) i`,
			run.Tenant, run.ID, journal.MaxUnconsumedMessages)
		require.NoError(t, err)
		_, err = journal.SendMessage(ctx, tx, message(run, "one-more", "full", `1`))
		require.ErrorIs(t, err, journal.ErrMailboxFull)
		require.ErrorContains(t, err, fmt.Sprintf("%d unconsumed messages", journal.MaxUnconsumedMessages))
	})
}
