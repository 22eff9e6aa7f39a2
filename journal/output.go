package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// What a run publishes while it runs, for clients to read before it ends: values (the
// latest of each key) and streams (ordered chunks).

// KindValue is the journal entry of a value a run published (step.SetValue), named after
// its key, with the value as its output: the key's latest entry is its value. It is
// checkpointed like a step.
const KindValue = "value"

// OutputChannel is the Postgres channel on which a run's new value or stream write
// announces the run id, when a reader has attached to the run (see Attach): readers
// look again.
const OutputChannel = "stepgate_run_output"

// Value is the latest value of a run's key.
type Value struct {
	Key     string          `db:"name"`
	Value   json.RawMessage `db:"output"`
	Version int             `db:"seq"` // The seq of its entry: a later value has a greater one.
	SetAt   time.Time       `db:"finished_at"`
}

// GetValue returns the latest value of the tenant's run under key, or ErrNotFound when
// the key has none (or the run is not the tenant's).
func GetValue(ctx context.Context, db DB, tenant, runID, key string) (*Value, error) {
	rows, _ := db.Query(ctx, `
		SELECT e.name, e.output, e.seq, e.finished_at FROM stepgate.journal_entry e
		JOIN stepgate.run r ON r.id = e.run_id AND r.tenant = $1
		WHERE e.run_id = $2 AND e.kind = 'value' AND e.name = $3
		ORDER BY e.seq DESC LIMIT 1`, tenant, runID, key)
	v, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Value])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get value %s of run %s: %w", key, runID, err)
	}
	return v, nil
}

// ListValues returns the latest value of each key of the tenant's run, by key. The
// journal's bounds bound them.
func ListValues(ctx context.Context, db DB, tenant, runID string) ([]Value, error) {
	rows, _ := db.Query(ctx, `
		SELECT DISTINCT ON (e.name) e.name, e.output, e.seq, e.finished_at FROM stepgate.journal_entry e
		JOIN stepgate.run r ON r.id = e.run_id AND r.tenant = $1
		WHERE e.run_id = $2 AND e.kind = 'value'
		ORDER BY e.name, e.seq DESC`, tenant, runID)
	vs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Value])
	if err != nil {
		return nil, fmt.Errorf("list values of run %s: %w", runID, err)
	}
	return vs, nil
}

