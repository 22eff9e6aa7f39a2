package call

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/ndjson"
)

// ErrorTypeNotDuplex: the function did not answer a duplex invocation as frames: HTTP
// 415 (it cannot serve the mode), a 200 that is not application/x-ndjson, or frames that
// came only once the gateway closed the request's body, its headers late by
// DuplexHandshake. The invoker falls back to request/response for the function.
const ErrorTypeNotDuplex = "not_duplex"

// DuplexHandshake is how long a duplex invocation waits for the function's response
// headers with the request's body open. An SDK that speaks the duplex mode sends them
// once it verified the first line; one that does not reads the body to its end, which
// the gateway then closes, so that it answers rather than waits for the timeout.
const DuplexHandshake = 2 * time.Second

// FrameFunc serves one frame of a duplex invocation (anything but its answer) and
// returns the acknowledgement to send back. It is called for one frame at a time, in
// the order the function sent them: the next frame is not read before its ack is
// written, so a function that sends faster than the gateway commits waits (its writes
// block), and one that never reads its acks stops the exchange at the pipe.
type FrameFunc func(ctx context.Context, f *protocol.Frame) protocol.FrameAck

// Duplex sends body, a duplex invocation (InvocationRequest mode "duplex") signed as
// Call signs one, as the first line of a request body held open; it serves each frame of
// the function's response with serve and writes the acknowledgement on the request body,
// until the answer frame, which it hands to decode as Call hands a body. A frame (the
// answer's included) longer than c.MaxAnswer bytes fails the invocation as
// ErrorTypeLimit; a line that is not a frame, as ErrorTypeBadAnswer's decode would
// (decode judges it). The whole exchange takes at most t.Timeout. Failures are described
// and hidden as Call's are.
func (c *Caller) Duplex(ctx context.Context, t Target, body []byte, serve FrameFunc, decode DecodeFunc) *journal.ErrorInfo {
	return c.call(ctx, t, body, func(ctx context.Context, hreq *http.Request) (*journal.ErrorInfo, reply) {
		return c.exchange(ctx, t, hreq, body, serve, decode)
	})
}

// duplexBody is a duplex request's body: the first line, then the acks written to the
// pipe. Closing it (the transport does, when the request ends) ends the writes.
type duplexBody struct {
	io.Reader
	pr *io.PipeReader
}

func (b *duplexBody) Close() error { return b.pr.Close() }

