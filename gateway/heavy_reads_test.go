package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/gateway"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// get is a GET of path with token, its body read whole.
func get(t *testing.T, s *stack.Stack, token, path string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), "GET", s.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

// seedHeavyData stores in tenant's account what made a viewer's reads take gigabytes:
// 61 runs of function that failed with 3.5 MB messages, each a group of its own (the
// message's first word differs, letters only), and 500 events of 358 KB (179 MB).
// Repetitive text compresses: Postgres stores little and serves all of it.
func seedHeavyData(t *testing.T, s *stack.Stack, tenant, function string) {
	_, err := s.Pool.Exec(t.Context(), `
		INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity, error, created_at, finished_at)
		SELECT gen_random_uuid(), f.tenant, f.name, f.revision, 'failed', '{}', jsonb_build_object('subject', 'seed', 'tenant', f.tenant),
			jsonb_build_object('type', 'http_status', 'message',
				translate(md5(i::text), '0123456789', 'ghijklmnop') || ' ' || repeat(translate(md5(i::text), '0123456789', 'ghijklmnop'), 110000)),
			now(), clock_timestamp()
		FROM stepgate.function f, generate_series(1, 61) i
		WHERE f.tenant = $1 AND f.name = $2`, tenant, function)
	require.NoError(t, err)
	_, err = s.Pool.Exec(t.Context(), `
		INSERT INTO stepgate.event (tenant, id, name, data, identity, created_at)
		SELECT $1, 'heavy-' || g, 'heavy', to_jsonb(repeat(md5(g::text), 11200)), jsonb_build_object('subject', 'seed', 'tenant', $1::text),
			now() - make_interval(secs => g / 1000.0)
		FROM generate_series(1, 500) g`, tenant)
	require.NoError(t, err)
}

// TestHeavyReadsInBoundedMemory: over data that made each answer hundreds of MB (61
// failures of 3.5 MB messages, 500 events of 358 KB), 8 concurrent GET /v1/failures?limit=500
// and 8 GET /v1/events?limit=500 move the gateway's heap by less than 300 MB: a failure's
// sample message is cut to 1000 characters, an event page ends past 8 MiB of data with a
// cursor, and the cursor pages through every event. Not parallel: it measures this
// process's heap.
func TestHeavyReadsInBoundedMemory(t *testing.T) {
	s := stack.Start(t, stack.Options{Retention: 30 * 24 * time.Hour, Gateway: func(c *gateway.Config) {
		c.MaxHeavyReadsPerTenant = 16 // all 16 at once: the worst the test can make
	},
		// The 16 reads queue for the pool's connections, each read hundreds of MB: on a
		// loaded machine with the race detector a wait passed the default bound of 10s
		// (a 503, as that bound means). The bound is TestDatabaseHang's; this test's is
		// the memory.
		DatabaseTimeout: 2 * time.Minute,
	})
	s.SyncExamples(t)
	seedHeavyData(t, s, auth.DefaultTenant, "hello")
	tokens := make([]string, 16)
	for i := range tokens {
		tokens[i] = s.NewToken(t, auth.Identity{Subject: fmt.Sprintf("viewer-%d", i), Tenant: auth.DefaultTenant, Roles: []string{"viewer"}})
	}

	grew := watchHeap(t)
	var wg sync.WaitGroup
	type answer struct {
		path string
		code int
		body []byte
	}
	answers := make(chan answer, len(tokens))
	for i, token := range tokens {
		path := "/v1/failures?limit=500"
		if i%2 == 1 {
			path = "/v1/events?limit=500"
		}
		wg.Go(func() {
			resp, body := get(t, s, token, path)
			answers <- answer{path, resp.StatusCode, body}
		})
	}
	wg.Wait()
	g := grew()
	close(answers)
	for a := range answers {
		require.Equal(t, http.StatusOK, a.code, "%s: %.300s", a.path, a.body)
		if strings.HasPrefix(a.path, "/v1/failures") {
			var l struct {
				Groups []struct {
					SampleMessage string `json:"sample_message"`
					Message       string `json:"message"`
				} `json:"groups"`
			}
			require.NoError(t, json.Unmarshal(a.body, &l))
			require.Len(t, l.Groups, 61, "a group per message")
			for _, g := range l.Groups {
				require.Equal(t, 1000, utf8.RuneCountInString(g.SampleMessage), "the sample is the message's first 1000 characters")
			}
			require.Less(t, len(a.body), 1<<20, "the answer is bounded in bytes")
			continue
		}
		var p struct {
			Events     []json.RawMessage `json:"events"`
			NextCursor *string           `json:"next_cursor"`
		}
		require.NoError(t, json.Unmarshal(a.body, &p))
		require.NotNil(t, p.NextCursor, "a page cut by bytes has a cursor")
		require.Less(t, len(p.Events), 500)
		require.Less(t, len(a.body), 9<<20, "8 MiB of data and the event that passed it")
		require.Greater(t, len(a.body), 8<<20)
	}
	t.Logf("16 heavy reads at once: the heap grew by %d MiB at most", g>>20)
	require.Less(t, g, int64(300<<20), "the heap grew by %d MiB", g>>20)

	// The cursor pages through every event, none twice.
	seen := map[string]bool{}
	path := "/v1/events?limit=500&name=heavy"
	for pages := 0; ; pages++ {
		require.Less(t, pages, 100, "pages never end")
		resp, body := get(t, s, tokens[0], path)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%.300s", body)
		var p struct {
			Events []struct {
				ID string `json:"id"`
			} `json:"events"`
			NextCursor *string `json:"next_cursor"`
		}
		require.NoError(t, json.Unmarshal(body, &p))
		for _, e := range p.Events {
			require.False(t, seen[e.ID], "event %s twice", e.ID)
			seen[e.ID] = true
		}
		if p.NextCursor == nil {
			break
		}
		path = "/v1/events?limit=500&name=heavy&cursor=" + *p.NextCursor
	}
	require.Len(t, seen, 500)
}

