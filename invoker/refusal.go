package invoker

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strings"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/output"
	"github.com/stepgate/stepgate/journal/storable"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/names"
)

// Refusal is a function's request to the gateway (a checkpoint, a claim, a stream write)
// that was not taken, as both modes answer it: the HTTP status, and the problem's type
// (empty: none) and detail. The request/response mode answers it as an HTTP problem
// (gateway), the duplex mode as a FrameAck (duplex.go); the SDKs read both alike.
type Refusal struct {
	Status int
	Type   string
	Detail string
}

// Problem returns r as the problem body both modes carry.
func (r *Refusal) Problem() protocol.Problem {
	p := protocol.Problem{Title: http.StatusText(r.Status), Status: r.Status, Detail: r.Detail}
	if r.Type != "" {
		p.Type = new(r.Type)
	}
	return p
}

// detailSuperseded is what a request of an invocation that no longer owns its run is told.
const detailSuperseded = "this invocation no longer owns the run (it was cancelled, finished, or retried elsewhere): stop"

// CheckpointRefusal returns how a checkpoint that Checkpoint failed with err is
// answered, or nil when err is not the function's doing (the database: a 5xx).
func CheckpointRefusal(err error) *Refusal {
	switch {
	case errors.Is(err, journal.ErrConflict):
		return &Refusal{http.StatusConflict, ErrorTypeNondeterminism, "nondeterminism: " + strings.TrimPrefix(err.Error(), journal.ErrConflict.Error()+": ") + "; the run fails"}
	case errors.Is(err, journal.ErrGap):
		return &Refusal{Status: http.StatusBadRequest, Detail: strings.TrimPrefix(err.Error(), journal.ErrGap.Error()+": ")}
	}
	return writeRefusal(err, "; the run fails")
}

// writeRefusal returns how a checkpoint or stream write that failed with err is answered
// in the cases both share (a field it could never have, a bound, a quota, an invocation
// superseded), the bounds' detail ending with consequence; nil otherwise.
func writeRefusal(err error, consequence string) *Refusal {
	var bad *BadCheckpointError
	var le *journal.LimitError
	var qe *journal.QuotaError
	switch {
	case errors.As(err, &bad):
		return &Refusal{Status: http.StatusBadRequest, Detail: bad.Message}
	case errors.As(err, &le):
		return &Refusal{http.StatusConflict, ErrorTypeLimit, le.Message + consequence}
	case errors.As(err, &qe):
		return &Refusal{http.StatusConflict, ErrorTypeLimit, qe.Message + consequence}
	case errors.Is(err, journal.ErrSuperseded):
		return &Refusal{http.StatusConflict, ErrorTypeSuperseded, detailSuperseded}
	}
	return nil
}

// StreamRefusal returns how a stream write that WriteStream (or StreamWriteOf) failed
// with err is answered, or nil when err is not the function's doing.
func StreamRefusal(err error) *Refusal {
	if errors.Is(err, output.ErrStreamClosed) {
		return &Refusal{http.StatusConflict, "stream_closed", strings.TrimPrefix(err.Error(), output.ErrStreamClosed.Error()+": ") + ": it takes no more chunks"}
	}
	return writeRefusal(err, "; nothing of this write is stored")
}

// ClaimRefusal returns how a claim (ClaimInvocation, or a nonce that is not one) that
// failed with err is answered, or nil when err is not the function's doing.
func ClaimRefusal(err error) *Refusal {
	var bad *BadCheckpointError
	switch {
	case errors.As(err, &bad):
		return &Refusal{Status: http.StatusBadRequest, Detail: bad.Message}
	case errors.Is(err, journal.ErrSuperseded):
		return &Refusal{http.StatusConflict, ErrorTypeSuperseded, "this invocation no longer owns the run (it finished, was cancelled, suspended, or another invocation owns it), " +
			"or another process claimed it first: run no step"}
	}
	return nil
}

// CheckNonce returns a *BadCheckpointError unless nonce is a claim's nonce.
func CheckNonce(nonce string) error {
	if !journal.ValidNonce(nonce) {
		return badCheckpoint("nonce must be %d lowercase hex digits (128 random bits)", journal.NonceLen)
	}
	return nil
}

// StreamWriteOf returns b as the journal's stream write, or a *BadCheckpointError naming
// the field when the journal could never take it (a bad key, seq, attempt, index or
// chunk).
func (c *Checkpoints) StreamWriteOf(b protocol.StreamWrite) (output.StreamWrite, error) {
	inv := c.inv
	if err := names.CheckFunction("stream key", b.Key); err != nil {
		return output.StreamWrite{}, badCheckpoint("%v", err)
	}
	w := output.StreamWrite{Key: b.Key, Seq: b.Seq, Close: b.Close != nil && *b.Close}
	if b.Attempt != nil {
		w.Attempt = *b.Attempt
	}
	if b.Index != nil {
		w.Index = *b.Index
	}
	switch {
	case w.Seq < 1 || w.Seq > math.MaxInt32:
		return w, badCheckpoint("seq %d is not from 1 to %d", w.Seq, math.MaxInt32)
	case w.Attempt < 0 || w.Attempt > inv.limits.MaxAttempts:
		return w, badCheckpoint("attempt %d is not from 0 to %d", w.Attempt, inv.limits.MaxAttempts)
	case w.Index < 0 || int64(w.Index)+int64(len(b.Chunks)) > math.MaxInt32:
		return w, badCheckpoint("index %d is not from 0 to %d", w.Index, math.MaxInt32-len(b.Chunks))
	}
	w.Chunks = make([]json.RawMessage, len(b.Chunks))
	for i, c := range b.Chunks {
		if err := storable.CheckJSON(c); err != nil {
			return w, badCheckpoint("chunks[%d] %v", i, err)
		}
		w.Chunks[i] = json.RawMessage(c)
	}
	return w, nil
}

// AckOf returns ack, of the checkpoint of e, as both modes answer it.
func AckOf(e protocol.JournalEntry, ack CheckpointAck) protocol.CheckpointAck {
	out := protocol.CheckpointAck{Seq: e.Seq, Error: ack.Refused, Until: ack.Until}
	if ack.Output != nil {
		out.Output = (*protocol.AnyJSON)(&ack.Output)
	}
	return out
}
