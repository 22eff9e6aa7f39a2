package invoker_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/signature"
)

// refusingTransport fails every request and counts it: an app whose checkpoints must
// not leave its invocation's own exchange.
type refusingTransport struct{ n atomic.Int64 }

func (rt *refusingTransport) RoundTrip(*http.Request) (*http.Response, error) {
	rt.n.Add(1)
	return nil, errors.New("this app has no route to the gateway")
}

// TestDuplexStepsSendNothingBack: in the duplex mode (the Go SDK's default), a run of
// three steps completes with its claim and checkpoints on the invocation's own
// exchange: the app, which has no route to the gateway, sends no request, and the
// journal holds the three steps.
func TestDuplexStepsSendNothingBack(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	back := &refusingTransport{}
	app := functions.New(functions.Config{Keys: s.Keys.Verification, HTTPClient: &http.Client{Transport: back}})
	var bodies atomic.Int64
	functions.Register(app, "three", func(ctx context.Context, _ struct{}) (int, error) {
		sum := 0
		for i := range 3 {
			v, err := step.Run(ctx, "s"+string(rune('a'+i)), func(context.Context) (int, error) { bodies.Add(1); return i + 1, nil })
			if err != nil {
				return 0, err
			}
			sum += v
		}
		return sum, nil
	})
	var duplex atomic.Int64
	s.Sync(t, s.ServeApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Content-Type") == "application/x-ndjson" {
			duplex.Add(1)
		}
		app.ServeHTTP(w, r)
	})))
	c := s.Client(t, s.Token)
	res := awaitResult(t, c, startRunAsync(t, c, "three", `{}`).ID)
	require.Equal(t, protocol.RunStatusCompleted, res.Status, res.Error)
	require.JSONEq(t, `6`, string(*res.Output))
	require.EqualValues(t, 3, bodies.Load())
	require.EqualValues(t, 1, duplex.Load(), "one invocation, as one duplex exchange")
	require.Zero(t, back.n.Load(), "no request back to the gateway")
	detail := getRun(t, c, res.ID)
	require.Equal(t, 1, detail.Invocations)
}

// acksTee keeps what the gateway sent on a duplex invocation's request body: the
// invocation's first line and its acknowledgements.
type acksTee struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (a *acksTee) Write(p []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.buf.Write(p)
}

func (a *acksTee) String() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.buf.String()
}

