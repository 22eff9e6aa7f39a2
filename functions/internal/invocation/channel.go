package invocation

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/ndjson"
)

// An invocation's requests to the gateway (its checkpoints, its claim, its stream
// writes) go over a channel: an HTTP request each to checkpoint.url (request/response
// mode), or a frame each on the invocation's own exchange (the duplex mode, Duplex).
// Both answer alike: the HTTP status and body the gateway's endpoint answers, and its
// Retry-After.

// The operations of a channel, named as the duplex mode's frames name them.
const (
	opCheckpoint = protocol.FrameOpCheckpoint
	opCurrent    = protocol.FrameOpCurrent
	opStream     = protocol.FrameOpStream
)

// channel sends one request of the invocation and returns the gateway's answer.
type channel interface {
	send(ctx context.Context, op protocol.FrameOp, body []byte) (code int, raw []byte, after time.Duration, err error)
}

// httpChannel is the request/response mode's: a POST to checkpoint.url (+ "/current",
// "/stream") with the invocation token.
type httpChannel struct {
	client     *http.Client
	url, token string
}

func (c *httpChannel) send(ctx context.Context, op protocol.FrameOp, body []byte) (int, []byte, time.Duration, error) {
	url := c.url
	switch op {
	case opCurrent:
		url += "/current"
	case opStream:
		url += "/stream"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.token)
	resp, err := c.client.Do(req)
	if err != nil {
		return 0, nil, 0, err
	}
	defer resp.Body.Close()
	// Reading the small body to its end lets the connection be reused.
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	secs, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	return resp.StatusCode, raw, time.Duration(max(secs, 0)) * time.Second, nil
}

// ErrExchangeEnded is a request of a duplex invocation whose exchange ended (the
// gateway closed it, or the connection broke): no answer can come on it any more, so the
// invocation stops with a retryable failure, and the gateway's next invocation replays
// what was journaled.
var ErrExchangeEnded = errors.New("the invocation's exchange with the gateway ended")

// ProofFunc verifies proof, the gateway's acknowledgement of a duplex invocation's claim
// by nonce (protocol.CurrentInvocation.Proof), and returns nil when it is the tenant's.
type ProofFunc func(nonce, proof string) error

// Duplex is the function's side of a duplex invocation: frames written to the response
// (w, flushed after each), acknowledgements read from the rest of the request's body.
// Its methods are safe for concurrent use.
type Duplex struct {
	wmu sync.Mutex
	w   io.Writer
	rc  *http.ResponseController

	verify ProofFunc // nil: proofs are not checked (functions.Config.InsecureSkipVerify)

	mu      sync.Mutex
	next    int
	waiting map[int]chan protocol.FrameAck
	ended   error         // set once the acks' reader stops; every waiter is told
	done    chan struct{} // closed when the acks' reader stops
}

// MaxAckBytes bounds one acknowledgement line; a longer one ends the exchange.
const MaxAckBytes = 1 << 20

// NewDuplex starts the duplex exchange whose acks come on acks (the request's body past
// its first line) and whose frames go to w; verify checks the claim's proof.
func NewDuplex(w http.ResponseWriter, acks *bufio.Reader, verify ProofFunc) *Duplex {
	d := &Duplex{w: w, rc: http.NewResponseController(w), verify: verify, waiting: map[int]chan protocol.FrameAck{}, done: make(chan struct{})}
	go d.read(acks)
	return d
}

