package step

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/stepgate/stepgate/functions/internal/invocation"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

// StreamWriter writes the ordered chunks of one of the run's streams, which clients read
// live with GET /v1/runs/{id}/streams/{key} (server-sent events, resumable from an
// offset): the tokens of an LLM's answer, log lines, progress events. Get one with
// [Stream].
//
// Guarantees:
//   - Each chunk is durable (committed by the gateway) when Write returns, and no reader
//     sees it before. Chunks written from one goroutine keep their order.
//   - Chunks are not written twice by replays. A chunk is known by where it was written:
//     between steps, the chunks written there on a replay are the same ones and are
//     skipped; a step that finished is not run again, so its chunks are not written
//     again. A step retried after a failure (its next attempt) writes its chunks anew:
//     readers see the failed attempt's chunks, then the retry's. A step run again on
//     the same attempt (its invocation was lost) skips the chunks already written at the
//     same places: the first write wins.
//   - Chunks are not journal entries: they take no seq and do not count against the
//     journal's bounds, but against the stream's (STEPGATE_MAX_CHUNK_BYTES,
//     STEPGATE_MAX_STREAM_CHUNKS, STEPGATE_MAX_STREAM_BYTES, STEPGATE_MAX_RUN_STREAMS):
//     a write past one returns an error and stores nothing; the run goes on.
//   - The stream ends for its readers when [StreamWriter.Close] is called, or when the
//     run finishes.
//
// A StreamWriter may be used from any goroutine of the invocation, inside steps' functions
// too; one made with the context of a parallel step's function ([Go]) places its chunks
// in that step. Each write is one request to the gateway: write words or lines, not bytes.
type StreamWriter struct {
	st  *invocation.State
	key string
	// in is the parallel step (seq, attempt) whose context made the writer, if any:
	// its chunks are placed in that step.
	inSeq, inAttempt int
}

// Stream returns a writer of the run's stream called key; it sends nothing until the
// first write. Writers of one key share the stream. key must be 1 to 255 letters,
// digits, '.', '_' or '-', starting with a letter or digit: Stream returns a
// non-retryable error otherwise, and [ErrNoInvocation] when ctx is not an invocation's.
func Stream(ctx context.Context, key string) (*StreamWriter, error) {
	st := invocation.From(ctx)
	if st == nil {
		return nil, ErrNoInvocation
	}
	if err := names.CheckFunction("stream key", key); err != nil {
		return nil, NonRetryable(fmt.Errorf("step: %w", err))
	}
	seq, attempt := invocation.StepOf(ctx)
	return &StreamWriter{st: st, key: key, inSeq: seq, inAttempt: attempt}, nil
}

// Write writes p as one chunk, a JSON string (bytes that are not UTF-8 become U+FFFD),
// and returns len(p) once it is durable. It makes StreamWriter an [io.Writer].
func (w *StreamWriter) Write(p []byte) (int, error) {
	if err := w.WriteString(string(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// WriteString writes s as one chunk, a JSON string, and returns once it is durable.
func (w *StreamWriter) WriteString(s string) error {
	return w.Send(strings.ToValidUTF8(s, "\uFFFD"))
}

// Send writes v, encoded as JSON, as one chunk, and returns once it is durable.
func (w *StreamWriter) Send(v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return NonRetryable(fmt.Errorf("step: stream %q: encode chunk: %w", w.key, err))
	}
	return w.write([]protocol.AnyJSON{protocol.AnyJSON(raw)}, false)
}

// Close ends the stream: its readers get its end once they have read every chunk, and
// later writes are refused. Closing a closed stream is harmless.
func (w *StreamWriter) Close() error {
	return w.write([]protocol.AnyJSON{}, true)
}

// ErrStreamRefused is wrapped by the (non-retryable) errors of writes the gateway refused
// without stopping the run: past a bound of the stream, or to a closed stream.
var ErrStreamRefused = errors.New("step: stream write refused")

func (w *StreamWriter) write(chunks []protocol.AnyJSON, closing bool) error {
	seq, attempt, index := w.st.StreamPlace(w.key, len(chunks), w.inSeq, w.inAttempt)
	sw := &protocol.StreamWrite{Key: w.key, Seq: seq, Chunks: chunks}
	if attempt > 0 {
		sw.Attempt = &attempt
	}
	if index > 0 {
		sw.Index = &index
	}
	if closing {
		sw.Close = new(true)
	}
	err := w.st.WriteStream(sw)
	var se *invocation.StreamError
	if errors.As(err, &se) {
		return NonRetryable(fmt.Errorf("%w: %s", ErrStreamRefused, se.Message))
	}
	return err
}
