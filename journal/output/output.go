// Package output holds what a run publishes while it runs, for clients to read before it
// ends: values (the latest of each key) and streams (ordered chunks).
package output

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
	"github.com/stepgate/stepgate/journal/storable"
)

// KindValue is the journal entry of a value a run published (step.SetValue), named after
// its key, with the value as its output: the key's latest entry is its value. It is
// checkpointed like a step.
const KindValue = "value"

// OutputChannel is the Postgres channel on which a run's new value or stream write
// announces the run id, when a reader has attached to the run (see journal.Attach): readers
// look again.
const OutputChannel = "stepgate_run_output"

// Value is the latest value of a run's key.
type Value struct {
	Key     string          `db:"name"`
	Value   json.RawMessage `db:"output"`
	Version int             `db:"seq"` // The seq of its entry: a later value has a greater one.
	SetAt   time.Time       `db:"finished_at"`
}

// GetValue returns the latest value of the tenant's run under key, or journal.ErrNotFound when
// the key has none (or the run is not the tenant's).
func GetValue(ctx context.Context, db journal.DB, tenant, runID, key string) (*Value, error) {
	r, err := dbsqlc.New(db).ValueGet(ctx, dbsqlc.ValueGetParams{Tenant: tenant, RunID: runID, Key: key})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, journal.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get value %s of run %s: %w", key, runID, err)
	}
	v := valueOf(dbsqlc.ValueListRow(r))
	return &v, nil
}

// valueOf is the value a value entry's row holds.
func valueOf(r dbsqlc.ValueListRow) Value {
	return Value{Key: r.Name, Value: r.Output, Version: int(r.Seq), SetAt: r.FinishedAt}
}

// ListValues returns the latest value of each key of the tenant's run, by key. The
// journal's bounds bound them.
func ListValues(ctx context.Context, db journal.DB, tenant, runID string) ([]Value, error) {
	rows, err := dbsqlc.New(db).ValueList(ctx, dbsqlc.ValueListParams{Tenant: tenant, RunID: runID})
	if err != nil {
		return nil, fmt.Errorf("list values of run %s: %w", runID, err)
	}
	vs := make([]Value, len(rows))
	for i, r := range rows {
		vs[i] = valueOf(r)
	}
	return vs, nil
}

// NotifyOutput announces on OutputChannel that runID published something, when a reader
// has attached to it. Call it in the transaction of the write: the notification goes
// out at its commit.
func NotifyOutput(ctx context.Context, db journal.DB, runID string) error {
	if err := dbsqlc.New(db).OutputNotify(ctx, runID); err != nil {
		return fmt.Errorf("notify output of run %s: %w", runID, err)
	}
	return nil
}

// Stream is a stream of a run: its length (the next chunk's offset) and whether the run
// closed it.
type Stream struct {
	Key       string     `db:"key"`
	Length    int        `db:"length"`
	Bytes     int64      `db:"bytes"`
	ClosedAt  *time.Time `db:"closed_at"`
	CreatedAt time.Time  `db:"created_at"`
}

// streamOf is the stream a row of stepgate.stream holds.
func streamOf(r dbsqlc.StreamGetRow) *Stream {
	return &Stream{Key: r.Key, Length: int(r.Length), Bytes: r.Bytes, ClosedAt: r.ClosedAt, CreatedAt: r.CreatedAt}
}

// Chunk is one chunk of a stream, at its offset (from 0).
type Chunk struct {
	Offset int             `db:"pos"`
	Data   json.RawMessage `db:"data"`
}

// StreamBounds limit a run's streams. A zero field does not limit.
type StreamBounds struct {
	MaxChunkBytes int   // Bytes of one chunk's JSON.
	MaxChunks     int   // Chunks of one stream.
	MaxBytes      int64 // Bytes of one stream's chunks.
	MaxStreams    int   // Streams of one run.
	// MaxTenantBytes caps the bytes of all the streams of the run's tenant
	// (usage.Quotas.MaxStreamBytes).
	MaxTenantBytes int64
}

// StreamWrite is chunks a run's invocation appends to its stream Key, and whether it
// closes the stream after them. Seq, Attempt and Index say where the function wrote
// them: chunk i of Chunks is the one written at (Seq, Attempt, Index+i), and a chunk
// whose place the stream holds already is skipped.
type StreamWrite struct {
	Key                 string
	Seq, Attempt, Index int
	Chunks              []json.RawMessage
	Close               bool
}

