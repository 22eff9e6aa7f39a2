package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// TestRerunFromStep reruns a finished run from a step, through a real gateway: the
// steps before it are replayed from copies of the old run's entries, never executed
// again, and the steps from it onwards are.
func TestRerunFromStep(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	var mu sync.Mutex
	executed := map[string]int{} // step name -> executions, over all runs
	app := s.NewApp()
	functions.Register(app, "three.steps", func(ctx context.Context, _ struct{}) ([]string, error) {
		var outs []string
		for _, name := range []string{"a", "b", "c"} {
			out, err := step.Run(ctx, name, func(context.Context) (string, error) {
				mu.Lock()
				defer mu.Unlock()
				executed[name]++
				return fmt.Sprintf("%s%d", name, executed[name]), nil
			})
			if err != nil {
				return nil, err
			}
			outs = append(outs, out)
		}
		return outs, nil
	})
	s.Sync(t, s.ServeApp(t, app))
	c := s.Client(t, s.Token)
	viewer := s.Client(t, s.NewToken(t, auth.Identity{Subject: "vic", Tenant: auth.DefaultTenant, Roles: []string{"viewer"}}))
	other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "eve", Tenant: "other", Roles: []string{"admin"}}))
	counts := func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return map[string]int{"a": executed["a"], "b": executed["b"], "c": executed["c"]}
	}
	rerun := func(t *testing.T, c *protocol.ClientWithResponses, id string, from int) *protocol.RerunRunResponse {
		t.Helper()
		resp, err := c.RerunRunWithResponse(t.Context(), id, protocol.RerunRunJSONRequestBody{FromSeq: &from})
		require.NoError(t, err)
		return resp
	}
	outputOf := func(t *testing.T, id string) []string {
		t.Helper()
		res, err := c.GetRunResultWithResponse(t.Context(), id, &protocol.GetRunResultParams{Wait: ptr("30s")})
		require.NoError(t, err)
		require.Equal(t, protocol.RunStatusCompleted, res.JSON200.Status, string(res.Body))
		var out []string
		require.NoError(t, json.Unmarshal(*res.JSON200.Output, &out))
		return out
	}
	copied := func(run protocol.RunDetail) []bool {
		var marks []bool
		for _, e := range run.Journal {
			marks = append(marks, e.Copied != nil && *e.Copied)
		}
		return marks
	}

	old := mustComplete(t, c, "three.steps", `{}`)
	require.Equal(t, []string{"a1", "b1", "c1"}, outputOf(t, old.ID))
	require.Equal(t, map[string]int{"a": 1, "b": 1, "c": 1}, counts())

	// From seq 2: a is replayed from its copy, b and c run again.
	resp := rerun(t, c, old.ID, 2)
	require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
	require.Equal(t, &old.ID, resp.JSON202.RerunOf)
	require.Equal(t, []string{"a1", "b2", "c2"}, outputOf(t, resp.JSON202.ID))
	require.Equal(t, map[string]int{"a": 1, "b": 2, "c": 2}, counts(), "a step before from_seq is not executed again")
	forked := getRun(t, c, resp.JSON202.ID)
	require.Len(t, forked.Journal, 3)
	require.Equal(t, []bool{true, false, false}, copied(forked), "only the entry before from_seq is a copy")
	require.Equal(t, []bool{false, false, false}, copied(getRun(t, c, old.ID)), "the old run's entries are its own")

	// From the last seq + 1: every entry replays, nothing runs again.
	resp = rerun(t, c, old.ID, 4)
	require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
	require.Equal(t, []string{"a1", "b1", "c1"}, outputOf(t, resp.JSON202.ID))
	require.Equal(t, map[string]int{"a": 1, "b": 2, "c": 2}, counts())
	require.Equal(t, []bool{true, true, true}, copied(getRun(t, c, resp.JSON202.ID)))

	// From seq 1 is a rerun from the start.
	resp = rerun(t, c, forked.ID, 1)
	require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
	require.Equal(t, []string{"a2", "b3", "c3"}, outputOf(t, resp.JSON202.ID))
	require.Equal(t, []bool{false, false, false}, copied(getRun(t, c, resp.JSON202.ID)))

	t.Run("NoBodyRerunsFromTheStart", func(t *testing.T) {
		t.Parallel()
		resp, err := c.RerunRunWithBodyWithResponse(t.Context(), old.ID, "", nil)
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
		id := resp.JSON202.ID
		require.Len(t, outputOf(t, id), 3)
		require.Equal(t, []bool{false, false, false}, copied(getRun(t, c, id)))
	})
	t.Run("BadSeqIs400NamingTheBound", func(t *testing.T) {
		t.Parallel()
		for _, from := range []int{0, -1, 5, 100} {
			resp := rerun(t, c, old.ID, from)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode(), "from_seq %d: %s", from, resp.Body)
			require.Contains(t, string(resp.Body), "between 1 and", "from_seq %d", from)
			if from > 0 {
				require.Contains(t, string(resp.Body), "between 1 and 4", "from_seq %d", from)
			}
		}
	})
	t.Run("AnotherTenantGets404", func(t *testing.T) {
		t.Parallel()
		resp := rerun(t, other, old.ID, 2)
		require.Equal(t, http.StatusNotFound, resp.StatusCode(), string(resp.Body))
	})
	t.Run("ViewerGets403", func(t *testing.T) {
		t.Parallel()
		resp := rerun(t, viewer, old.ID, 2)
		require.Equal(t, http.StatusForbidden, resp.StatusCode(), string(resp.Body))
	})
}

// TestPatchAndDeterministicValues journals a patch marker and a time through a real
// gateway, and replays them after a sleep.
func TestPatchAndDeterministicValues(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	type result struct {
		Patched []bool
		Now     []string
	}
	var mu sync.Mutex
	seen := map[string]*result{}
	app := s.NewApp()
	functions.Register(app, "patched", func(ctx context.Context, _ struct{}) (bool, error) {
		id := functions.RunFrom(ctx).ID
		p, err := step.Patched(ctx, "fix-rounding")
		if err != nil {
			return false, err
		}
		now, err := step.Now(ctx, "started")
		if err != nil {
			return false, err
		}
		mu.Lock()
		if seen[id] == nil {
			seen[id] = &result{}
		}
		seen[id].Patched = append(seen[id].Patched, p)
		seen[id].Now = append(seen[id].Now, now.Format("2006-01-02T15:04:05.999999999Z07:00"))
		mu.Unlock()
		return p, step.Sleep(ctx, "pause", time.Millisecond)
	})
	s.Sync(t, s.ServeApp(t, app))
	c := s.Client(t, s.Token)
	res := mustComplete(t, c, "patched", `{}`)
	require.JSONEq(t, `true`, string(*res.Output))
	run := getRun(t, c, res.ID)
	require.Len(t, run.Journal, 3)
	require.Equal(t, protocol.EntryKindPatch, run.Journal[0].Kind)
	require.Equal(t, "fix-rounding", run.Journal[0].Name)
	require.Nil(t, run.Journal[0].Output)
	require.Equal(t, "started", run.Journal[1].Name)

	mu.Lock()
	got := *seen[res.ID]
	mu.Unlock()
	require.Len(t, got.Patched, 2, "the sleep made a second invocation")
	require.Equal(t, []bool{true, true}, got.Patched)
	require.Equal(t, got.Now[0], got.Now[1], "the replay returns the journaled time")
}