// TestDuplexCopyRunsNoStep: a duplex invocation's request, captured with the gateway's
// acknowledgement of its claim (its proof), and sent within the signature's window to
// another process of the function, runs no step body there: that process makes its own
// nonce, so the captured proof does not verify, nor does one signed with another key,
// and it answers the superseded failure. The same bytes sent whole (not as a duplex
// exchange) are refused as malformed. The original invocation completes, its step run
// once.
func TestDuplexCopyRunsNoStep(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	var ranA, ranB atomic.Int64
	release := make(chan struct{})
	fn := func(ran *atomic.Int64, wait bool) func(context.Context, struct{}) (string, error) {
		return func(ctx context.Context, _ struct{}) (string, error) {
			return step.Run(ctx, "charge", func(context.Context) (string, error) {
				ran.Add(1)
				if wait {
					<-release
				}
				return "charged", nil
			})
		}
	}
	appA := s.NewApp()
	functions.Register(appA, "pay", fn(&ranA, true))
	// Other processes, each with its own replay memory.
	processB := func() string {
		appB := s.NewApp()
		functions.Register(appB, "pay", fn(&ranB, false))
		return strings.TrimSuffix(s.ServeApp(t, appB), "/")
	}

	var mu sync.Mutex
	var sig string
	var first []byte
	tee := &acksTee{}
	urlA := s.ServeApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			line, err := stack.PeekInvocation(r)
			require.NoError(t, err)
			mu.Lock()
			sig, first = r.Header.Get(signature.Header), line
			mu.Unlock()
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.TeeReader(r.Body, tee), r.Body}
		}
		appA.ServeHTTP(w, r)
	}))
	s.Sync(t, urlA)
	c := s.Client(t, s.Token)
	id := startRunAsync(t, c, "pay", `{}`).ID
	awaitCondition(t, 30*time.Second, func() bool { return ranA.Load() == 1 && strings.Contains(tee.String(), `"proof"`) },
		"the original claimed the run and runs its step")
	var proof string
	for line := range strings.Lines(tee.String()) {
		var a protocol.FrameAck
		if json.Unmarshal([]byte(line), &a) == nil && a.Status == http.StatusOK {
			var cur protocol.CurrentInvocation
			if json.Unmarshal(a.Body, &cur) == nil && cur.Proof != nil {
				proof = *cur.Proof
			}
		}
	}
	require.NotEmpty(t, proof)
	mu.Lock()
	capturedSig, captured := sig, first
	mu.Unlock()

	// A fake gateway answers the copy's claim with the captured proof, then with a
	// proof signed by another key.
	_, priv, _ := ed25519.GenerateKey(nil)
	otherKey := signature.SigningKey{Ed25519: priv}
	for name, forge := range map[string]func(nonce string) string{
		"captured proof": func(string) string { return proof },
		"another key": func(nonce string) string {
			return signature.Sign(time.Now(), "default", signature.ClaimRequest(id, 1, nonce), otherKey)
		},
	} {
		answer := sendCopy(t, processB()+"/pay", capturedSig, captured, forge)
		require.Equal(t, protocol.AnswerStatusFailed, answer.Status, name)
		require.Equal(t, "superseded", answer.Error.Type, name)
		require.Contains(t, answer.Error.Message, "not the gateway's", name)
	}
	require.Zero(t, ranB.Load(), "the copy ran no step body")

	// The duplex invocation sent whole is refused before anything runs.
	req, err := http.NewRequest(http.MethodPost, processB()+"/pay", bytes.NewReader(captured))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(signature.Header, capturedSig)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, string(body))
	require.Contains(t, string(body), "its mode is duplex but it came whole")
	require.Zero(t, ranB.Load())

	close(release)
	res := awaitResult(t, c, id)
	require.Equal(t, protocol.RunStatusCompleted, res.Status, res.Error)
	require.EqualValues(t, 1, ranA.Load())
}

// sendCopy sends the captured duplex invocation (its signature header and first line)
// to url as a gateway would, answers the function's claim with the proof forge makes
// for its nonce, and returns the function's answer.
func sendCopy(t *testing.T, url, sig string, first []byte, forge func(nonce string) string) protocol.InvocationAnswer {
	t.Helper()
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write(append(bytes.Clone(first), '\n')) }()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, pr)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-ndjson")
	req.Header.Set(signature.Header, sig)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		pw.Close()
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("the copy was refused: HTTP %d %s", resp.StatusCode, body)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var f protocol.Frame
		require.NoError(t, json.Unmarshal(sc.Bytes(), &f), sc.Text())
		switch f.Op {
		case protocol.FrameOpCurrent:
			var claim protocol.InvocationClaim
			require.NoError(t, json.Unmarshal(f.Body, &claim))
			body, _ := json.Marshal(protocol.CurrentInvocation{RunID: "x", Proof: new(forge(claim.Nonce))})
			ack, _ := json.Marshal(protocol.FrameAck{ID: *f.ID, Status: http.StatusOK, Body: body})
			_, err := pw.Write(append(ack, '\n'))
			require.NoError(t, err)
		case protocol.FrameOpAnswer:
			require.Equal(t, http.StatusOK, *f.Status, string(f.Body))
			var a protocol.InvocationAnswer
			require.NoError(t, json.Unmarshal(f.Body, &a))
			pw.Close() // as the gateway ends the exchange
			return a
		default:
			t.Fatalf("the copy sent a %s frame: %s", f.Op, sc.Text())
		}
	}
	t.Fatalf("the copy's answer ended without its answer frame: %v", sc.Err())
	return protocol.InvocationAnswer{}
}

