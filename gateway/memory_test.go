package gateway_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/stack"
)

// TestLargeJournalReadInBoundedMemory reads a 200 MB journal through the API: it comes a
// page at a time, and the gateway's heap grows by a bounded multiple of a page (8 MiB),
// not by the journal. Not parallel: it measures this process's heap, which other tests
// would share.
func TestLargeJournalReadInBoundedMemory(t *testing.T) {
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	c := s.Client(t, s.Token)
	res := mustComplete(t, c, "hello", `{}`)
	seedLargeJournal(t, s, res.ID)

	grew := watchHeap(t)

	var read int64
	seqs := 0
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 100, "pages never end")
		url := s.URL + "/v1/runs/" + res.ID
		if cursor != "" {
			url += "?journal_cursor=" + cursor
		}
		req, err := http.NewRequestWithContext(t.Context(), "GET", url, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+s.Token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var page struct {
			Journal []struct {
				Seq    int             `json:"seq"`
				Output json.RawMessage `json:"output"`
			} `json:"journal"`
			Next *string `json:"journal_next_cursor"`
		}
		err = json.NewDecoder(resp.Body).Decode(&page)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		for _, e := range page.Journal {
			seqs++
			require.Equal(t, seqs, e.Seq, "in order, none missed")
			read += int64(len(e.Output))
		}
		if page.Next == nil {
			break
		}
		cursor = *page.Next
	}
	g := grew()
	require.Equal(t, 50, seqs)
	require.Greater(t, read, int64(200<<20), "the whole journal was read")
	t.Logf("read %d MiB of journal; the heap grew by %d MiB at most", read>>20, g>>20)
	require.Less(t, g, int64(120<<20), fmt.Sprintf("the heap grew by %d MiB reading a %d MiB journal", g>>20, read>>20))
}

// watchHeap samples this process's heap every 2ms from now, after a collection, until
// the returned function is called; it returns by how much the heap grew at most.
func watchHeap(t *testing.T) (grew func() int64) {
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	heap := func() int64 {
		metrics.Read(sample)
		return int64(sample[0].Value.Uint64())
	}
	runtime.GC()
	base := heap()
	var peak atomic.Int64
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			if h := heap(); h > peak.Load() {
				peak.Store(h)
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	grew = func() int64 {
		once.Do(func() { close(stop); <-sampled })
		return peak.Load() - base
	}
	t.Cleanup(func() { grew() })
	return grew
}

// seedLargeJournal writes 50 entries of 4 MiB into run's journal, past the API's
// bounds, as an operator's raised limits would let a run write them. Repetitive text
// compresses, so Postgres stores little and serves all of it.
func seedLargeJournal(t *testing.T, s *stack.Stack, run string) {
	_, err := s.Pool.Exec(t.Context(), `
		INSERT INTO stepgate.journal_entry (tenant, run_id, seq, kind, name, output, invocation, journal_bytes)
		SELECT (SELECT r.tenant FROM stepgate.run r WHERE r.id = $1), $1, g, 'step', 'big-' || g, to_jsonb(repeat(md5(g::text), 131072)), 1, g * (4194304 + 2)
		FROM generate_series(1, 50) g`, run)
	require.NoError(t, err)
}