// exchange runs a duplex invocation over hreq (see Duplex).
func (c *Caller) exchange(ctx context.Context, t Target, hreq *http.Request, first []byte, serve FrameFunc, decode DecodeFunc) (*journal.ErrorInfo, reply) {
	pr, pw := io.Pipe()
	hreq.Body = &duplexBody{Reader: io.MultiReader(bytes.NewReader(first), bytes.NewReader([]byte{'\n'}), pr), pr: pr}
	hreq.ContentLength = -1
	hreq.GetBody = nil
	hreq.Header.Set("Content-Type", ndjson.ContentType)
	defer pw.Close()
	stop := context.AfterFunc(ctx, func() { pw.CloseWithError(context.Cause(ctx)) })
	defer stop()
	// A function that does not speak the mode reads the body to its end: close it.
	handshake := time.AfterFunc(min(DuplexHandshake, t.Timeout), func() { pw.Close() })
	resp, failure, got := c.do(ctx, t, hreq)
	lateBody := !handshake.Stop() // it fired: the body was closed before the headers came
	if failure != nil {
		return failure, got
	}
	defer resp.Body.Close()
	if failure := checkVersion(resp.Header); failure != nil {
		return failure, reply{status: resp.StatusCode}
	}
	frames := ndjson.Is(resp.Header.Get("Content-Type"))
	if resp.StatusCode != http.StatusOK || !frames || lateBody {
		// (frames after a late body: no ack can reach them; the claim failed)
		// Not an SDK of the mode (or a proxy that buffers bodies between): what it
		// answered, as request/response would show it, and a fall back. The request's
		// body ends first: a server may read it to its end before it ends its answer.
		pw.Close()
		raw, err := io.ReadAll(io.LimitReader(resp.Body, c.MaxAnswer+1))
		failure := c.answer(ctx, t, resp, raw, err)
		// An HTTP error stays the invocation's failure, as in request/response mode (a
		// server that answers one without reading the body may hold it until the
		// gateway closes the body); a 200 that is not frames, or frames that came only
		// once the gateway closed the body, are a function that does not speak the mode.
		if resp.StatusCode == http.StatusUnsupportedMediaType || resp.StatusCode == http.StatusOK && (failure == nil || lateBody) {
			why := fmt.Sprintf("HTTP %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
			if lateBody {
				why = fmt.Sprintf("no response headers within %s of the request", min(DuplexHandshake, t.Timeout))
			}
			failure = &journal.ErrorInfo{Type: ErrorTypeNotDuplex, Message: "the function did not answer its duplex invocation as frames (" + why +
				"); the gateway calls it in request/response mode from now on: list only \"request\" in its config's modes when a proxy or platform buffers bodies"}
		}
		return failure, reply{status: resp.StatusCode, size: len(raw)}
	}
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	size := 0
	for {
		line, err := ndjson.ReadLine(br, c.MaxAnswer)
		size += len(line)
		switch {
		case errors.Is(err, ndjson.ErrTooLong):
			return &journal.ErrorInfo{Type: ErrorTypeLimit, Message: fmt.Sprintf("a frame of the function's duplex answer is larger than the gateway's limit of %d bytes", c.MaxAnswer)},
				reply{status: resp.StatusCode, size: size}
		case err != nil:
			return c.answer(ctx, t, resp, line, cutShort(err)), reply{status: resp.StatusCode, size: size}
		case len(bytes.TrimSpace(line)) == 0:
			continue
		}
		var f protocol.Frame
		if err := json.Unmarshal(line, &f); err != nil {
			return decode(line), reply{status: resp.StatusCode, size: size} // a bad answer, as decode says it
		}
		if f.Op == protocol.FrameOpAnswer {
			pw.Close() // the function's reads end
			drain(br, resp.Body)
			if f.Status == nil || *f.Status != http.StatusOK {
				code := 0
				if f.Status != nil {
					code = *f.Status
				}
				return &journal.ErrorInfo{Type: ErrorTypeHTTPStatus, Message: fmt.Sprintf("function answered HTTP %d: %s", code, Snippet(f.Body))}, reply{status: code, size: size}
			}
			return decode(f.Body), reply{status: resp.StatusCode, size: size}
		}
		ack, err := json.Marshal(serve(ctx, &f))
		if err == nil {
			_, err = pw.Write(append(ack, '\n'))
		}
		if err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return &journal.ErrorInfo{Type: ErrorTypeTimeout, Message: fmt.Sprintf("function did not finish its answer within its timeout of %s", t.Timeout)}, reply{status: resp.StatusCode, size: size}
			}
			return &journal.ErrorInfo{Type: ErrorTypeConnection, Message: "sending an acknowledgement to the function: " + trimErr(err)}, reply{status: resp.StatusCode, size: size}
		}
	}
}

// drainWait bounds how long the gateway waits, after the answer frame, for the end of
// the function's response, which lets the connection carry the next invocation.
const drainWait = 100 * time.Millisecond

// drain reads what is left of a duplex answer after its answer frame (the response's
// end, which the function writes once the gateway has ended the request's body), for
// at most drainWait: a connection whose response was read to its end is reused, where
// one closed early costs the next invocation a new one.
func drain(br *bufio.Reader, body io.Closer) {
	t := time.AfterFunc(drainWait, func() { body.Close() })
	defer t.Stop()
	_, _ = io.Copy(io.Discard, io.LimitReader(br, 64<<10))
}

// cutShort returns the error of a body that ended before its answer frame: EOF there is
// the function's connection closed in the middle of its answer.
func cutShort(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
