package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// invocation is a run claimed for its first invocation, with that invocation's token,
// for tests that play the function by hand.
type invocation struct {
	runID, token string
}

func claimRun(t *testing.T, s *stack.Stack) invocation {
	t.Helper()
	run, created, err := journal.CreateRun(t.Context(), s.Pool, journal.NewRun{
		ID: uuid.Must(uuid.NewV7()).String(), Tenant: auth.DefaultTenant, Function: "hello",
		Input: json.RawMessage(`{}`), Identity: journal.Identity{Subject: "t", Tenant: auth.DefaultTenant}, Claim: true, Lease: time.Hour,
	})
	require.NoError(t, err)
	require.True(t, created)
	return invocation{run.ID, s.Tokens.Issue(t.Context(), run.ID, 1, time.Now().Add(time.Hour))}
}

// checkpoint POSTs body to the run's checkpoint (suffix "" or "/stream") with token.
func (inv invocation) post(t *testing.T, s *stack.Stack, suffix, token, body string) (int, map[string]any) {
	t.Helper()
	return rawRequest(t, "POST", s.URL+"/v1/runs/"+inv.runID+"/checkpoint"+suffix, token, "application/json", bytes.NewBufferString(body))
}

func (inv invocation) mustPost(t *testing.T, s *stack.Stack, suffix, body string) map[string]any {
	t.Helper()
	status, out := inv.post(t, s, suffix, inv.token, body)
	require.Equal(t, http.StatusOK, status, "%s: %v", body, out)
	return out
}

// chunkEvent is one server-sent event.
type chunkEvent struct{ id, event, data string }

// chunkReader reads server-sent events from an open response.
type chunkReader struct {
	resp *http.Response
	r    *bufio.Reader
}

// openChunks GETs a run's stream; header adds request headers.
func openChunks(t *testing.T, url, token string, header map[string]string) (*chunkReader, int) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	return &chunkReader{resp: resp, r: bufio.NewReader(resp.Body)}, resp.StatusCode
}

// next returns the next event, skipping comments and the retry field; it blocks until
// one comes.
func (s *chunkReader) next(t *testing.T) chunkEvent {
	t.Helper()
	var ev chunkEvent
	for {
		line, err := s.r.ReadString('\n')
		require.NoError(t, err, "the stream ended before an event")
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if ev.event != "" {
				return ev
			}
		case strings.HasPrefix(line, "id: "):
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			ev.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		}
	}
}

// chunks reads n chunk events and returns "id=data" of each.
func (s *chunkReader) chunks(t *testing.T, n int) []string {
	t.Helper()
	var out []string
	for range n {
		ev := s.next(t)
		require.Equal(t, "chunk", ev.event, "%+v", ev)
		out = append(out, ev.id+"="+ev.data)
	}
	return out
}

func (s *chunkReader) end(t *testing.T, reason string, length int) {
	t.Helper()
	ev := s.next(t)
	require.Equal(t, "end", ev.event, "%+v", ev)
	var end struct {
		Length int    `json:"length"`
		Reason string `json:"reason"`
	}
	require.NoError(t, json.Unmarshal([]byte(ev.data), &end))
	require.Equal(t, reason, end.Reason)
	require.Equal(t, length, end.Length)
	_, err := s.r.ReadString('\n')
	require.Error(t, err, "the stream ends after its end event")
}