// TestDuplexCancelMidStep: cancelling a run while a step body runs in a duplex
// invocation ends the exchange, so the step's context is cancelled, and the run ends
// cancelled with nothing journaled for the step.
func TestDuplexCancelMidStep(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	app := s.NewApp()
	entered, cancelled := make(chan struct{}), make(chan struct{})
	functions.Register(app, "slow", func(ctx context.Context, _ struct{}) (string, error) {
		return step.Run(ctx, "wait", func(ctx context.Context) (string, error) {
			close(entered)
			<-ctx.Done()
			close(cancelled)
			return "", ctx.Err()
		})
	}, functions.InvocationTimeout(time.Minute))
	s.Sync(t, s.ServeApp(t, app))
	c := s.Client(t, s.Token)
	id := startRunAsync(t, c, "slow", `{}`).ID
	select {
	case <-entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the step never ran")
	}
	resp, err := c.CancelRunWithResponse(t.Context(), id)
	require.NoError(t, err)
	require.Less(t, resp.StatusCode(), 300, string(resp.Body))
	select {
	case <-cancelled:
	case <-time.After(30 * time.Second):
		t.Fatal("the step's context was not cancelled")
	}
	res := awaitResult(t, c, id)
	require.Equal(t, protocol.RunStatusCancelled, res.Status)
	require.Empty(t, journalOf(t, c, id))
}

// journalOf returns the kinds and names of run id's journal.
func journalOf(t *testing.T, c *protocol.ClientWithResponses, id string) []string {
	t.Helper()
	d := getRun(t, c, id)
	var out []string
	for _, e := range d.Journal {
		out = append(out, string(e.Kind)+" "+e.Name)
	}
	return out
}

// cutter is a TCP proxy to target whose connections can all be cut at once.
type cutter struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func newCutter(t *testing.T, target string) *cutter {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c := &cutter{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); c.cut() })
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	return c
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

// TestDuplexLostConnectionRetries: a duplex exchange cut in the middle of a run (after
// its first step was acknowledged) fails that invocation as a lost connection; the
// retry replays the journaled step rather than running it again, and the run completes.
func TestDuplexLostConnectionRetries(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	app := s.NewApp()
	var first, second atomic.Int64
	var proxy *cutter
	functions.Register(app, "two", func(ctx context.Context, _ struct{}) (string, error) {
		a, err := step.Run(ctx, "one", func(context.Context) (string, error) { first.Add(1); return "a", nil })
		if err != nil {
			return "", err
		}
		b, err := step.Run(ctx, "two", func(context.Context) (string, error) {
			if second.Add(1) == 1 {
				proxy.cut() // the first invocation loses its connection here
			}
			return "b", nil
		})
		return a + b, err
	}, functions.InvocationAttempts(3), functions.InvocationBackoff(10*time.Millisecond, 10*time.Millisecond))
	url := s.ServeApp(t, app)
	proxy = newCutter(t, strings.TrimSuffix(strings.TrimPrefix(url, "http://"), "/"))
	s.Sync(t, "http://"+proxy.ln.Addr().String()+"/")
	c := s.Client(t, s.Token)
	res := awaitResult(t, c, startRunAsync(t, c, "two", `{}`).ID)
	require.Equal(t, protocol.RunStatusCompleted, res.Status, res.Error)
	require.JSONEq(t, `"ab"`, string(*res.Output))
	require.EqualValues(t, 1, first.Load(), "the acknowledged step was replayed, not run again")
	require.EqualValues(t, 2, second.Load())
	d := getRun(t, c, res.ID)
	require.Equal(t, 2, d.Invocations)
	require.Equal(t, 1, d.FailedInvocations)
	require.Equal(t, []string{"step one", "step two"}, journalOf(t, c, res.ID))
}

