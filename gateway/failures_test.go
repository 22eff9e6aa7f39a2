package gateway_test

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// groupOf returns the group of function in l, or fails.
func groupOf(t *testing.T, l *protocol.FailureGroupList, function string) protocol.FailureGroup {
	t.Helper()
	for _, g := range l.Groups {
		if g.Function == function {
			return g
		}
	}
	t.Fatalf("no group of %s in %+v", function, l.Groups)
	return protocol.FailureGroup{}
}

func listFailures(t *testing.T, c *protocol.ClientWithResponses, p *protocol.ListFailuresParams) *protocol.FailureGroupList {
	t.Helper()
	resp, err := c.ListFailuresWithResponse(t.Context(), p)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
	return resp.JSON200
}

// TestFailures groups failed runs by function, error type and message shape through a
// real gateway, per tenant; dismisses a group until it fails again; redrives a group;
// and checks the bounds and permissions of GET /v1/failures and its dismiss.
func TestFailures(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Retention: 30 * 24 * time.Hour})
	c := s.Client(t, s.NewToken(t, auth.Identity{Subject: "alice", Tenant: "t1", Roles: []string{"developer"}}))
	c2 := s.Client(t, s.NewToken(t, auth.Identity{Subject: "bob", Tenant: "t2", Roles: []string{"developer"}}))
	viewer := s.Client(t, s.NewToken(t, auth.Identity{Subject: "vic", Tenant: "t1", Roles: []string{"viewer"}}))
	var ones atomic.Int64
	syncRedriveApp(t, s, &ones, c, c2)
	// "order # not found" with # the run's number: one shape, "order <num> not found".
	seedFailed(t, s, "t1", "redrive.a", "http_status", "order # not found", 12)
	seedFailed(t, s, "t1", "redrive.a", "timeout", `fetch "https://x/#" took #ms`, 3)
	failedB := seedFailed(t, s, "t1", "redrive.b", "http_status", "order # not found", 2)
	seedFailed(t, s, "t2", "redrive.a", "http_status", "order # not found", 7)

	l := listFailures(t, viewer, nil)
	require.Len(t, l.Groups, 3, "%+v", l.Groups)
	require.False(t, l.Truncated)
	a := l.Groups[0]
	for _, g := range l.Groups {
		if g.Function == "redrive.a" && g.ErrorType == "http_status" {
			a = g
		}
	}
	require.EqualValues(t, 12, a.Count, "the other tenant's 7 are not counted")
	require.Equal(t, "order <num> not found", a.Message)
	require.Regexp(t, `^order \d+ not found$`, *a.SampleMessage)
	require.Regexp(t, `^[0-9a-f]{16}$`, a.Group)
	require.False(t, a.FirstSeen.After(a.LastSeen))
	for _, g := range l.Groups {
		if g.ErrorType == "timeout" {
			require.Equal(t, "fetch <str> took <num>ms", g.Message)
		}
	}
	b := groupOf(t, l, "redrive.b")
	require.NotEqual(t, a.Group, b.Group, "one message in two functions is two groups")
	l2 := listFailures(t, c2, nil)
	require.Len(t, l2.Groups, 1)
	require.EqualValues(t, 7, l2.Groups[0].Count)
	require.Equal(t, a.Group, l2.Groups[0].Group, "the key is the same in every tenant; what it counts is not")

	t.Run("Bounds", func(t *testing.T) {
		for name, p := range map[string]protocol.ListFailuresParams{
			"since": {Since: new("31d")},
			"limit": {Limit: new(501)},
		} {
			resp, err := c.ListFailuresWithResponse(t.Context(), &p)
			require.NoError(t, err)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode(), "%s: %s", name, resp.Body)
			require.Contains(t, string(resp.Body), name)
		}
		resp, err := c.ListFailuresWithResponse(t.Context(), &protocol.ListFailuresParams{Since: new("soon")})
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode(), string(resp.Body))
		limited := listFailures(t, c, &protocol.ListFailuresParams{Limit: new(2)})
		require.Len(t, limited.Groups, 2)
		require.True(t, limited.Truncated)
		// The seeded runs failed some seconds ago: a window of one second has none.
		require.Empty(t, listFailures(t, c, &protocol.ListFailuresParams{Since: new("1ms")}).Groups)

		bad, err := c.DismissFailuresWithResponse(t.Context(), "nope")
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, bad.StatusCode(), string(bad.Body))
		runs, err := c.ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{ErrorGroup: new("nope")})
		require.NoError(t, err)
		require.Equal(t, http.StatusBadRequest, runs.StatusCode(), string(runs.Body))
	})

	t.Run("Permissions", func(t *testing.T) {
		resp, err := viewer.DismissFailuresWithResponse(t.Context(), a.Group)
		require.NoError(t, err)
		require.Equal(t, http.StatusForbidden, resp.StatusCode(), string(resp.Body))
		require.Contains(t, string(resp.Body), "runs:manage")
		// b's group has no failed run in t2.
		other, err := c2.DismissFailuresWithResponse(t.Context(), b.Group)
		require.NoError(t, err)
		require.Equal(t, http.StatusNotFound, other.StatusCode(), string(other.Body))
	})

	t.Run("InspectTheGroup", func(t *testing.T) {
		resp, err := c.ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{ErrorGroup: &a.Group, Limit: new(100)})
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Len(t, resp.JSON200.Runs, 12)
		for _, r := range resp.JSON200.Runs {
			require.Equal(t, "redrive.a", r.Function)
			require.Equal(t, "http_status", r.Error.Type)
		}
	})

	t.Run("DismissUntilItFailsAgain", func(t *testing.T) {
		resp, err := c.DismissFailuresWithResponse(t.Context(), b.Group)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
		require.Equal(t, "alice", resp.JSON200.By.Subject)
		l := listFailures(t, c, nil)
		require.Len(t, l.Groups, 2)
		for _, g := range l.Groups {
			require.NotEqual(t, b.Group, g.Group, "a dismissed group is hidden")
		}
		all := listFailures(t, c, &protocol.ListFailuresParams{IncludeDismissed: new(true)})
		require.NotNil(t, groupOf(t, all, "redrive.b").DismissedAt)
		require.Len(t, listFailures(t, c2, nil).Groups, 1, "a dismissal is the tenant's")

		// A new failure of the group after the dismissal brings it back.
		seedFailedNow(t, s, "t1", "redrive.b", "http_status", "order 99 not found")
		back := groupOf(t, listFailures(t, c, nil), "redrive.b")
		require.EqualValues(t, 3, back.Count)
	})

	t.Run("RedriveTheGroup", func(t *testing.T) {
		resp, err := c.RerunRunsWithResponse(t.Context(), protocol.RerunRunsRequest{
			Filter: protocol.CancelFilter{ErrorGroup: &a.Group}, From: new(protocol.RerunRunsRequestFromFailure),
		})
		require.NoError(t, err)
		require.Equal(t, http.StatusAccepted, resp.StatusCode(), string(resp.Body))
		op := awaitOperation(t, c, resp.JSON202.ID.String())
		require.Equal(t, protocol.OperationStatusCompleted, op.Status, "%+v", op)
		require.EqualValues(t, 12, op.Done, "the group's runs, not the timeouts of the same function")
		require.Equal(t, a.Group, *op.Filter.ErrorGroup)
		require.Equal(t, 12, countReruns(t, s, "t1"))
		require.Zero(t, countReruns(t, s, "t2"))
	})

	// The view tells the redriven runs apart, and a group whose runs all were redriven
	// successfully closes itself with hide_redriven, until one fails again.
	t.Run("RedrivenRunsAreCounted", func(t *testing.T) {
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			resp, err := c.ListFailuresWithResponse(t.Context(), nil)
			if !assert.NoError(ct, err) || !assert.NotNil(ct, resp.JSON200, "%d %s", resp.StatusCode(), resp.Body) {
				return
			}
			for _, g := range resp.JSON200.Groups {
				if g.Group == a.Group {
					assert.EqualValues(ct, 12, g.RedrivenCompleted, "%+v", g)
					return
				}
			}
			assert.Fail(ct, "no group "+a.Group)
		}, 60*time.Second, 10*time.Millisecond, "the reruns of group %s never all completed", a.Group)
		// One run of b rerun, the rerun cancelled; another rerun by t2's run that names it
		// (which no gateway makes: a rerun is its tenant's), completed.
		seedRerun(t, s, "t1", "redrive.b", failedB[0], "cancelled")
		seedRerun(t, s, "t2", "redrive.b", failedB[1], "completed")

		l := listFailures(t, c, nil)
		byGroup := map[string]protocol.FailureGroup{}
		for _, g := range l.Groups {
			byGroup[g.Group] = g
		}
		require.Len(t, byGroup, 3)
		ga, gb := byGroup[a.Group], byGroup[b.Group]
		require.EqualValues(t, [3]int64{12, 12, 12}, [3]int64{ga.Count, ga.Redriven, ga.RedrivenCompleted}, "%+v", ga)
		require.EqualValues(t, [3]int64{3, 1, 0}, [3]int64{gb.Count, gb.Redriven, gb.RedrivenCompleted},
			"b: one run redriven, not successfully; t2's run is not counted: %+v", gb)
		for _, g := range l.Groups {
			if g.ErrorType == "timeout" {
				require.Zero(t, g.Redriven, "the timeouts of redrive.a were not redriven")
			}
		}
		other := listFailures(t, c2, nil).Groups
		require.Len(t, other, 1)
		require.Zero(t, other[0].Redriven, "t2's group a: its runs were not redriven, t1's were")

		hidden := listFailures(t, c, &protocol.ListFailuresParams{HideRedriven: new(true)})
		require.Len(t, hidden.Groups, 2, "%+v", hidden.Groups)
		for _, g := range hidden.Groups {
			require.NotEqual(t, a.Group, g.Group, "every run of a was redriven successfully: the group closed")
		}
		require.Len(t, listFailures(t, c2, &protocol.ListFailuresParams{HideRedriven: new(true)}).Groups, 1)
		limited := listFailures(t, c, &protocol.ListFailuresParams{HideRedriven: new(true), Limit: new(2)})
		require.Len(t, limited.Groups, 2)
		require.False(t, limited.Truncated, "the closed group is left out before the limit")

		// A run of a that fails after the redrive, not redriven, reopens the group.
		seedFailedNow(t, s, "t1", "redrive.a", "http_status", "order 99 not found")
		back := listFailures(t, c, &protocol.ListFailuresParams{HideRedriven: new(true)})
		require.Len(t, back.Groups, 3)
		require.Equal(t, a.Group, back.Groups[0].Group)
		require.EqualValues(t, [3]int64{13, 12, 12}, [3]int64{back.Groups[0].Count, back.Groups[0].Redriven, back.Groups[0].RedrivenCompleted})
	})
}