func TestValues(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	c := s.Client(t, s.Token)
	ctx := t.Context()

	t.Run("SetThenRead", func(t *testing.T) {
		t.Parallel()
		inv := claimRun(t, s)
		resp, err := c.GetRunValueWithResponse(ctx, inv.runID, "progress", nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, resp.StatusCode(), "no value yet")
		require.Contains(t, string(resp.Body), `has no value \"progress\"`)

		inv.mustPost(t, s, "", `{"seq":1,"kind":"value","name":"progress","output":10}`)
		inv.mustPost(t, s, "", `{"seq":1,"kind":"value","name":"progress","output":10}`) // a retried checkpoint
		inv.mustPost(t, s, "", `{"seq":2,"kind":"value","name":"url","output":{"href":"https://pay.example/1"}}`)
		inv.mustPost(t, s, "", `{"seq":3,"kind":"value","name":"progress","output":40}`)

		resp, err = c.GetRunValueWithResponse(ctx, inv.runID, "progress", nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.JSONEq(t, `40`, string(resp.JSON200.Value))
		require.Equal(t, 3, resp.JSON200.Version)
		require.Equal(t, `"3"`, resp.HTTPResponse.Header.Get("ETag"))

		resp, err = c.GetRunValueWithResponse(ctx, inv.runID, "progress", &protocol.GetRunValueParams{After: ptr(3)})
		require.NoError(t, err)
		require.Equal(t, http.StatusNotModified, resp.StatusCode(), "nothing newer, and no wait")
		resp, err = c.GetRunValueWithResponse(ctx, inv.runID, "progress", &protocol.GetRunValueParams{IfNoneMatch: ptr(`"1"`)})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), "newer than the ETag the client has")

		list, err := c.ListRunValuesWithResponse(ctx, inv.runID)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, list.StatusCode(), string(list.Body))
		require.Len(t, list.JSON200.Values, 2)
		require.Equal(t, "progress", list.JSON200.Values[0].Key)
		require.JSONEq(t, `40`, string(list.JSON200.Values[0].Value))
		require.Equal(t, "url", list.JSON200.Values[1].Key)
		require.Equal(t, 2, list.JSON200.Values[1].Version)

		// The journal shows them.
		run, err := c.GetRunWithResponse(ctx, inv.runID, nil)
		require.NoError(t, err)
		require.Len(t, run.JSON200.Journal, 3)
		require.Equal(t, protocol.EntryKindValue, run.JSON200.Journal[0].Kind)
	})

	t.Run("LongPollReturnsWhenTheValueChanges", func(t *testing.T) {
		t.Parallel()
		inv := claimRun(t, s)
		inv.mustPost(t, s, "", `{"seq":1,"kind":"value","name":"progress","output":10}`)
		got := make(chan *protocol.GetRunValueResponse, 1)
		go func() {
			resp, err := c.GetRunValueWithResponse(ctx, inv.runID, "progress", &protocol.GetRunValueParams{After: ptr(1), Wait: ptr("60s")})
			if err != nil {
				t.Error(err)
			}
			got <- resp
		}()
		// Once the reader has attached, a write is announced to it; a wait that missed it
		// would outlast the test.
		require.Eventually(t, func() bool {
			var attached bool
			_ = s.Pool.QueryRow(ctx, `SELECT notify FROM stepgate.run WHERE id = $1`, inv.runID).Scan(&attached)
			return attached
		}, time.Minute, time.Millisecond)
		inv.mustPost(t, s, "", `{"seq":2,"kind":"value","name":"progress","output":20}`)
		resp := <-got
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.JSONEq(t, `20`, string(resp.JSON200.Value))
		require.Equal(t, 2, resp.JSON200.Version)
	})

	t.Run("LongPollEndsWithTheRun", func(t *testing.T) {
		t.Parallel()
		inv := claimRun(t, s)
		inv.mustPost(t, s, "", `{"seq":1,"kind":"value","name":"progress","output":10}`)
		got := make(chan *protocol.GetRunValueResponse, 1)
		go func() {
			resp, err := c.GetRunValueWithResponse(ctx, inv.runID, "progress", &protocol.GetRunValueParams{After: ptr(1), Wait: ptr("60s")})
			if err != nil {
				t.Error(err)
			}
			got <- resp
		}()
		cancel, err := c.CancelRunWithResponse(ctx, inv.runID)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, cancel.StatusCode(), string(cancel.Body))
		resp := <-got
		require.Equal(t, http.StatusNotModified, resp.StatusCode(), "a finished run publishes nothing more")
		require.Equal(t, `"1"`, resp.HTTPResponse.Header.Get("ETag"))
	})

	t.Run("BadRequests", func(t *testing.T) {
		t.Parallel()
		inv := claimRun(t, s)
		resp, err := c.GetRunValueWithResponse(ctx, inv.runID, "progress", &protocol.GetRunValueParams{Wait: ptr("2m")})
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode())
		require.Contains(t, string(resp.Body), "longer than the maximum of 1m0s")
		status, body := inv.post(t, s, "", inv.token, `{"seq":1,"kind":"value","name":"a b","output":1}`)
		require.Equal(t, http.StatusBadRequest, status, body)
		require.Contains(t, body["detail"], "value key")
		status, body = inv.post(t, s, "", s.Tokens.Issue(ctx, inv.runID, 2, time.Now().Add(time.Hour)), `{"seq":1,"kind":"value","name":"k","output":1}`)
		require.Equal(t, http.StatusConflict, status, body)
		require.Equal(t, "superseded", body["type"])
	})
}