// TestDuplexFallsBack: a function behind something that reads the whole request body
// before it answers (a buffering proxy; here a wrapper) never answers a duplex
// invocation as frames: the gateway closes the body after DuplexHandshake, and calls the
// same invocation again at once in request/response mode, as every later one, so the
// runs complete in one invocation each.
func TestDuplexFallsBack(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	app := s.NewApp()
	var ran atomic.Int64
	functions.Register(app, "buffered", func(ctx context.Context, _ struct{}) (string, error) {
		return step.Run(ctx, "once", func(context.Context) (string, error) { ran.Add(1); return "ok", nil })
	})
	var mu sync.Mutex
	var types []string
	s.Sync(t, s.ServeApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			types = append(types, r.Header.Get("Content-Type"))
			mu.Unlock()
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		app.ServeHTTP(w, r)
	})))
	c := s.Client(t, s.Token)
	for range 2 {
		res := awaitResult(t, c, startRunAsync(t, c, "buffered", `{}`).ID)
		require.Equal(t, protocol.RunStatusCompleted, res.Status, res.Error)
		require.Equal(t, 1, getRun(t, c, res.ID).Invocations)
	}
	require.EqualValues(t, 2, ran.Load())
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"application/x-ndjson", "application/json", "application/json"}, types,
		"one duplex invocation, called again at once as request/response, as every later one")
}

// rawDuplex registers a function served by answer, a hand-written duplex function, with
// config modes [request, duplex] and one invocation attempt.
func rawDuplex(t *testing.T, s *stack.Stack, name string, answer http.HandlerFunc) {
	t.Helper()
	url := s.ServeApp(t, answer)
	c := s.Client(t, s.Token)
	modes := []protocol.FunctionConfigModes{protocol.FunctionConfigModesRequest, protocol.FunctionConfigModesDuplex}
	resp, err := c.RegisterFunctionWithResponse(t.Context(), name, protocol.RegisterFunctionJSONRequestBody{URL: url,
		Config: &protocol.FunctionConfig{Modes: &modes, Retries: &protocol.RetryPolicy{MaxAttempts: new(1)}}})
	require.NoError(t, err)
	require.Less(t, resp.StatusCode(), 300, string(resp.Body))
}

// TestDuplexOversizedFrame: a frame longer than the gateway's bound on an answer fails
// the invocation as limit_exceeded, naming the bound; nothing of it is journaled.
func TestDuplexOversizedFrame(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	rawDuplex(t, s, "huge", func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, `{"id":1,"op":"checkpoint","body":{"seq":1,"kind":"step","name":"big","output":"`)
		chunk := strings.Repeat("x", 1<<20)
		for range 17 {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, "\"}}\n")
	})
	c := s.Client(t, s.Token)
	res := awaitResult(t, c, startRunAsync(t, c, "huge", `{}`).ID)
	require.Equal(t, protocol.RunStatusFailed, res.Status)
	require.Equal(t, "limit_exceeded", res.Error.Type)
	require.Contains(t, res.Error.Message, "a frame of the function's duplex answer is larger than the gateway's limit of 16777216 bytes")
	require.Empty(t, journalOf(t, c, res.ID))
}

// TestDuplexRawFunction: a function written with no SDK, from docs/protocol.md's duplex
// section: it reads the first line, checkpoints a step, waits for its acknowledgement,
// sends a frame the gateway refuses (a bad seq: a 400 naming it, the exchange goes on),
// and answers completed. A frame that is not JSON fails the invocation as bad_answer.
func TestDuplexRawFunction(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	acks := make(chan []protocol.FrameAck, 1)
	rawDuplex(t, s, "raw", func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.EnableFullDuplex()
		br := bufio.NewReader(r.Body)
		first, err := br.ReadBytes('\n')
		require.NoError(t, err)
		var req protocol.InvocationRequest
		require.NoError(t, json.Unmarshal(first, &req))
		require.Equal(t, protocol.InvocationRequestModeDuplex, *req.Mode)
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		var got []protocol.FrameAck
		for i, frame := range []string{
			`{"id":1,"op":"checkpoint","body":{"seq":1,"kind":"step","name":"one","output":1}}`,
			`{"id":2,"op":"checkpoint","body":{"seq":9,"kind":"step","name":"gap","output":1}}`,
		} {
			_, _ = io.WriteString(w, frame+"\n")
			_ = rc.Flush()
			line, err := br.ReadBytes('\n')
			require.NoError(t, err, "ack %d", i+1)
			var a protocol.FrameAck
			require.NoError(t, json.Unmarshal(line, &a))
			got = append(got, a)
		}
		acks <- got
		_, _ = io.WriteString(w, `{"op":"answer","status":200,"body":{"status":"completed","output":"done"}}`+"\n")
	})
	c := s.Client(t, s.Token)
	res := awaitResult(t, c, startRunAsync(t, c, "raw", `{}`).ID)
	require.Equal(t, protocol.RunStatusCompleted, res.Status, res.Error)
	got := <-acks
	require.Equal(t, 1, got[0].ID)
	require.Equal(t, http.StatusOK, got[0].Status, string(got[0].Body))
	require.JSONEq(t, `{"seq":1}`, string(got[0].Body))
	require.Equal(t, 2, got[1].ID)
	require.Equal(t, http.StatusBadRequest, got[1].Status)
	require.Contains(t, string(got[1].Body), "seq 9")
	require.Equal(t, []string{"step one"}, journalOf(t, c, res.ID))

	rawDuplex(t, s, "garbage", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "this is not a frame\n")
	})
	res = awaitResult(t, c, startRunAsync(t, c, "garbage", `{}`).ID)
	require.Equal(t, protocol.RunStatusFailed, res.Status)
	require.Equal(t, "malformed_answer", res.Error.Type, res.Error.Message)
}