// NotifyOutput announces on OutputChannel that runID published something, when a reader
// has attached to it. Call it in the transaction of the write: the notification goes
// out at its commit.
func NotifyOutput(ctx context.Context, db DB, runID string) error {
	if _, err := db.Exec(ctx, `
		SELECT pg_notify('`+OutputChannel+`', id::text) FROM stepgate.run WHERE id = $1 AND notify`, runID); err != nil {
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

const streamColumns = `key, length, bytes, closed_at, created_at`

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
	// (Quotas.MaxStreamBytes).
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
// for the invocation that owns the running run (ErrSuperseded otherwise), and closes it
// when w.Close; it returns the stream as the write leaves it. Chunks already written at
// their place are skipped, so a repeated write adds nothing. A write that would pass a
// bound is refused whole with a *LimitError, one that would pass the tenant's
// b.MaxTenantBytes with a *QuotaError; new chunks for a closed stream with
// ErrStreamClosed. Run it in a transaction: it locks the stream's row until the end,
// which orders concurrent writes. It notifies OutputChannel when a reader has attached
// to the run and the stream changed.
func WriteStream(ctx context.Context, tx pgx.Tx, runID string, invocation int, w StreamWrite, b StreamBounds) (*Stream, error) {
	for i, c := range w.Chunks {
		if b.MaxChunkBytes > 0 && len(c) > b.MaxChunkBytes {
			return nil, &LimitError{Message: fmt.Sprintf(
				"chunk %d of the write to stream %q holds %d bytes, more than the limit of %d (STEPGATE_MAX_CHUNK_BYTES)", i, w.Key, len(c), b.MaxChunkBytes)}
		}
	}
	var tenant string
	var notify bool
	var used int64 // the tenant's stream bytes
	err := tx.QueryRow(ctx, `
		SELECT r.tenant, r.notify, `+fmt.Sprintf(usageSum, "stream_bytes", "r.tenant")+` FROM stepgate.run r
		WHERE r.id = $1 AND r.invocation = $2 AND r.status = 'running' FOR SHARE OF r`, runID, invocation).Scan(&tenant, &notify, &used)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrSuperseded
	}
	if err != nil {
		return nil, fmt.Errorf("write stream %s of run %s: %w", w.Key, runID, err)
	}
	st, err := lockStream(ctx, tx, runID, w.Key)
	if errors.Is(err, ErrNotFound) {
		var n int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM stepgate.stream WHERE run_id = $1`, runID).Scan(&n); err != nil {
			return nil, fmt.Errorf("count streams of run %s: %w", runID, err)
		}
		if b.MaxStreams > 0 && n >= b.MaxStreams {
			return nil, &LimitError{Message: fmt.Sprintf(
				"stream %q would be the run's stream number %d, more than its limit of %d (STEPGATE_MAX_RUN_STREAMS)", w.Key, n+1, b.MaxStreams)}
		}
		if _, err := tx.Exec(ctx, `
			INSERT INTO stepgate.stream (tenant, run_id, key) VALUES ($1, $2, $3)
			ON CONFLICT (run_id, key) DO NOTHING`, tenant, runID, w.Key); err != nil {
			return nil, fmt.Errorf("create stream %s of run %s: %w", w.Key, runID, err)
		}
		st, err = lockStream(ctx, tx, runID, w.Key)
	}
	if err != nil {
		return nil, err
	}

	written := map[int]bool{}
	if len(w.Chunks) > 0 {
		rows, _ := tx.Query(ctx, `
			SELECT at_index FROM stepgate.stream_chunk
			WHERE run_id = $1 AND key = $2 AND at_seq = $3 AND at_attempt = $4 AND at_index >= $5 AND at_index < $6`,
			runID, w.Key, w.Seq, w.Attempt, w.Index, w.Index+len(w.Chunks))
		idx, err := pgx.CollectRows(rows, pgx.RowTo[int])
		if err != nil {
			return nil, fmt.Errorf("write stream %s of run %s: %w", w.Key, runID, err)
		}
		for _, i := range idx {
			written[i] = true
		}
	}
	var data []json.RawMessage
	var places []int
	var size int64
	for i, c := range w.Chunks {
		if !written[w.Index+i] {
			data, places = append(data, c), append(places, w.Index+i)
			size += int64(len(c))
		}
	}
	switch {
	case len(data) > 0 && st.ClosedAt != nil:
		return nil, fmt.Errorf("%w: stream %q was closed at %d chunks", ErrStreamClosed, w.Key, st.Length)
	case b.MaxChunks > 0 && st.Length+len(data) > b.MaxChunks:
		return nil, &LimitError{Message: fmt.Sprintf(
			"stream %q would hold %d chunks, more than its limit of %d (STEPGATE_MAX_STREAM_CHUNKS)", w.Key, st.Length+len(data), b.MaxChunks)}
	case b.MaxBytes > 0 && st.Bytes+size > b.MaxBytes:
		return nil, &LimitError{Message: fmt.Sprintf(
			"stream %q would hold %d bytes, more than its limit of %d (STEPGATE_MAX_STREAM_BYTES)", w.Key, st.Bytes+size, b.MaxBytes)}
	case b.MaxTenantBytes > 0 && size > 0 && used+size > b.MaxTenantBytes:
		return nil, &QuotaError{Message: fmt.Sprintf(
			"the streams of tenant %s would hold %d bytes, more than its limit of %d (STEPGATE_MAX_TENANT_STREAM_BYTES); the write to stream %q is refused, the run goes on",
			tenant, used+size, b.MaxTenantBytes, w.Key)}
	}
	closing := w.Close && st.ClosedAt == nil
	if len(data) == 0 && !closing {
		return st, nil
	}
	if len(data) > 0 {
		if _, err := tx.Exec(ctx, `
			INSERT INTO stepgate.stream_chunk (tenant, run_id, key, pos, data, at_seq, at_attempt, at_index)
			SELECT $1, $2, $3, $4 + u.ord - 1, u.data, $5, $6, u.place
			FROM unnest($7::jsonb[], $8::int[]) WITH ORDINALITY AS u(data, place, ord)`,
			tenant, runID, w.Key, st.Length, w.Seq, w.Attempt, data, places); err != nil {
			return nil, fmt.Errorf("write stream %s of run %s: %w", w.Key, runID, unstorable(err))
		}
	}
	rows, _ := tx.Query(ctx, `
		UPDATE stepgate.stream SET length = length + $3, bytes = bytes + $4,
			closed_at = CASE WHEN $5 THEN coalesce(closed_at, now()) ELSE closed_at END
		WHERE run_id = $1 AND key = $2
		RETURNING `+streamColumns, runID, w.Key, len(data), size, w.Close)
	st, err = pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Stream])
	if err != nil {
		return nil, fmt.Errorf("write stream %s of run %s: %w", w.Key, runID, err)
	}
	if notify {
		if err := NotifyOutput(ctx, tx, runID); err != nil {
			return nil, err
		}
	}
	return st, nil
}

func lockStream(ctx context.Context, tx pgx.Tx, runID, key string) (*Stream, error) {
	rows, _ := tx.Query(ctx, `
		SELECT `+streamColumns+` FROM stepgate.stream WHERE run_id = $1 AND key = $2 FOR UPDATE`, runID, key)
	st, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Stream])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("lock stream %s of run %s: %w", key, runID, err)
	}
	return st, nil
}

// GetStream returns the tenant's run's stream key, or ErrNotFound when the run has not
// written it.
func GetStream(ctx context.Context, db DB, tenant, runID, key string) (*Stream, error) {
	rows, _ := db.Query(ctx, `
		SELECT `+streamColumns+` FROM stepgate.stream WHERE tenant = $1 AND run_id = $2 AND key = $3`, tenant, runID, key)
	st, err := pgx.CollectExactlyOneRow(rows, pgx.RowToAddrOfStructByName[Stream])
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get stream %s of run %s: %w", key, runID, err)
	}
	return st, nil
}

// ListStreams returns the streams of the tenant's run, by key.
func ListStreams(ctx context.Context, db DB, tenant, runID string) ([]Stream, error) {
	rows, _ := db.Query(ctx, `
		SELECT `+streamColumns+` FROM stepgate.stream WHERE tenant = $1 AND run_id = $2 ORDER BY key`, tenant, runID)
	sts, err := pgx.CollectRows(rows, pgx.RowToStructByName[Stream])
	if err != nil {
		return nil, fmt.Errorf("list streams of run %s: %w", runID, err)
	}
	return sts, nil
}

// ReadChunks returns the chunks of the tenant's run's stream key from offset on, in
// order, at most limit of them (100 when limit is not positive).
func ReadChunks(ctx context.Context, db DB, tenant, runID, key string, offset, limit int) ([]Chunk, error) {
	if limit <= 0 {
		limit = 100
	}
	rows, _ := db.Query(ctx, `
		SELECT pos, data FROM stepgate.stream_chunk
		WHERE tenant = $1 AND run_id = $2 AND key = $3 AND pos >= $4
		ORDER BY pos LIMIT $5`, tenant, runID, key, offset, limit)
	cs, err := pgx.CollectRows(rows, pgx.RowToStructByName[Chunk])
	if err != nil {
		return nil, fmt.Errorf("read stream %s of run %s: %w", key, runID, err)
	}
	return cs, nil
}