func TestStreams(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	c := s.Client(t, s.Token)
	ctx := t.Context()
	streamURL := func(runID, key string) string { return s.URL + "/v1/runs/" + runID + "/streams/" + key }

	t.Run("ReadFromAnOffsetLiveUntilClosed", func(t *testing.T) {
		t.Parallel()
		inv := claimRun(t, s)
		ack := inv.mustPost(t, s, "/stream", `{"key":"tokens","seq":1,"chunks":["a","b"]}`)
		require.EqualValues(t, 2, ack["length"])
		ack = inv.mustPost(t, s, "/stream", `{"key":"tokens","seq":1,"chunks":["a","b"]}`)
		require.EqualValues(t, 2, ack["length"], "a repeated write adds nothing")
		ack = inv.mustPost(t, s, "/stream", `{"key":"tokens","seq":1,"index":1,"chunks":["b","c"]}`)
		require.EqualValues(t, 3, ack["length"], "only the chunk at a new place is added")

		sse, status := openChunks(t, streamURL(inv.runID, "tokens")+"?offset=1", s.Token, nil)
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, "text/event-stream", sse.resp.Header.Get("Content-Type"))
		require.Equal(t, []string{`1="b"`, `2="c"`}, sse.chunks(t, 2))

		// Live: a chunk written now is sent once committed.
		inv.mustPost(t, s, "/stream", `{"key":"tokens","seq":2,"attempt":1,"chunks":[{"token":"d"}]}`)
		require.Equal(t, []string{`3={"token": "d"}`}, sse.chunks(t, 1))

		// A reconnect resumes after its Last-Event-ID.
		again, status := openChunks(t, streamURL(inv.runID, "tokens"), s.Token, map[string]string{"Last-Event-ID": "2"})
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, []string{`3={"token": "d"}`}, again.chunks(t, 1))

		inv.mustPost(t, s, "/stream", `{"key":"tokens","seq":3,"chunks":["e"],"close":true}`)
		require.Equal(t, []string{`4="e"`}, sse.chunks(t, 1))
		sse.end(t, "closed", 5)
		require.Equal(t, []string{`4="e"`}, again.chunks(t, 1))
		again.end(t, "closed", 5)

		status, body := inv.post(t, s, "/stream", inv.token, `{"key":"tokens","seq":3,"index":1,"chunks":["late"]}`)
		require.Equal(t, http.StatusConflict, status, body)
		require.Equal(t, "stream_closed", body["type"])
		inv.mustPost(t, s, "/stream", `{"key":"tokens","seq":3,"chunks":["e"],"close":true}`) // a retried close

		list, err := c.ListRunStreamsWithResponse(ctx, inv.runID)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, list.StatusCode(), string(list.Body))
		require.Len(t, list.JSON200.Streams, 1)
		require.Equal(t, 5, list.JSON200.Streams[0].Length)
		require.True(t, list.JSON200.Streams[0].Closed)
	})

	t.Run("StreamEndsWhenTheRunFinishes", func(t *testing.T) {
		t.Parallel()
		inv := claimRun(t, s)
		sse, status := openChunks(t, streamURL(inv.runID, "log"), s.Token, nil)
		require.Equal(t, http.StatusOK, status, "a stream not written yet is waited for")
		inv.mustPost(t, s, "/stream", `{"key":"log","seq":1,"chunks":["started"]}`)
		require.Equal(t, []string{`0="started"`}, sse.chunks(t, 1))
		cancel, err := c.CancelRunWithResponse(ctx, inv.runID)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, cancel.StatusCode(), string(cancel.Body))
		sse.end(t, "run_finished", 1)

		status, body := inv.post(t, s, "/stream", inv.token, `{"key":"log","seq":1,"index":1,"chunks":["after"]}`)
		require.Equal(t, http.StatusConflict, status, "a finished run's invocation is fenced out: %v", body)
		require.Equal(t, "superseded", body["type"])
	})

	t.Run("AnotherRunsStreamIsRefused", func(t *testing.T) {
		t.Parallel()
		victim, attacker := claimRun(t, s), claimRun(t, s)
		victim.mustPost(t, s, "/stream", `{"key":"tokens","seq":1,"chunks":["mine"]}`)
		status, body := victim.post(t, s, "/stream", attacker.token, `{"key":"tokens","seq":1,"index":1,"chunks":["forged"]}`)
		require.Equal(t, http.StatusUnauthorized, status, body)
		require.Contains(t, body["detail"], "another run")
		status, _ = victim.post(t, s, "/stream", s.Token, `{"key":"tokens","seq":1,"index":1,"chunks":["forged"]}`)
		require.Equal(t, http.StatusUnauthorized, status, "a user token is not an invocation token")
		status, body = victim.post(t, s, "/stream", s.Tokens.Issue(ctx, victim.runID, 2, time.Now().Add(time.Hour)), `{"key":"tokens","seq":1,"index":1,"chunks":["stale"]}`)
		require.Equal(t, http.StatusConflict, status, body)
		require.Equal(t, "superseded", body["type"])

		list, err := c.ListRunStreamsWithResponse(ctx, victim.runID)
		require.NoError(t, err)
		require.Equal(t, 1, list.JSON200.Streams[0].Length, "nothing was written")
	})

	t.Run("BadWrites", func(t *testing.T) {
		t.Parallel()
		inv := claimRun(t, s)
		for _, body := range []string{
			`{"key":"a/b","seq":1,"chunks":[]}`,
			`{"key":"k","seq":0,"chunks":[]}`,
			`{"key":"k","seq":1,"index":-1,"chunks":[]}`,
			`{"key":"k","seq":1,"chunks":["\u0000"]}`,
		} {
			status, out := inv.post(t, s, "/stream", inv.token, body)
			require.Equal(t, http.StatusBadRequest, status, "%s: %v", body, out)
		}
		_, status := openChunks(t, streamURL(inv.runID, "k")+"?offset=-1", s.Token, nil)
		require.Equal(t, http.StatusBadRequest, status)
	})
}