// TestDuplexBehindTimeoutHandler: behind middleware that hides the connection
// (http.TimeoutHandler buffers the response), the Go SDK answers a duplex invocation
// 415, and the gateway calls the same invocation again at once in request/response
// mode: the run completes in one invocation, its step run once.
func TestDuplexBehindTimeoutHandler(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	app := s.NewApp()
	var ran atomic.Int64
	functions.Register(app, "wrapped", func(ctx context.Context, _ struct{}) (string, error) {
		return step.Run(ctx, "once", func(context.Context) (string, error) { ran.Add(1); return "ok", nil })
	})
	s.Sync(t, s.ServeApp(t, http.TimeoutHandler(app, time.Minute, "too slow")))
	c := s.Client(t, s.Token)
	res := awaitResult(t, c, startRunAsync(t, c, "wrapped", `{}`).ID)
	require.Equal(t, protocol.RunStatusCompleted, res.Status, res.Error)
	require.EqualValues(t, 1, ran.Load())
	require.Equal(t, 1, getRun(t, c, res.ID).Invocations)
	require.Zero(t, getRun(t, c, res.ID).FailedInvocations)
}

// TestDuplexBackpressure: a function that sends frames as fast as it can and never
// reads the acknowledgements is held back by the exchange itself: the gateway reads a
// frame only once the previous one's acknowledgement is written, so once the
// acknowledgements fill the connection it reads no more, the function's writes block,
// and the gateway's memory does not grow with what the function tried to send (100 MB
// here). The invocation ends at its timeout. Not parallel: the heap it measures is the
// test process's.
func TestDuplexBackpressure(t *testing.T) {
	s := stack.Start(t, stack.Options{})
	const frames = 100_000
	pad := strings.Repeat("x", 1000)
	var written atomic.Int64
	url := s.ServeApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		_ = rc.EnableFullDuplex()
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		for i := 1; i <= frames; i++ {
			// seq 0: refused at once (400), with no database work, so only the
			// exchange can slow the function down.
			if _, err := io.WriteString(w, `{"id":`+strconv.Itoa(i)+`,"op":"checkpoint","body":{"seq":0,"kind":"step","name":"x","output":"`+pad+`"}}`+"\n"); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
			written.Add(1)
		}
	}))
	c := s.Client(t, s.Token)
	modes := []protocol.FunctionConfigModes{protocol.FunctionConfigModesRequest, protocol.FunctionConfigModesDuplex}
	resp, err := c.RegisterFunctionWithResponse(t.Context(), "flood", protocol.RegisterFunctionJSONRequestBody{URL: url,
		Config: &protocol.FunctionConfig{Modes: &modes, Timeout: new("3s"), Retries: &protocol.RetryPolicy{MaxAttempts: new(1)}}})
	require.NoError(t, err)
	require.Less(t, resp.StatusCode(), 300, string(resp.Body))

	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var peak atomic.Uint64
	done := make(chan struct{})
	go func() {
		var m runtime.MemStats
		for {
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			runtime.ReadMemStats(&m)
			if m.HeapInuse > peak.Load() {
				peak.Store(m.HeapInuse)
			}
		}
	}()
	res := awaitResult(t, c, startRunAsync(t, c, "flood", `{}`).ID)
	close(done)
	require.Equal(t, protocol.RunStatusFailed, res.Status)
	require.Equal(t, "timeout", res.Error.Type, res.Error.Message)
	require.Less(t, written.Load(), int64(frames), "the function's writes were held back")
	grew := int64(peak.Load()) - int64(before.HeapInuse)
	t.Logf("the function wrote %d of %d frames before its timeout; the heap grew by at most %d KiB", written.Load(), frames, grew>>10)
	require.Less(t, grew, int64(64<<20), "the gateway did not read ahead into memory")
}

