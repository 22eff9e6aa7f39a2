package journal_test

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
)

func TestCreateRun(t *testing.T) {
	t.Parallel()

	t.Run("UnknownFunctionIsNotFound", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		for _, key := range []string{"", "k"} {
			_, _, err := journal.CreateRun(ctx, tx, journal.NewRun{
				ID: newID(), Tenant: newTenant(), Function: "nope", Input: json.RawMessage(`{}`), IdempotencyKey: key,
			})
			require.ErrorIs(t, err, journal.ErrNotFound, "key %q", key)
		}
	})

	t.Run("QueuedOnTheCurrentRevision", func(t *testing.T) {
		t.Parallel()
		ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
		mustRegister(t, tx, tenant, "fn")
		mustRegister(t, tx, tenant, "fn")
		parent := mustCreateRunOf(t, tx, tenant, "fn")
		id := journal.Identity{Subject: "ada", Tenant: tenant, Roles: []string{"a", "b"}, Claims: map[string]any{"plan": "pro"}}
		run, created, err := journal.CreateRun(ctx, tx, journal.NewRun{
			ID: newID(), Tenant: tenant, Function: "fn", Input: json.RawMessage(`{"n": 1}`), Identity: id, ParentID: &parent.ID,
		})
		require.NoError(t, err)
		require.True(t, created)
		require.Equal(t, journal.StatusQueued, run.Status)
		require.Equal(t, 2, run.Revision)
		require.JSONEq(t, `{"n":1}`, string(run.Input))
		require.Equal(t, id, run.Identity)
		require.Equal(t, &parent.ID, run.ParentID)
		require.Nil(t, run.IdempotencyKey)
		require.Zero(t, run.Invocations)
		require.Zero(t, run.Invocation)
		require.Nil(t, run.LeaseUntil)
		require.Nil(t, run.StartedAt)
		require.Nil(t, run.FinishedAt)
		require.Equal(t, run, mustGetRun(t, tx, run))
	})

	t.Run("ClaimedRunsWithALease", func(t *testing.T) {
		t.Parallel()
		ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
		_, err := journal.RegisterFunction(ctx, tx, tenant, "fn", "http://f/", nil, 1500*time.Millisecond, 0)
		require.NoError(t, err)
		run := mustCreateRunOf(t, tx, tenant, "fn", claimed, func(n *journal.NewRun) { n.Lease = 250 * time.Millisecond })
		require.Equal(t, journal.StatusRunning, run.Status)
		require.Equal(t, 1, run.Invocation)
		require.Equal(t, 1, run.Invocations)
		require.NotNil(t, run.StartedAt)
		require.NotNil(t, run.LeaseUntil)
		require.Equal(t, run.CreatedAt.Add(250*time.Millisecond), *run.LeaseUntil, "leased for the lease asked, whatever the function's timeout")

		_, err = journal.ClaimRun(ctx, tx, run.ID, time.Minute)
		require.ErrorIs(t, err, journal.ErrNotDue, "a claimed run is not claimed again")
	})

	t.Run("SameKeySameInputIsTheSameRun", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		first := mustCreateRun(t, tx, func(n *journal.NewRun) {
			n.IdempotencyKey, n.Input = "k1", json.RawMessage(`{"a":1,"b":[1,2]}`)
		})
		require.Equal(t, "k1", *first.IdempotencyKey)
		again, created, err := journal.CreateRun(ctx, tx, journal.NewRun{
			ID: newID(), Tenant: first.Tenant, Function: "fn", IdempotencyKey: "k1",
			Input: json.RawMessage(`{ "b" : [1, 2],  "a":1 }`), Claim: true,
		})
		require.NoError(t, err)
		require.False(t, created)
		require.Equal(t, first.ID, again.ID)
		require.Equal(t, journal.StatusQueued, again.Status, "the existing run is returned, not claimed")

		_, _, err = journal.CreateRun(ctx, tx, journal.NewRun{
			ID: newID(), Tenant: first.Tenant, Function: "fn", IdempotencyKey: "k1", Input: json.RawMessage(`{"a":2,"b":[1,2]}`),
		})
		require.ErrorIs(t, err, journal.ErrIdempotencyMismatch)
		_, _, err = journal.CreateRun(ctx, tx, journal.NewRun{
			ID: newID(), Tenant: first.Tenant, Function: "fn", IdempotencyKey: "k1", Input: json.RawMessage(`{"b":[2,1],"a":1}`),
		})
		require.ErrorIs(t, err, journal.ErrIdempotencyMismatch, "array order matters")
	})

	t.Run("KeysArePerTenantAndFunction", func(t *testing.T) {
		t.Parallel()
		ctx, tx := t.Context(), pgtest.Tx(t)
		key := func(n *journal.NewRun) { n.IdempotencyKey = "k" }
		first := mustCreateRun(t, tx, key)
		mustRegister(t, tx, first.Tenant, "other")
		other := mustCreateRunOf(t, tx, first.Tenant, "other", key)
		require.NotEqual(t, first.ID, other.ID, "another function")
		elsewhere := mustCreateRun(t, tx, key) // function "fn" of another tenant
		require.NotEqual(t, first.ID, elsewhere.ID, "another tenant")

		_, err := journal.GetRun(ctx, tx, elsewhere.Tenant, first.ID)
		require.ErrorIs(t, err, journal.ErrNotFound, "a tenant does not see another's runs")
	})
}