func TestValuesAndStreamsAreTenantsAndNeedRunsRead(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	ctx := t.Context()
	inv := claimRun(t, s)
	inv.mustPost(t, s, "", `{"seq":1,"kind":"value","name":"progress","output":10}`)
	inv.mustPost(t, s, "/stream", `{"key":"tokens","seq":2,"chunks":["a"]}`)

	other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "eve", Tenant: "other", Roles: []string{"admin"}}))
	noRead := s.Client(t, s.NewToken(t, auth.Identity{Subject: "bot", Tenant: auth.DefaultTenant, Roles: []string{"runs:invoke"}}))
	for _, tc := range []struct {
		c    *protocol.ClientWithResponses
		want int
	}{{other, http.StatusNotFound}, {noRead, http.StatusForbidden}} {
		v, err := tc.c.GetRunValueWithResponse(ctx, inv.runID, "progress", &protocol.GetRunValueParams{Wait: ptr("60s")})
		require.NoError(t, err)
		require.Equal(t, tc.want, v.StatusCode(), string(v.Body))
		vs, err := tc.c.ListRunValuesWithResponse(ctx, inv.runID)
		require.NoError(t, err)
		require.Equal(t, tc.want, vs.StatusCode(), string(vs.Body))
		ss, err := tc.c.ListRunStreamsWithResponse(ctx, inv.runID)
		require.NoError(t, err)
		require.Equal(t, tc.want, ss.StatusCode(), string(ss.Body))
		st, err := tc.c.ReadRunStream(ctx, inv.runID, "tokens", nil)
		require.NoError(t, err)
		st.Body.Close()
		require.Equal(t, tc.want, st.StatusCode)
	}
}