// TestDuplexDeadlines: the two clocks a duplex exchange runs under. An invocation past
// its function's timeout is ended mid-step: the step body's context is cancelled, the
// invocation fails as a timeout, and the retry replays the acknowledged step instead of
// running it again. A run past its run_timeout fails deadline_exceeded while a step
// body runs, and that body's context is cancelled too: nothing keeps working for a run
// that has ended.
func TestDuplexDeadlines(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	app := s.NewApp()
	var first, second atomic.Int64
	timedOut, ended := make(chan struct{}), make(chan struct{})
	functions.Register(app, "timed", func(ctx context.Context, _ struct{}) (string, error) {
		a, err := step.Run(ctx, "one", func(context.Context) (string, error) { first.Add(1); return "a", nil })
		if err != nil {
			return "", err
		}
		b, err := step.Run(ctx, "two", func(ctx context.Context) (string, error) {
			if second.Add(1) == 1 {
				<-ctx.Done() // the first invocation outlives its timeout here
				close(timedOut)
				return "", ctx.Err()
			}
			return "b", nil
		})
		return a + b, err
	}, functions.InvocationTimeout(time.Second), functions.InvocationAttempts(3),
		functions.InvocationBackoff(10*time.Millisecond, 10*time.Millisecond))
	functions.Register(app, "overdue", func(ctx context.Context, _ struct{}) (string, error) {
		return step.Run(ctx, "forever", func(ctx context.Context) (string, error) {
			<-ctx.Done()
			close(ended)
			return "", ctx.Err()
		})
	}, functions.RunTimeout(time.Second), functions.InvocationTimeout(time.Minute))
	s.Sync(t, s.ServeApp(t, app))
	c := s.Client(t, s.Token)

	t.Run("InvocationTimeout", func(t *testing.T) {
		t.Parallel()
		res := awaitResult(t, c, startRunAsync(t, c, "timed", `{}`).ID)
		require.Equal(t, protocol.RunStatusCompleted, res.Status, res.Error)
		require.JSONEq(t, `"ab"`, string(*res.Output))
		select {
		case <-timedOut:
		case <-time.After(30 * time.Second):
			t.Fatal("the timed-out step body's context was not cancelled")
		}
		require.EqualValues(t, 1, first.Load(), "the acknowledged step was replayed, not run again")
		d := getRun(t, c, res.ID)
		require.Equal(t, 1, d.FailedInvocations)
		require.Equal(t, []string{"step one", "step two"}, journalOf(t, c, res.ID))
	})

	t.Run("RunTimeout", func(t *testing.T) {
		t.Parallel()
		res := awaitResult(t, c, startRunAsync(t, c, "overdue", `{}`).ID)
		require.Equal(t, protocol.RunStatusFailed, res.Status)
		require.NotNil(t, res.Error)
		require.Equal(t, "deadline_exceeded", res.Error.Type, res.Error.Message)
		select {
		case <-ended:
		case <-time.After(30 * time.Second):
			t.Fatal("the step body of a run past its deadline was not cancelled")
		}
		require.Empty(t, journalOf(t, c, res.ID))
	})
}