func TestListRuns(t *testing.T) {
	t.Parallel()

	// mustRuns creates runs of fn and other, all in one transaction, so they share
	// created_at, and then moves some into the past, so that ties and order both count.
	// It returns them in the order ListRuns must: newest first, then by id descending.
	mustRuns := func(t *testing.T, tx journal.DB, tenant string) []journal.Run {
		t.Helper()
		mustRegister(t, tx, tenant, "fn")
		mustRegister(t, tx, tenant, "other")
		var runs []journal.Run
		for i := range 11 {
			fn := "fn"
			if i%3 == 0 {
				fn = "other"
			}
			var opts []func(*journal.NewRun)
			if i%4 == 0 {
				opts = append(opts, claimed)
			}
			run := mustCreateRunOf(t, tx, tenant, fn, opts...)
			if i >= 6 {
				// Runs 6..8 a second back, 9..10 two seconds back, 0..5 tied at now.
				back := time.Duration(1+(i-6)/3) * time.Second
				require.NoError(t, tx.QueryRow(t.Context(), `
					UPDATE stepgate.run SET created_at = created_at - make_interval(secs => $2)
					WHERE id = $1 RETURNING created_at`, run.ID, back.Seconds()).Scan(&run.CreatedAt))
			}
			runs = append(runs, *run)
		}
		slices.SortFunc(runs, func(a, b journal.Run) int {
			return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(b.ID, a.ID))
		})
		return runs
	}
	ids := func(runs []journal.Run) []string {
		var out []string
		for _, r := range runs {
			out = append(out, r.ID)
		}
		return out
	}
	// all pages through ListRuns with f and returns every run it lists.
	all := func(t *testing.T, db journal.DB, tenant string, f journal.RunFilter) []journal.Run {
		t.Helper()
		var out []journal.Run
		for pages := 0; ; pages++ {
			require.Less(t, pages, 20, "paging does not end")
			page, next, err := journal.ListRuns(t.Context(), db, tenant, f)
			require.NoError(t, err)
			require.LessOrEqual(t, len(page), cmp.Or(f.Limit, 50))
			out = append(out, page...)
			if next == nil {
				return out
			}
			require.Len(t, page, f.Limit, "only the last page is short")
			require.Equal(t, page[len(page)-1].ID, next.ID)
			f.After = next
		}
	}

	t.Run("PagesListEveryRunOnceNewestFirst", func(t *testing.T) {
		t.Parallel()
		tx, tenant := pgtest.Tx(t), newTenant()
		want := mustRuns(t, tx, tenant)
		for _, limit := range []int{1, 2, 3, 5, 11, 12, 0} {
			got := all(t, tx, tenant, journal.RunFilter{Limit: limit})
			require.Equal(t, ids(want), ids(got), "limit %d", limit)
		}
	})

	t.Run("Filters", func(t *testing.T) {
		t.Parallel()
		tx, tenant := pgtest.Tx(t), newTenant()
		want := mustRuns(t, tx, tenant)
		filter := func(keep func(journal.Run) bool) []string {
			var out []string
			for _, r := range want {
				if keep(r) {
					out = append(out, r.ID)
				}
			}
			return out
		}
		now := want[0].CreatedAt
		for _, tc := range []struct {
			name string
			f    journal.RunFilter
			keep func(journal.Run) bool
		}{
			{"Function", journal.RunFilter{Function: "other"}, func(r journal.Run) bool { return r.Function == "other" }},
			{"Status", journal.RunFilter{Status: journal.StatusRunning}, func(r journal.Run) bool { return r.Status == journal.StatusRunning }},
			{"FunctionAndStatus", journal.RunFilter{Function: "fn", Status: journal.StatusQueued},
				func(r journal.Run) bool { return r.Function == "fn" && r.Status == journal.StatusQueued }},
			{"CreatedAfter", journal.RunFilter{CreatedAfter: now.Add(-1500 * time.Millisecond)},
				func(r journal.Run) bool { return r.CreatedAt.After(now.Add(-1500 * time.Millisecond)) }},
			{"CreatedBefore", journal.RunFilter{CreatedBefore: now}, func(r journal.Run) bool { return r.CreatedAt.Before(now) }},
			{"NoneOfThatFunction", journal.RunFilter{Function: "nope"}, func(journal.Run) bool { return false }},
		} {
			for _, limit := range []int{2, 0} {
				tc.f.Limit = limit
				exp := filter(tc.keep)
				require.Equal(t, exp, ids(all(t, tx, tenant, tc.f)), "%s, limit %d", tc.name, limit)
				if tc.name != "NoneOfThatFunction" {
					require.True(t, len(exp) > 0 && len(exp) < len(want), "%s keeps some runs of the fixture, not all", tc.name)
				}
			}
		}
	})

	t.Run("OtherTenantsSeeNone", func(t *testing.T) {
		t.Parallel()
		tx := pgtest.Tx(t)
		mustRuns(t, tx, newTenant())
		page, next, err := journal.ListRuns(t.Context(), tx, newTenant(), journal.RunFilter{})
		require.NoError(t, err)
		require.Empty(t, page)
		require.Nil(t, next)
	})
}

