package invoker

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/output"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/signature"
)

// The duplex mode: one HTTP exchange per invocation, whose request body goes on after
// the invocation request with the gateway's acknowledgements and whose response body is
// the function's frames (checkpoints, its claim, stream writes) and then its answer
// (package call, Caller.Duplex). Each frame is served here as its HTTP request is served
// in request/response mode (gateway.Server.Checkpoint, CheckpointCurrent,
// CheckpointStream), through the same Checkpoint, WriteStream and Refusal, so that both
// modes journal alike and answer alike; the claim alone differs (serveClaim).

// DuplexToken is the checkpoint token of a duplex invocation: no endpoint accepts it, so
// that a copy of its request, sent whole to a process of the function, has no way to the
// gateway but the exchange it came in, which is not its own.
const DuplexToken = "duplex"

// serveFrame serves frame f of the duplex invocation of run, number in.
func (inv *Invoker) serveFrame(ctx context.Context, run *journal.Run, in Invocation, f *protocol.Frame) protocol.FrameAck {
	ack := protocol.FrameAck{}
	if f.ID != nil {
		ack.ID = *f.ID
	}
	var body any
	var refusal *Refusal
	var err error
	switch f.Op {
	case protocol.FrameOpCheckpoint:
		var e protocol.JournalEntry
		if err = json.Unmarshal(f.Body, &e); err != nil {
			refusal = &Refusal{Status: http.StatusBadRequest, Detail: "the frame's body is not a journal entry: " + err.Error()}
			break
		}
		var a CheckpointAck
		if a, err = inv.checkpoints.Append(ctx, in, e); err == nil {
			body = AckOf(e, a)
		} else {
			refusal = CheckpointRefusal(err)
		}
	case protocol.FrameOpStream:
		var b protocol.StreamWrite
		if err = json.Unmarshal(f.Body, &b); err != nil {
			refusal = &Refusal{Status: http.StatusBadRequest, Detail: "the frame's body is not a stream write: " + err.Error()}
			break
		}
		var w output.StreamWrite
		var st *output.Stream
		if w, err = inv.checkpoints.StreamWriteOf(b); err == nil {
			st, err = inv.checkpoints.WriteStream(ctx, in.RunID, in.Number, w)
		}
		if err == nil {
			body = protocol.StreamAck{Key: st.Key, Length: st.Length, Closed: st.ClosedAt != nil}
		} else {
			refusal = StreamRefusal(err)
		}
	case protocol.FrameOpCurrent:
		body, refusal, err = inv.serveClaim(ctx, run, f)
	default:
		refusal = &Refusal{Status: http.StatusBadRequest, Detail: fmt.Sprintf("op %q is not \"checkpoint\", \"current\", \"stream\" or \"answer\"", f.Op)}
	}
	switch {
	case err != nil && refusal == nil:
		// Not the function's doing (the database): it asks again, as after a 503.
		inv.log.WarnContext(ctx, "a duplex frame failed; the function is asked to send it again", "run_id", in.RunID, "op", string(f.Op), "error", err)
		ack.Status, ack.RetryAfter = http.StatusServiceUnavailable, new(1)
		body = (&Refusal{Status: http.StatusServiceUnavailable, Detail: "the gateway could not serve the frame now; send it again"}).Problem()
	case refusal != nil:
		ack.Status = refusal.Status
		body = refusal.Problem()
	default:
		ack.Status = http.StatusOK
	}
	raw, _ := json.Marshal(body) // the API's own types always encode
	ack.Body = raw
	return ack
}

// serveClaim answers the claim of the duplex invocation of run: while this gateway holds
// the invocation's lease (ctx, the call's, ends when it is lost), it signs the nonce with
// the tenant's keys (signature.ClaimRequest), with no write: only this
// exchange carries the answer, so a copy of the request, answered by anyone else, gets no
// valid proof and runs no step body. (The request/response mode stores the first nonce
// instead: journal.ClaimInvocation.)
func (inv *Invoker) serveClaim(ctx context.Context, run *journal.Run, f *protocol.Frame) (any, *Refusal, error) {
	var c protocol.InvocationClaim
	if err := json.Unmarshal(f.Body, &c); err != nil {
		return nil, &Refusal{Status: http.StatusBadRequest, Detail: "the frame's body is not an invocation claim: " + err.Error()}, err
	}
	if err := CheckNonce(c.Nonce); err != nil {
		return nil, ClaimRefusal(err), err
	}
	if ctx.Err() != nil {
		return nil, ClaimRefusal(journal.ErrSuperseded), journal.ErrSuperseded
	}
	proof, err := inv.caller.Keys.Sign(ctx, run.Tenant, signature.ClaimRequest(run.ID, run.Invocations, c.Nonce), time.Now())
	if err != nil {
		return nil, nil, err
	}
	return protocol.CurrentInvocation{RunID: run.ID, Proof: &proof}, nil, nil
}
