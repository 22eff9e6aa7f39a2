package journal_test

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
)

func TestRegisterFunction(t *testing.T) {
	t.Parallel()

	t.Run("RevisionsCountPerName", func(t *testing.T) {
		t.Parallel()
		ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
		for i := 1; i <= 3; i++ {
			fn, err := journal.RegisterFunction(ctx, tx, tenant, "f", fmt.Sprintf("http://f/%d", i),
				json.RawMessage(fmt.Sprintf(`{"timeout":"%ds"}`, i)), time.Duration(i)*time.Second, 0)
			require.NoError(t, err)
			require.Equal(t, i, fn.Revision)
			require.Equal(t, tenant, fn.Tenant)
			require.Equal(t, "f", fn.Name)
		}
		g := mustRegister(t, tx, tenant, "g")
		require.Equal(t, 1, g.Revision, "another name counts from 1")
		require.JSONEq(t, `{}`, string(g.Config), "no config is an empty one")

		cur, err := journal.GetFunction(ctx, tx, tenant, "f")
		require.NoError(t, err)
		require.Equal(t, 3, cur.Revision, "the newest revision is current")
		require.Equal(t, "http://f/3", cur.URL)
		require.JSONEq(t, `{"timeout":"3s"}`, string(cur.Config))

		old, err := journal.GetRevision(ctx, tx, tenant, "f", 1)
		require.NoError(t, err)
		require.Equal(t, "http://f/1", old.URL, "old revisions are kept as they were")
		_, err = journal.GetRevision(ctx, tx, tenant, "f", 4)
		require.ErrorIs(t, err, journal.ErrNotFound)

		list, err := journal.ListFunctions(ctx, tx, tenant)
		require.NoError(t, err)
		require.Len(t, list, 2)
		require.Equal(t, "f", list[0].Name)
		require.Equal(t, 3, list[0].Revision)
		require.Equal(t, "g", list[1].Name)
	})

	t.Run("TenantsAreSeparate", func(t *testing.T) {
		t.Parallel()
		ctx, tx, a, b := t.Context(), pgtest.Tx(t), newTenant(), newTenant()
		mustRegister(t, tx, a, "f")
		mustRegister(t, tx, a, "f")
		fb := mustRegister(t, tx, b, "f")
		require.Equal(t, 1, fb.Revision, "another tenant's revisions do not count")

		got, err := journal.GetFunction(ctx, tx, b, "f")
		require.NoError(t, err)
		require.Equal(t, b, got.Tenant)
		require.Equal(t, 1, got.Revision)

		_, err = journal.GetFunction(ctx, tx, newTenant(), "f")
		require.ErrorIs(t, err, journal.ErrNotFound)
		_, err = journal.GetRevision(ctx, tx, newTenant(), "f", 1)
		require.ErrorIs(t, err, journal.ErrNotFound)
		require.ErrorIs(t, journal.DeleteFunction(ctx, tx, newTenant(), "f"), journal.ErrNotFound)

		require.NoError(t, journal.DeleteFunction(ctx, tx, a, "f"))
		_, err = journal.GetFunction(ctx, tx, b, "f")
		require.NoError(t, err, "deleting a's function leaves b's")
		list, err := journal.ListFunctions(ctx, tx, a)
		require.NoError(t, err)
		require.Empty(t, list)
	})

	t.Run("DeleteThenRegisterContinuesRevisions", func(t *testing.T) {
		t.Parallel()
		ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
		mustRegister(t, tx, tenant, "f")
		mustRegister(t, tx, tenant, "f")
		run := mustCreateRunOf(t, tx, tenant, "f")

		require.NoError(t, journal.DeleteFunction(ctx, tx, tenant, "f"))
		require.ErrorIs(t, journal.DeleteFunction(ctx, tx, tenant, "f"), journal.ErrNotFound)
		_, err := journal.GetFunction(ctx, tx, tenant, "f")
		require.ErrorIs(t, err, journal.ErrNotFound)
		_, _, err = journal.CreateRun(ctx, tx, journal.NewRun{ID: newID(), Tenant: tenant, Function: "f", Input: json.RawMessage(`1`)})
		require.ErrorIs(t, err, journal.ErrNotFound, "a deleted function starts no runs")

		// A run of a deleted function still finds its revision.
		rev, err := journal.GetRevision(ctx, tx, tenant, "f", run.Revision)
		require.NoError(t, err)
		require.Equal(t, 2, rev.Revision)
		_, err = journal.GetRun(ctx, tx, tenant, run.ID)
		require.NoError(t, err, "runs outlive their function")

		again := mustRegister(t, tx, tenant, "f")
		require.Equal(t, 3, again.Revision, "revisions go on after a delete")
		cur, err := journal.GetFunction(ctx, tx, tenant, "f")
		require.NoError(t, err)
		require.Equal(t, 3, cur.Revision)
	})

	t.Run("ConcurrentRegistrationsGetDistinctRevisions", func(t *testing.T) {
		t.Parallel()
		ctx, db, tenant := t.Context(), pgtest.DB(t), newTenant()
		const n = 16
		revs := make([]int, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				fn, err := journal.RegisterFunction(ctx, db, tenant, "f", fmt.Sprintf("http://f/%d", i), nil, time.Second, 0)
				errs[i] = err
				if err == nil {
					revs[i] = fn.Revision
				}
			})
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "registration %d", i)
		}
		slices.Sort(revs)
		for i, rev := range revs {
			require.Equal(t, i+1, rev, "revisions are 1..%d, each once: %v", n, revs)
		}
		cur, err := journal.GetFunction(ctx, db, tenant, "f")
		require.NoError(t, err)
		require.Equal(t, n, cur.Revision, "the last registration is current")
	})
}