func TestGetRunDetail(t *testing.T) {
	t.Parallel()
	ctx, tx := t.Context(), pgtest.Tx(t)
	run := mustCreateRun(t, tx, claimed)
	step := journal.Entry{Seq: 1, Kind: journal.KindStep, Name: "a", Output: json.RawMessage(`{"x":1}`), Attempt: 2}
	_, err := journal.Finish(ctx, tx, run.ID, 1, journal.RetryingStep(journal.StepRetry{
		Failure: journal.Failure{Seq: 2, Attempt: 1, Name: "b", Error: journal.ErrorInfo{Type: "step_failed", Message: "boom"}},
		After:   time.Hour,
	}, step))
	require.NoError(t, err)

	d, err := journal.GetRunDetail(ctx, tx, run.Tenant, run.ID, journal.JournalPage{})
	require.NoError(t, err)
	require.Equal(t, run.ID, d.Run.ID)
	require.Equal(t, journal.StatusSuspended, d.Run.Status)
	require.Len(t, d.Journal, 1)
	require.Equal(t, "a", d.Journal[0].Name)
	require.JSONEq(t, `{"x":1}`, string(d.Journal[0].Output))
	require.Len(t, d.Failures, 1)
	require.Equal(t, "boom", d.Failures[0].Error.Message)
	require.Zero(t, d.Next)

	_, err = journal.GetRunDetail(ctx, tx, "another-tenant", run.ID, journal.JournalPage{})
	require.ErrorIs(t, err, journal.ErrNotFound, "another tenant's run is not found")
	_, err = journal.GetRunDetail(ctx, tx, run.Tenant, newID(), journal.JournalPage{})
	require.ErrorIs(t, err, journal.ErrNotFound)
}