// ErrStreamClosed: new chunks for a stream the run closed.
var ErrStreamClosed = errors.New("journal: stream is closed")

// WriteStream appends w's new chunks to the run's stream, at its next offsets in order,
// for the invocation that owns the running run (journal.ErrSuperseded otherwise), and closes it
// when w.Close; it returns the stream as the write leaves it. Chunks already written at
// their place are skipped, so a repeated write adds nothing. A write that would pass a
// bound is refused whole with a *journal.LimitError, one that would pass the tenant's
// b.MaxTenantBytes with a *journal.QuotaError; new chunks for a closed stream with
// ErrStreamClosed. Run it in a transaction: it locks the stream's row until the end,
// which orders concurrent writes. It notifies OutputChannel when a reader has attached
// to the run and the stream changed.
//
// Triggers that follow it (docs/internals.md): stream_usage_on_update.
func WriteStream(ctx context.Context, tx pgx.Tx, runID string, invocation int, w StreamWrite, b StreamBounds) (*Stream, error) {
	for i, c := range w.Chunks {
		if b.MaxChunkBytes > 0 && len(c) > b.MaxChunkBytes {
			return nil, &journal.LimitError{Message: fmt.Sprintf(
				"chunk %d of the write to stream %q holds %d bytes, more than the limit of %d (STEPGATE_MAX_CHUNK_BYTES)", i, w.Key, len(c), b.MaxChunkBytes)}
		}
	}
	q := dbsqlc.New(tx)
	writer, err := q.StreamWriter(ctx, dbsqlc.StreamWriterParams{RunID: runID, Invocation: int32(invocation)})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, journal.ErrSuperseded
	}
	if err != nil {
		return nil, fmt.Errorf("write stream %s of run %s: %w", w.Key, runID, err)
	}
	tenant, used := writer.Tenant, writer.StreamBytes // used: the tenant's stream bytes
	st, err := lockStream(ctx, q, tenant, runID, w.Key)
	if errors.Is(err, journal.ErrNotFound) {
		n, cerr := q.StreamCount(ctx, dbsqlc.StreamCountParams{Tenant: tenant, RunID: runID})
		if cerr != nil {
			return nil, fmt.Errorf("count streams of run %s: %w", runID, cerr)
		}
		if b.MaxStreams > 0 && n >= int64(b.MaxStreams) {
			return nil, &journal.LimitError{Message: fmt.Sprintf(
				"stream %q would be the run's stream number %d, more than its limit of %d (STEPGATE_MAX_RUN_STREAMS)", w.Key, n+1, b.MaxStreams)}
		}
		if err := q.StreamCreate(ctx, dbsqlc.StreamCreateParams{Tenant: tenant, RunID: runID, Key: w.Key}); err != nil {
			return nil, fmt.Errorf("create stream %s of run %s: %w", w.Key, runID, err)
		}
		st, err = lockStream(ctx, q, tenant, runID, w.Key)
	}
	if err != nil {
		return nil, err
	}

	written := map[int]bool{}
	if len(w.Chunks) > 0 {
		idx, err := q.StreamWrittenPlaces(ctx, dbsqlc.StreamWrittenPlacesParams{
			Tenant: tenant, RunID: runID, Key: w.Key, AtSeq: int32(w.Seq), AtAttempt: int32(w.Attempt),
			FromIndex: int32(w.Index), ToIndex: int32(w.Index + len(w.Chunks)),
		})
		if err != nil {
			return nil, fmt.Errorf("write stream %s of run %s: %w", w.Key, runID, err)
		}
		for _, i := range idx {
			written[int(i)] = true
		}
	}
	var data []json.RawMessage
	var places []int32
	var size int64
	for i, c := range w.Chunks {
		if !written[w.Index+i] {
			data, places = append(data, c), append(places, int32(w.Index+i))
			size += int64(len(c))
		}
	}
	switch {
	case len(data) > 0 && st.ClosedAt != nil:
		return nil, fmt.Errorf("%w: stream %q was closed at %d chunks", ErrStreamClosed, w.Key, st.Length)
	case b.MaxChunks > 0 && st.Length+len(data) > b.MaxChunks:
		return nil, &journal.LimitError{Message: fmt.Sprintf(
			"stream %q would hold %d chunks, more than its limit of %d (STEPGATE_MAX_STREAM_CHUNKS)", w.Key, st.Length+len(data), b.MaxChunks)}
	case b.MaxBytes > 0 && st.Bytes+size > b.MaxBytes:
		return nil, &journal.LimitError{Message: fmt.Sprintf(
			"stream %q would hold %d bytes, more than its limit of %d (STEPGATE_MAX_STREAM_BYTES)", w.Key, st.Bytes+size, b.MaxBytes)}
	case b.MaxTenantBytes > 0 && size > 0 && used+size > b.MaxTenantBytes:
		return nil, &journal.QuotaError{Message: fmt.Sprintf(
			"the streams of tenant %s would hold %d bytes, more than its limit of %d (STEPGATE_MAX_TENANT_STREAM_BYTES); the write to stream %q is refused, the run goes on",
			tenant, used+size, b.MaxTenantBytes, w.Key)}
	}
	closing := w.Close && st.ClosedAt == nil
	if len(data) == 0 && !closing {
		return st, nil
	}
	if len(data) > 0 {
		err := q.StreamAppendChunks(ctx, dbsqlc.StreamAppendChunksParams{
			Tenant: tenant, RunID: runID, Key: w.Key, FirstPos: int64(st.Length),
			AtSeq: int32(w.Seq), AtAttempt: int32(w.Attempt), Chunks: data, Places: places,
		})
		if err != nil {
			return nil, fmt.Errorf("write stream %s of run %s: %w", w.Key, runID, storable.Translate(err))
		}
	}
	r, err := q.StreamAdvance(ctx, dbsqlc.StreamAdvanceParams{
		Tenant: tenant, RunID: runID, Key: w.Key, Chunks: int32(len(data)), Bytes: size, Close: w.Close,
	})
	if err != nil {
		return nil, fmt.Errorf("write stream %s of run %s: %w", w.Key, runID, err)
	}
	st = streamOf(dbsqlc.StreamGetRow(r))
	if writer.Notify {
		if err := NotifyOutput(ctx, tx, runID); err != nil {
			return nil, err
		}
	}
	return st, nil
}