// TestLargeExportInBoundedMemory exports a run with a 200 MB journal: the export is
// written as it is read, a page at a time, so the heap grows by a bounded multiple of a
// page, not by the journal; the document is whole and in seq order. Not parallel: it
// measures this process's heap.
func TestLargeExportInBoundedMemory(t *testing.T) {
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	res := mustComplete(t, s.Client(t, s.Token), "hello", `{}`)
	seedLargeJournal(t, s, res.ID)

	grew := watchHeap(t)
	req, err := http.NewRequestWithContext(t.Context(), "GET", s.URL+"/v1/runs/"+res.ID+"/export", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	// Decode entry by entry, so that this test's own heap stays small too.
	dec := json.NewDecoder(resp.Body)
	var read int64
	seqs := 0
	var fields []string
	tok := func() json.Token {
		tk, err := dec.Token()
		require.NoError(t, err)
		return tk
	}
	require.Equal(t, json.Delim('{'), tok())
	for dec.More() {
		name := tok().(string)
		fields = append(fields, name)
		if name != "journal" {
			var v json.RawMessage
			require.NoError(t, dec.Decode(&v))
			if name == "run" {
				var run struct {
					ID     string `json:"id"`
					Status string `json:"status"`
				}
				require.NoError(t, json.Unmarshal(v, &run))
				require.Equal(t, res.ID, run.ID)
				require.Equal(t, "completed", run.Status)
			}
			continue
		}
		require.Equal(t, json.Delim('['), tok())
		for dec.More() {
			var e struct {
				Seq    int             `json:"seq"`
				Output json.RawMessage `json:"output"`
			}
			require.NoError(t, dec.Decode(&e))
			seqs++
			require.Equal(t, seqs, e.Seq, "in order, none missed")
			read += int64(len(e.Output))
		}
		require.Equal(t, json.Delim(']'), tok())
	}
	require.Equal(t, json.Delim('}'), tok())
	g := grew()
	require.ElementsMatch(t, []string{"format", "journal", "failures", "function", "run", "exported_at"}, fields)
	require.Equal(t, 50, seqs)
	require.Greater(t, read, int64(200<<20), "the whole journal was exported")
	t.Logf("exported %d MiB of journal; the heap grew by %d MiB at most", read>>20, g>>20)
	require.Less(t, g, int64(120<<20), "the heap grew by %d MiB exporting a %d MiB journal", g>>20, read>>20)
}

// TestHeavyReadsHoldPlaces: a viewer runs at most 2 heavy reads at once on a gateway
// (exports, the failures view, event lists, run lists with include_io): a third
// concurrent export is a 429 naming the limit with Retry-After, while the viewer's light
// reads and another subject's heavy reads go on; a place comes back when a read ends.
func TestHeavyReadsHoldPlaces(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	res := mustComplete(t, s.Client(t, s.Token), "hello", `{}`)
	seedLargeJournal(t, s, res.ID)
	viewer := s.NewToken(t, auth.Identity{Subject: "vic", Tenant: auth.DefaultTenant, Roles: []string{"viewer"}})
	other := s.NewToken(t, auth.Identity{Subject: "olga", Tenant: auth.DefaultTenant, Roles: []string{"viewer"}})

	// Two exports of a 200 MB journal whose reader reads nothing after the headers: the
	// gateway's writes block once the socket's buffers are full, so they stay running.
	open := func() *http.Response {
		req, err := http.NewRequestWithContext(t.Context(), "GET", s.URL+"/v1/runs/"+res.ID+"/export", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+viewer)
		resp, err := (&http.Client{Transport: &http.Transport{}}).Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return resp
	}
	first, second := open(), open()
	defer second.Body.Close()

	for _, path := range []string{"/v1/runs/" + res.ID + "/export", "/v1/failures", "/v1/events", "/v1/runs?include=io"} {
		resp, body := get(t, s, viewer, path)
		require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "%s: %s", path, body)
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
		require.Contains(t, string(body), "vic has 2 heavy reads running on this gateway, the limit per subject")
		require.Contains(t, string(body), "STEPGATE_MAX_HEAVY_READS_PER_SUBJECT")
	}
	resp, body := get(t, s, viewer, "/v1/runs")
	require.Equal(t, http.StatusOK, resp.StatusCode, "a light read: %s", body)
	resp, body = get(t, s, other, "/v1/failures")
	require.Equal(t, http.StatusOK, resp.StatusCode, "another subject: %s", body)

	// The first export's reader leaves: its place comes back.
	first.Body.Close()
	require.Eventually(t, func() bool {
		resp, _ := get(t, s, viewer, "/v1/failures")
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond)
}

// TestHeavyReadsWaitForMemory: while the gateway's live heap is near its memory limit,
// a heavy read is a 503 naming STEPGATE_MEMORY_LIMIT, with Retry-After; light reads are
// served.
func TestHeavyReadsWaitForMemory(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Gateway: func(c *gateway.Config) {
		c.MemoryLimit = 1 << 20 // 1 MiB: any live heap is near it
	}})
	s.SyncExamples(t)
	res := mustComplete(t, s.Client(t, s.Token), "hello", `{}`)
	for _, path := range []string{"/v1/runs/" + res.ID + "/export", "/v1/failures", "/v1/events", "/v1/runs?include=io"} {
		resp, body := get(t, s, s.Token, path)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s: %s", path, body)
		require.Equal(t, "1", resp.Header.Get("Retry-After"))
		require.Contains(t, string(body), "memory is near its limit")
		require.Contains(t, string(body), "of 1 MiB; STEPGATE_MEMORY_LIMIT sets it")
	}
	// A deploy check too: it refuses before reading the manifest.
	app := s.NewApp()
	functions.Register(app, "noop", func(ctx context.Context, _ struct{}) (int, error) { return 1, nil })
	checked, err := s.Client(t, s.Token).SyncAppWithResponse(t.Context(), &protocol.SyncAppParams{Check: ptr(true)}, protocol.AppSync{URL: s.ServeApp(t, app)})
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, checked.StatusCode(), string(checked.Body))
	require.Contains(t, string(checked.Body), "STEPGATE_MEMORY_LIMIT")
	for _, path := range []string{"/v1/runs", "/v1/runs/" + res.ID, "/v1/functions"} {
		resp, body := get(t, s, s.Token, path)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", path, body)
	}
}