// seedRerun inserts a finished run of the tenant's function, in status, that reruns
// the run rerunOf.
func seedRerun(t *testing.T, s *stack.Stack, tenant, function, rerunOf, status string) {
	t.Helper()
	tag, err := s.Pool.Exec(t.Context(), `
		INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity, rerun_of, created_at, finished_at)
		SELECT gen_random_uuid(), f.tenant, f.name, f.revision, $4, '{}', jsonb_build_object('subject', 'seed', 'tenant', f.tenant),
			$3::uuid, now(), clock_timestamp()
		FROM stepgate.function f WHERE f.tenant = $1 AND f.name = $2`, tenant, function, rerunOf, status)
	require.NoError(t, err)
	require.EqualValues(t, 1, tag.RowsAffected())
}

// seedFailedNow inserts a run of the tenant's function that failed now with message.
func seedFailedNow(t *testing.T, s *stack.Stack, tenant, function, errType, message string) {
	t.Helper()
	_, err := s.Pool.Exec(t.Context(), `
		INSERT INTO stepgate.run (id, tenant, function, revision, status, input, identity, error, created_at, finished_at)
		SELECT gen_random_uuid(), f.tenant, f.name, f.revision, 'failed', '{}', jsonb_build_object('subject', 'seed', 'tenant', f.tenant),
			jsonb_build_object('type', $3::text, 'message', $4::text), now(), clock_timestamp()
		FROM stepgate.function f WHERE f.tenant = $1 AND f.name = $2`, tenant, function, errType, message)
	require.NoError(t, err)
}