func TestValueAndStreamLimits(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Limits: invoker.Limits{MaxOutputBytes: 100, MaxChunkBytes: 10, MaxStreamChunks: 3, MaxStreamBytes: 1000, MaxRunStreams: 2}})
	s.SyncExamples(t)

	t.Run("Chunks", func(t *testing.T) {
		t.Parallel()
		inv := claimRun(t, s)
		status, body := inv.post(t, s, "/stream", inv.token, `{"key":"k","seq":1,"chunks":["0123456789abc"]}`)
		require.Equal(t, http.StatusConflict, status, body)
		require.Equal(t, "limit_exceeded", body["type"])
		require.Contains(t, body["detail"], "STEPGATE_MAX_CHUNK_BYTES")
		inv.mustPost(t, s, "/stream", `{"key":"k","seq":1,"chunks":["a","b"]}`)
		status, body = inv.post(t, s, "/stream", inv.token, `{"key":"k","seq":1,"index":2,"chunks":["c","d"]}`)
		require.Equal(t, http.StatusConflict, status, body)
		require.Contains(t, body["detail"], "STEPGATE_MAX_STREAM_CHUNKS")
		inv.mustPost(t, s, "/stream", `{"key":"k","seq":1,"index":2,"chunks":["c"]}`) // the run goes on
		inv.mustPost(t, s, "/stream", `{"key":"k2","seq":1,"chunks":["a"]}`)
		status, body = inv.post(t, s, "/stream", inv.token, `{"key":"k3","seq":1,"chunks":["a"]}`)
		require.Equal(t, http.StatusConflict, status, body)
		require.Contains(t, body["detail"], "STEPGATE_MAX_RUN_STREAMS")
	})

	t.Run("Value", func(t *testing.T) {
		t.Parallel()
		inv := claimRun(t, s)
		status, body := inv.post(t, s, "", inv.token, `{"seq":1,"kind":"value","name":"big","output":"`+strings.Repeat("x", 200)+`"}`)
		require.Equal(t, http.StatusConflict, status, body)
		require.Equal(t, "limit_exceeded", body["type"])
		require.Contains(t, body["detail"], "STEPGATE_MAX_OUTPUT_BYTES")
	})
}

// TestValuesAndStreamsEndToEnd runs a function of the Go SDK that publishes values and
// streams through a sleep (a second invocation replays the first's code).
func TestValuesAndStreamsEndToEnd(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	app := s.NewApp()
	functions.Register(app, "llm", func(ctx context.Context, _ struct{}) (string, error) {
		if err := step.SetValue(ctx, "progress", 0); err != nil {
			return "", err
		}
		out, err := step.Stream(ctx, "tokens")
		if err != nil {
			return "", err
		}
		if err := out.WriteString("thinking"); err != nil {
			return "", err
		}
		answer, err := step.Run(ctx, "answer", func(ctx context.Context) (string, error) {
			for _, tok := range []string{"Hel", "lo"} {
				if err := out.WriteString(tok); err != nil {
					return "", err
				}
			}
			if step.Attempt(ctx) == 1 {
				return "", errors.New("model overloaded")
			}
			return "Hello", nil
		}, step.Backoff(time.Millisecond, time.Millisecond))
		if err != nil {
			return "", err
		}
		if err := step.Sleep(ctx, "pause", time.Millisecond); err != nil {
			return "", err
		}
		if err := out.WriteString("!"); err != nil {
			return "", err
		}
		if err := out.Close(); err != nil {
			return "", err
		}
		return answer, step.SetValue(ctx, "progress", 100)
	})
	s.Sync(t, s.ServeApp(t, app))
	c := s.Client(t, s.Token)
	ctx := t.Context()

	resp, err := c.StartRunWithBodyWithResponse(ctx, "llm", &protocol.StartRunParams{Wait: ptr("60s")}, "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	require.Equal(t, protocol.RunStatusCompleted, resp.JSON200.Status, string(resp.Body))
	runID := resp.JSON200.ID

	v, err := c.GetRunValueWithResponse(ctx, runID, "progress", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, v.StatusCode(), string(v.Body))
	require.JSONEq(t, `100`, string(v.JSON200.Value))

	sse, status := openChunks(t, s.URL+"/v1/runs/"+runID+"/streams/tokens", s.Token, nil)
	require.Equal(t, http.StatusOK, status)
	// The failed attempt's chunks, then the retry's; nothing twice from the replays.
	require.Equal(t, []string{`0="thinking"`, `1="Hel"`, `2="lo"`, `3="Hel"`, `4="lo"`, `5="!"`}, sse.chunks(t, 6))
	sse.end(t, "closed", 6)
}