// read hands each acknowledgement to the request waiting for it, until the body ends.
func (d *Duplex) read(acks *bufio.Reader) {
	defer close(d.done)
	var err error
	for {
		var line []byte
		line, err = ndjson.ReadLine(acks, MaxAckBytes)
		if err != nil {
			break
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var a protocol.FrameAck
		if err = json.Unmarshal(line, &a); err != nil {
			err = fmt.Errorf("an acknowledgement that is not one: %w", err)
			break
		}
		d.mu.Lock()
		ch := d.waiting[a.ID]
		delete(d.waiting, a.ID)
		d.mu.Unlock()
		if ch != nil {
			ch <- a
		}
	}
	if errors.Is(err, io.EOF) {
		err = ErrExchangeEnded
	} else {
		err = fmt.Errorf("%w: %w", ErrExchangeEnded, err)
	}
	d.mu.Lock()
	d.ended = err
	for id, ch := range d.waiting {
		close(ch)
		delete(d.waiting, id)
	}
	d.mu.Unlock()
}

func (d *Duplex) send(ctx context.Context, op protocol.FrameOp, body []byte) (int, []byte, time.Duration, error) {
	ch := make(chan protocol.FrameAck, 1)
	d.mu.Lock()
	if d.ended != nil {
		d.mu.Unlock()
		return 0, nil, 0, d.ended
	}
	d.next++
	id := d.next
	d.waiting[id] = ch
	d.mu.Unlock()
	if err := d.write(protocol.Frame{ID: &id, Op: op, Body: body}); err != nil {
		d.mu.Lock()
		delete(d.waiting, id)
		d.mu.Unlock()
		return 0, nil, 0, fmt.Errorf("%w: %w", ErrExchangeEnded, err)
	}
	var a protocol.FrameAck
	var ok bool
	select {
	case a, ok = <-ch:
		if !ok {
			d.mu.Lock()
			err := d.ended
			d.mu.Unlock()
			return 0, nil, 0, err
		}
	case <-ctx.Done():
		return 0, nil, 0, context.Cause(ctx)
	}
	after := time.Duration(0)
	if a.RetryAfter != nil {
		after = time.Duration(max(*a.RetryAfter, 0)) * time.Second
	}
	if op == opCurrent && a.Status == http.StatusOK && d.verify != nil {
		if err := d.checkProof(body, a.Body); err != nil {
			p, _ := json.Marshal(protocol.Problem{Status: http.StatusConflict, Type: new("superseded"),
				Detail: "the claim's acknowledgement is not the gateway's (" + err.Error() + "): another process answered a copy of this invocation's request"})
			return http.StatusConflict, p, 0, nil
		}
	}
	return a.Status, a.Body, after, nil
}

// checkProof verifies the proof in ack, the answer to the claim body.
func (d *Duplex) checkProof(body, ack []byte) error {
	var c protocol.InvocationClaim
	var cur protocol.CurrentInvocation
	if err := json.Unmarshal(body, &c); err != nil {
		return err
	}
	if err := json.Unmarshal(ack, &cur); err != nil {
		return err
	}
	if cur.Proof == nil {
		return errors.New("it has no proof")
	}
	return d.verify(c.Nonce, *cur.Proof)
}

// write writes f as one line of the response and flushes it.
func (d *Duplex) write(f protocol.Frame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	d.wmu.Lock()
	defer d.wmu.Unlock()
	if _, err := d.w.Write(append(b, '\n')); err != nil {
		return err
	}
	return d.rc.Flush()
}

// Answer writes the invocation's answer, the last frame: status 200 with an
// InvocationAnswer, or 500 with an ErrorInfo.
func (d *Duplex) Answer(status int, body []byte) error {
	return d.write(protocol.Frame{Op: protocol.FrameOpAnswer, Status: &status, Body: body})
}

// closeGrace is how long End waits for the gateway to end the request's body.
const closeGrace = time.Second

// End returns once the acknowledgements' reader has stopped, so that the handler may
// return (net/http reads the connection's next request once it has): at the end of the
// request's body, which the gateway ends after the answer, or, past closeGrace, at a
// read deadline End sets.
func (d *Duplex) End() {
	t := time.NewTimer(closeGrace)
	defer t.Stop()
	select {
	case <-d.done:
		return
	case <-t.C:
	}
	_ = d.rc.SetReadDeadline(time.Now())
	<-d.done
}

// ReadFirstLine reads a duplex invocation's first line, the invocation request, of at
// most limit bytes (else an *http.MaxBytesError) from body.
func ReadFirstLine(body *bufio.Reader, limit int64) ([]byte, error) {
	line, err := ndjson.ReadLine(body, limit)
	line = bytes.Clone(line) // kept past the reads of the acknowledgements
	switch {
	case errors.Is(err, ndjson.ErrTooLong):
		return nil, &http.MaxBytesError{Limit: limit}
	case errors.Is(err, io.EOF) && len(line) > 0:
		return line, nil // no acknowledgement will come: the exchange ends at the claim
	}
	return line, err
}
