package journal_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/output"
)

func value(seq int, key, v string) journal.Entry {
	return journal.Entry{Seq: seq, Kind: output.KindValue, Name: key, Output: json.RawMessage(v)}
}

func chunks(cs ...string) []json.RawMessage {
	out := make([]json.RawMessage, len(cs))
	for i, c := range cs {
		out[i] = json.RawMessage(c)
	}
	return out
}

func TestValues(t *testing.T) {
	t.Parallel()
	ctx, tx := t.Context(), pgtest.Tx(t)
	run := mustCreateRun(t, tx, claimed)
	_, err := output.GetValue(ctx, tx, run.Tenant, run.ID, "progress")
	require.ErrorIs(t, err, journal.ErrNotFound)
	for _, e := range []journal.Entry{value(1, "progress", `10`), step(2, "a", `1`), value(3, "url", `"u"`), value(4, "progress", `40`)} {
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, e, journal.Bounds{}))
	}
	v, err := output.GetValue(ctx, tx, run.Tenant, run.ID, "progress")
	require.NoError(t, err)
	require.Equal(t, 4, v.Version)
	require.JSONEq(t, `40`, string(v.Value))
	_, err = output.GetValue(ctx, tx, "another-tenant", run.ID, "progress")
	require.ErrorIs(t, err, journal.ErrNotFound)

	vs, err := output.ListValues(ctx, tx, run.Tenant, run.ID)
	require.NoError(t, err)
	require.Len(t, vs, 2)
	require.Equal(t, []string{"progress", "url"}, []string{vs[0].Key, vs[1].Key})
	require.Equal(t, []int{4, 3}, []int{vs[0].Version, vs[1].Version})
}

func TestWriteStream(t *testing.T) {
	t.Parallel()

	t.Run("PlacesDeduplicate", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		write := func(w output.StreamWrite) *output.Stream {
			t.Helper()
			w.Key = "tokens"
			st, err := output.WriteStream(ctx, tx, run.ID, 1, w, output.StreamBounds{})
			require.NoError(t, err)
			return st
		}
		require.Equal(t, 2, write(output.StreamWrite{Seq: 1, Chunks: chunks(`"a"`, `"b"`)}).Length)
		require.Equal(t, 2, write(output.StreamWrite{Seq: 1, Chunks: chunks(`"a"`, `"b"`)}).Length, "a repeat")
		require.Equal(t, 3, write(output.StreamWrite{Seq: 1, Index: 1, Chunks: chunks(`"b"`, `"c"`)}).Length)
		require.Equal(t, 4, write(output.StreamWrite{Seq: 2, Attempt: 1, Chunks: chunks(`{"t":"d"}`)}).Length)
		require.Equal(t, 5, write(output.StreamWrite{Seq: 2, Attempt: 2, Chunks: chunks(`{"t":"d"}`)}).Length, "another attempt's")
		st := write(output.StreamWrite{Seq: 3, Close: true})
		require.NotNil(t, st.ClosedAt)
		require.Equal(t, 5, st.Length)

		cs, err := output.ReadChunks(ctx, tx, run.Tenant, run.ID, "tokens", 1, 2)
		require.NoError(t, err)
		require.Len(t, cs, 2)
		require.Equal(t, 1, cs[0].Offset)
		require.JSONEq(t, `"b"`, string(cs[0].Data))
		require.JSONEq(t, `"c"`, string(cs[1].Data))
		cs, err = output.ReadChunks(ctx, tx, "another-tenant", run.ID, "tokens", 0, 0)
		require.NoError(t, err)
		require.Empty(t, cs)

		_, err = output.WriteStream(ctx, tx, run.ID, 1, output.StreamWrite{Key: "tokens", Seq: 3, Chunks: chunks(`"late"`)}, output.StreamBounds{})
		require.ErrorIs(t, err, output.ErrStreamClosed)
		require.Equal(t, 5, write(output.StreamWrite{Seq: 2, Attempt: 2, Chunks: chunks(`{"t":"d"}`), Close: true}).Length, "a repeat after the close")
	})

	t.Run("Fenced", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		_, err := output.WriteStream(ctx, tx, run.ID, 2, output.StreamWrite{Key: "k", Seq: 1, Chunks: chunks(`1`)}, output.StreamBounds{})
		require.ErrorIs(t, err, journal.ErrSuperseded)
		queued := mustCreateRun(t, tx)
		_, err = output.WriteStream(ctx, tx, queued.ID, 0, output.StreamWrite{Key: "k", Seq: 1, Chunks: chunks(`1`)}, output.StreamBounds{})
		require.ErrorIs(t, err, journal.ErrSuperseded, "a run that is not running")
	})

	t.Run("Bounds", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		run := mustCreateRun(t, tx, claimed)
		b := output.StreamBounds{MaxChunkBytes: 5, MaxChunks: 2, MaxBytes: 8, MaxStreams: 1}
		for _, tc := range []struct {
			w    output.StreamWrite
			want string
		}{
			{output.StreamWrite{Key: "k", Seq: 1, Chunks: chunks(`"abcdef"`)}, "STEPGATE_MAX_CHUNK_BYTES"},
			{output.StreamWrite{Key: "k", Seq: 1, Chunks: chunks(`1`, `2`, `3`)}, "STEPGATE_MAX_STREAM_CHUNKS"},
			{output.StreamWrite{Key: "k", Seq: 1, Chunks: chunks(`12345`, `6789`)}, "STEPGATE_MAX_STREAM_BYTES"},
		} {
			_, err := output.WriteStream(ctx, tx, run.ID, 1, tc.w, b)
			var le *journal.LimitError
			require.ErrorAs(t, err, &le)
			require.Contains(t, le.Message, tc.want)
		}
		_, err := output.WriteStream(ctx, tx, run.ID, 1, output.StreamWrite{Key: "k", Seq: 1, Chunks: chunks(`1`)}, b)
		require.NoError(t, err, "nothing of the refused writes was stored")
		_, err = output.WriteStream(ctx, tx, run.ID, 1, output.StreamWrite{Key: "k2", Seq: 1, Chunks: chunks(`1`)}, b)
		require.ErrorContains(t, err, "STEPGATE_MAX_RUN_STREAMS")
	})
}

// BenchmarkWriteStream measures a stream write on a function's hot path, as the invoker
// makes it: one chunk appended to one stream, in a transaction of its own.
func BenchmarkWriteStream(b *testing.B) {
	db := pgtest.DB(b)
	run := mustCreateRun(b, db, claimed)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tx, err := db.Begin(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		w := output.StreamWrite{Key: "tokens", Seq: 1, Index: i, Chunks: chunks(`"token"`)}
		if _, err := output.WriteStream(b.Context(), tx, run.ID, run.Invocation, w, output.StreamBounds{MaxTenantBytes: 1 << 40}); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSetValue measures a value write on a function's hot path, as the invoker
// makes it: the value's entry and the readers' notification, in a transaction.
func BenchmarkSetValue(b *testing.B) {
	db := pgtest.DB(b)
	run := mustCreateRun(b, db, claimed)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		tx, err := db.Begin(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		if err := journal.AppendEntry(b.Context(), tx, run.ID, run.Invocation, value(i+1, "progress", `1`), journal.Bounds{}); err != nil {
			b.Fatal(err)
		}
		if err := output.NotifyOutput(b.Context(), tx, run.ID); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
}