func TestGetRunDetailPages(t *testing.T) {
	t.Parallel()
	ctx, tx := t.Context(), pgtest.Tx(t)
	run := mustCreateRun(t, tx, claimed)
	for i := 1; i <= 5; i++ {
		e := journal.Entry{Seq: i, Kind: journal.KindStep, Name: fmt.Sprint("s", i), Output: json.RawMessage(`"` + strings.Repeat("x", 98) + `"`)}
		require.NoError(t, journal.AppendEntry(ctx, tx, run.ID, 1, e, journal.Bounds{}))
	}
	mustExec(t, tx, `INSERT INTO stepgate.attempt_failure (tenant, run_id, seq, attempt, name, error) VALUES
		($2, $1, 0, 1, '', '{"type":"t","message":"invocation"}'), ($2, $1, 2, 1, 's2', '{"type":"t","message":"s2"}'),
		($2, $1, 4, 1, 's4', '{"type":"t","message":"s4"}'), ($2, $1, 6, 1, 's6', '{"type":"t","message":"s6"}')`, run.ID, run.Tenant)
	seqs := func(es []journal.Entry) (out []int) {
		for _, e := range es {
			out = append(out, e.Seq)
		}
		return out
	}
	failed := func(fs []journal.Failure) (out []int) {
		for _, f := range fs {
			out = append(out, f.Seq)
		}
		return out
	}

	d, err := journal.GetRunDetail(ctx, tx, run.Tenant, run.ID, journal.JournalPage{Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []int{1, 2}, seqs(d.Journal))
	require.Equal(t, 2, d.Next)
	require.ElementsMatch(t, []int{0, 2}, failed(d.Failures), "the first page has the invocations' failures")
	d, err = journal.GetRunDetail(ctx, tx, run.Tenant, run.ID, journal.JournalPage{After: 2, MaxBytes: 250})
	require.NoError(t, err)
	require.Equal(t, []int{3, 4}, seqs(d.Journal), "a byte budget ends the page before the entry that would pass it")
	require.Equal(t, 4, d.Next)
	require.Equal(t, []int{4}, failed(d.Failures))
	d, err = journal.GetRunDetail(ctx, tx, run.Tenant, run.ID, journal.JournalPage{After: 4})
	require.NoError(t, err)
	require.Equal(t, []int{5}, seqs(d.Journal))
	require.Zero(t, d.Next, "the last page")
	require.Equal(t, []int{6}, failed(d.Failures), "a step being retried past the end comes with the last page")
	d, err = journal.GetRunDetail(ctx, tx, run.Tenant, run.ID, journal.JournalPage{MaxBytes: 1})
	require.NoError(t, err)
	require.Len(t, d.Journal, 1, "a page holds one entry at least")
	d, err = journal.GetRunDetail(ctx, tx, run.Tenant, run.ID, journal.JournalPage{After: 1 << 40})
	require.NoError(t, err, "a cursor past any seq (an int4) is no error")
	require.Empty(t, d.Journal)
	require.Zero(t, d.Next)
}

func TestCopyEntries(t *testing.T) {
	t.Parallel()
	ctx, tx := t.Context(), pgtest.Tx(t)
	// The old run journaled step a, then slept for an hour at seq 2, and was cancelled.
	old := mustCreateRun(t, tx, claimed)
	_, err := journal.Finish(ctx, tx, old.ID, 1, journal.Sleeping(journal.Sleep{Seq: 2, Name: "nap", For: time.Hour},
		journal.Entry{Seq: 1, Kind: "step", Name: "a", Output: json.RawMessage(`"out"`), Attempt: 2}))
	require.NoError(t, err)
	_, err = journal.CancelRun(ctx, tx, old.Tenant, old.ID, journal.Identity{Subject: "ada"})
	require.NoError(t, err)
	run := mustCreateRunOf(t, tx, old.Tenant, "fn", func(n *journal.NewRun) { n.RerunOf = &old.ID })

	for _, before := range []int{0, 3, 4} {
		_, err := journal.CopyEntries(ctx, tx, old.Tenant, old.ID, run.ID, before, journal.FreshCallbacks{})
		var re *journal.SeqRangeError
		require.ErrorAs(t, err, &re, "before %d", before)
		require.Equal(t, 2, re.Max, "the sleep that is not over caps it")
		require.True(t, re.Sleeping)
	}
	_, err = journal.CopyEntries(ctx, tx, "another-tenant", old.ID, run.ID, 2, journal.FreshCallbacks{})
	require.ErrorIs(t, err, journal.ErrNotFound)

	n, err := journal.CopyEntries(ctx, tx, old.Tenant, old.ID, run.ID, 2, journal.FreshCallbacks{})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	claim, err := journal.ClaimRun(ctx, tx, run.ID, time.Minute)
	require.NoError(t, err)
	require.Len(t, claim.Journal, 1)
	e := claim.Journal[0]
	require.Equal(t, 1, e.Seq)
	require.Equal(t, "a", e.Name)
	require.JSONEq(t, `"out"`, string(e.Output))
	require.Equal(t, 2, e.Attempt)
	require.True(t, e.Copied)

	// The run goes on from there: its own next entry is not a copy.
	_, err = journal.Finish(ctx, tx, run.ID, claim.Run.Invocation, journal.Completed(json.RawMessage(`1`),
		journal.Entry{Seq: 2, Kind: "step", Name: "b", Output: json.RawMessage(`2`)}))
	require.NoError(t, err)
}