func lockStream(ctx context.Context, q *dbsqlc.Queries, tenant, runID, key string) (*Stream, error) {
	r, err := q.StreamLock(ctx, dbsqlc.StreamLockParams{Tenant: tenant, RunID: runID, Key: key})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, journal.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("lock stream %s of run %s: %w", key, runID, err)
	}
	return streamOf(dbsqlc.StreamGetRow(r)), nil
}

// GetStream returns the tenant's run's stream key, or journal.ErrNotFound when the run has not
// written it.
func GetStream(ctx context.Context, db journal.DB, tenant, runID, key string) (*Stream, error) {
	r, err := dbsqlc.New(db).StreamGet(ctx, dbsqlc.StreamGetParams{Tenant: tenant, RunID: runID, Key: key})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, journal.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get stream %s of run %s: %w", key, runID, err)
	}
	return streamOf(r), nil
}

// ListStreams returns the streams of the tenant's run, by key.
func ListStreams(ctx context.Context, db journal.DB, tenant, runID string) ([]Stream, error) {
	rows, err := dbsqlc.New(db).StreamList(ctx, dbsqlc.StreamListParams{Tenant: tenant, RunID: runID})
	if err != nil {
		return nil, fmt.Errorf("list streams of run %s: %w", runID, err)
	}
	sts := make([]Stream, len(rows))
	for i, r := range rows {
		sts[i] = *streamOf(dbsqlc.StreamGetRow(r))
	}
	return sts, nil
}

// ReadChunks returns the chunks of the tenant's run's stream key from offset on, in
// order, at most limit of them (100 when limit is not positive).
func ReadChunks(ctx context.Context, db journal.DB, tenant, runID, key string, offset, limit int) ([]Chunk, error) {
	if limit <= 0 {
		limit = 100
	}
	if offset < math.MinInt32 || offset > math.MaxInt32 {
		// As pgx refuses to encode it: a chunk's offset is a Postgres integer.
		return nil, fmt.Errorf("read stream %s of run %s: offset %d is out of range for an integer", key, runID, offset)
	}
	rows, err := dbsqlc.New(db).StreamReadChunks(ctx, dbsqlc.StreamReadChunksParams{
		Tenant: tenant, RunID: runID, Key: key, FromPos: int32(offset), MaxChunks: int64(limit),
	})
	if err != nil {
		return nil, fmt.Errorf("read stream %s of run %s: %w", key, runID, err)
	}
	cs := make([]Chunk, len(rows))
	for i, r := range rows {
		cs[i] = Chunk{Offset: int(r.Pos), Data: r.Data}
	}
	return cs, nil
}
