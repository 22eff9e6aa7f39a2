package journal_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
)

// mustInvoke creates a claimed parent run of tenant's "parent", whose invocation 1 then
// suspends on invoking child at seq 1 ("call"), and returns the parent and the child.
func mustInvoke(t *testing.T, db journal.DB, tenant, child string) (parent *journal.Run, f *journal.Finished) {
	t.Helper()
	mustRegister(t, db, tenant, "parent")
	parent = mustCreateRunOf(t, db, tenant, "parent", claimed, func(n *journal.NewRun) {
		n.Identity = journal.Identity{Subject: "alice", Tenant: tenant, Roles: []string{"developer"}, Claims: map[string]any{"email": "alice@example.com"}}
	})
	f, err := journal.Finish(t.Context(), db, parent.ID, 1, journal.InvokingChild(
		journal.Invoke{Seq: 1, Name: "call", ChildID: newID(), Function: child, Input: json.RawMessage(`{"n":1}`)}))
	require.NoError(t, err)
	return parent, f
}

// finishChild claims the child and finishes its invocation with o.
func finishChild(t *testing.T, db journal.DB, child *journal.Run, o journal.Outcome) *journal.Finished {
	t.Helper()
	c, err := journal.ClaimRun(t.Context(), db, child.ID, time.Minute)
	require.NoError(t, err)
	f, err := journal.Finish(t.Context(), db, child.ID, c.Run.Invocation, o)
	require.NoError(t, err)
	return f
}

// requireWoken checks that the parent is due now with one invoke entry at seq 1.
func requireWoken(t *testing.T, db journal.DB, parent, child *journal.Run) journal.Entry {
	t.Helper()
	got := mustGetRun(t, db, parent)
	require.Equal(t, journal.StatusSuspended, got.Status)
	require.NotNil(t, got.WakeAt, "due")
	require.False(t, got.WakeAt.After(dbNow(t, db)), "due now, by the database clock")
	es := mustEntries(t, db, parent.ID)
	require.Len(t, es, 1)
	e := es[0]
	require.Equal(t, 1, e.Seq)
	require.Equal(t, journal.KindInvoke, e.Kind)
	require.Equal(t, "call", e.Name)
	require.Equal(t, child.CreatedAt, *e.StartedAt, "started when the child was created")
	return e
}

func TestChildRuns(t *testing.T) {
	t.Parallel()

	t.Run("InvokeStartsAChildAsTheParent", func(t *testing.T) {
		t.Parallel()
		ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
		mustRegister(t, tx, tenant, "child")
		mustRegister(t, tx, tenant, "child")
		parent, f := mustInvoke(t, tx, tenant, "child")

		require.Equal(t, journal.StatusSuspended, f.Status)
		require.Nil(t, f.WakeAt, "a parent waits for its child with no wake time")
		require.Empty(t, f.Parent)
		child := f.Child
		require.NotNil(t, child)
		require.Equal(t, journal.StatusQueued, child.Status)
		require.Equal(t, tenant, child.Tenant)
		require.Equal(t, "child", child.Function)
		require.Equal(t, 2, child.Revision, "the current revision")
		require.JSONEq(t, `{"n":1}`, string(child.Input))
		require.Equal(t, parent.Identity, child.Identity, "inherited")
		require.Equal(t, &parent.ID, child.ParentID)
		require.Equal(t, 1, *child.ParentSeq)
		require.Equal(t, "call", *child.ParentName)
		require.Equal(t, child, mustGetRun(t, tx, child))

		got := mustGetRun(t, tx, parent)
		require.Equal(t, journal.StatusSuspended, got.Status)
		require.Nil(t, got.WakeAt)
		require.Empty(t, mustEntries(t, tx, parent.ID), "nothing journaled until the child ends")
		_, err := journal.ClaimRun(ctx, tx, parent.ID, time.Minute)
		require.ErrorIs(t, err, journal.ErrNotDue, "a waiting parent is never due by time")
	})

	t.Run("ACompletedChildWakesItsParent", func(t *testing.T) {
		t.Parallel()
		ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
		mustRegister(t, tx, tenant, "child")
		parent, f := mustInvoke(t, tx, tenant, "child")
		child := f.Child

		done := finishChild(t, tx, child, journal.Completed(json.RawMessage(`{"tracking":"trk_1"}`)))
		require.Equal(t, parent.ID, done.Parent)
		e := requireWoken(t, tx, parent, child)
		require.JSONEq(t, `{"tracking":"trk_1"}`, string(e.Output))
		require.Nil(t, e.Error)

		claim, err := journal.ClaimRun(ctx, tx, parent.ID, time.Minute)
		require.NoError(t, err, "the parent is due")
		require.Equal(t, 2, claim.Run.Invocation)
		require.Len(t, claim.Journal, 1)
	})

	t.Run("ALateDuplicateFinishJournalsNothingMore", func(t *testing.T) {
		t.Parallel()
		ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
		mustRegister(t, tx, tenant, "child")
		parent, f := mustInvoke(t, tx, tenant, "child")
		child := f.Child
		finishChild(t, tx, child, journal.Completed(json.RawMessage(`1`)))

		_, err := journal.Finish(ctx, tx, child.ID, 1, journal.Completed(json.RawMessage(`2`)))
		require.ErrorIs(t, err, journal.ErrSuperseded)
		_, err = journal.CancelRun(ctx, tx, tenant, child.ID, journal.Identity{Subject: "bob"})
		require.ErrorIs(t, err, journal.ErrFinished)
		e := requireWoken(t, tx, parent, child)
		require.JSONEq(t, `1`, string(e.Output), "the first outcome stays")

		// Even a writer that ends the child a second time behind the fences' back finds
		// the parent no longer waiting (it has a wake time), and the seq taken.
		mustExec(t, tx, `SET LOCAL session_replication_role = replica`) // no triggers
		mustExec(t, tx, `UPDATE stepgate.run SET status = 'running', finished_at = NULL, lease_until = now() WHERE id = $1`, child.ID)
		mustExec(t, tx, `UPDATE stepgate.run SET wake_at = NULL WHERE id = $1`, parent.ID)
		late, err := journal.Finish(ctx, tx, child.ID, 1, journal.Failed( // finishChild claimed it once
			journal.ErrorInfo{Type: "x", Message: "late"}))
		require.NoError(t, err)
		require.Equal(t, parent.ID, late.Parent)
		es := mustEntries(t, tx, parent.ID)
		require.Len(t, es, 1, "(run, seq) is unique: the first write wins")
		require.JSONEq(t, `1`, string(es[0].Output))
	})

	t.Run("AFailedChildsErrorIsJournaled", func(t *testing.T) {
		t.Parallel()
		tx, tenant := pgtest.Tx(t), newTenant()
		mustRegister(t, tx, tenant, "child")
		parent, f := mustInvoke(t, tx, tenant, "child")
		fail := &journal.ErrorInfo{Type: "step_failed", Message: "no trucks"}
		done := finishChild(t, tx, f.Child, journal.Failed(*fail))
		require.Equal(t, parent.ID, done.Parent)
		e := requireWoken(t, tx, parent, f.Child)
		require.Nil(t, e.Output)
		require.Equal(t, fail, e.Error)
	})

	t.Run("ACancelledChildWakesItsParent", func(t *testing.T) {
		t.Parallel()
		ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
		mustRegister(t, tx, tenant, "child")
		parent, f := mustInvoke(t, tx, tenant, "child")
		cancelled, err := journal.CancelRun(ctx, tx, tenant, f.Child.ID, journal.Identity{Subject: "bob"})
		require.NoError(t, err)
		require.Equal(t, &parent.ID, cancelled.ParentID)
		e := requireWoken(t, tx, parent, f.Child)
		require.Equal(t, &journal.ErrorInfo{Type: "cancelled", Message: "cancelled by bob"}, e.Error)
	})

	t.Run("ACancelledParentStaysCancelled", func(t *testing.T) {
		t.Parallel()
		ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
		mustRegister(t, tx, tenant, "child")
		parent, f := mustInvoke(t, tx, tenant, "child")
		_, err := journal.CancelRun(ctx, tx, tenant, parent.ID, journal.Identity{Subject: "bob"})
		require.NoError(t, err)
		require.Equal(t, journal.StatusQueued, mustGetRun(t, tx, f.Child).Status, "its child goes on")

		done := finishChild(t, tx, f.Child, journal.Completed(json.RawMessage(`1`)))
		require.Equal(t, parent.ID, done.Parent, "named, for its job, which finds nothing to claim")
		require.Equal(t, journal.StatusCancelled, mustGetRun(t, tx, parent).Status)
		require.Empty(t, mustEntries(t, tx, parent.ID))
	})

	t.Run("AnUnknownFunctionIsJournaledAtOnce", func(t *testing.T) {
		t.Parallel()
		ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
		mustRegister(t, tx, newTenant(), "child") // another tenant's
		parent, f := mustInvoke(t, tx, tenant, "child")
		require.Nil(t, f.Child)
		require.NotNil(t, f.WakeAt, "due at once")
		require.Equal(t, dbNow(t, tx), *f.WakeAt)

		es := mustEntries(t, tx, parent.ID)
		require.Len(t, es, 1)
		require.Equal(t, journal.KindInvoke, es[0].Kind)
		require.Equal(t, "call", es[0].Name)
		require.Equal(t, journal.ErrorTypeNotFound, es[0].Error.Type)
		require.Contains(t, es[0].Error.Message, "child")
		var children int
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM stepgate.run WHERE parent_id = $1`, parent.ID).Scan(&children))
		require.Zero(t, children)
		_, err := journal.ClaimRun(ctx, tx, parent.ID, time.Minute)
		require.NoError(t, err)
	})

	t.Run("InvokeRolesAreCheckedAgainstTheParentsIdentity", func(t *testing.T) {
		t.Parallel()
		ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
		_, err := journal.RegisterFunction(ctx, tx, tenant, "child", "http://127.0.0.1:1/child",
			json.RawMessage(`{"invoke_roles":["billing"]}`), time.Minute, 0)
		require.NoError(t, err)
		mustRegister(t, tx, tenant, "parent")
		for _, check := range []bool{true, false} {
			role := "developer"
			if !check {
				role = "admin"
			}
			parent := mustCreateRunOf(t, tx, tenant, "parent", claimed, func(n *journal.NewRun) {
				n.Identity = journal.Identity{Subject: "alice", Tenant: tenant, Roles: []string{role}}
			})
			f, err := journal.Finish(ctx, tx, parent.ID, 1, journal.InvokingChild(journal.Invoke{Seq: 1, Name: "call", ChildID: newID(), Function: "child"}))
			require.NoError(t, err)
			if !check {
				require.NotNil(t, f.Child, "an admin's run may invoke anything")
				require.JSONEq(t, `null`, string(f.Child.Input), "no input is null")
				continue
			}
			require.Nil(t, f.Child)
			es := mustEntries(t, tx, parent.ID)
			require.Len(t, es, 1)
			require.Equal(t, journal.ErrorTypeForbidden, es[0].Error.Type)
			require.Contains(t, es[0].Error.Message, "billing")
		}
	})

	t.Run("ATakenSeqConflicts", func(t *testing.T) {
		t.Parallel()
		ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
		mustRegister(t, tx, tenant, "child")
		mustRegister(t, tx, tenant, "parent")
		for _, child := range []string{"child", "nope"} {
			parent := mustCreateRunOf(t, tx, tenant, "parent", claimed)
			require.NoError(t, journal.AppendEntry(ctx, tx, parent.ID, 1, step(1, "call", `1`), journal.Bounds{}))
			err := inSavepoint(t, tx, func(sp pgx.Tx) error {
				_, err := journal.Finish(ctx, sp, parent.ID, 1, journal.InvokingChild(journal.Invoke{Seq: 1, Name: "call", ChildID: newID(), Function: child}))
				return err
			})
			require.ErrorIs(t, err, journal.ErrConflict, child)
		}
	})

	t.Run("AStaleInvocationStartsNoChild", func(t *testing.T) {
		t.Parallel()
		ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
		mustRegister(t, tx, tenant, "child")
		mustRegister(t, tx, tenant, "parent")
		parent := mustCreateRunOf(t, tx, tenant, "parent", claimed)
		_, err := journal.Finish(ctx, tx, parent.ID, 2, journal.InvokingChild(journal.Invoke{Seq: 1, Name: "call", ChildID: newID(), Function: "child"}))
		require.ErrorIs(t, err, journal.ErrSuperseded)
		var children int
		require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM stepgate.run WHERE parent_id = $1`, parent.ID).Scan(&children))
		require.Zero(t, children)
	})
}

// TestChildRunsFenced runs a child's end against its parent's cancellation, both
// committed concurrently, many times: either the child's outcome is journaled in the
// parent (which the cancellation then ends), or the parent was cancelled first and
// nothing is journaled in it; the child's end never fails.
func TestChildRunsFenced(t *testing.T) {
	t.Parallel()
	ctx, db, tenant := t.Context(), pgtest.DB(t), newTenant()
	mustRegister(t, db, tenant, "child")
	outcomes := map[string]int{}
	for range 20 {
		parent, f := mustInvoke(t, db, tenant, "child")
		claim, err := journal.ClaimRun(ctx, db, f.Child.ID, time.Minute)
		require.NoError(t, err)
		var wg sync.WaitGroup
		var named string
		var finishErr, cancelErr error
		wg.Go(func() {
			err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
				done, err := journal.Finish(ctx, tx, f.Child.ID, claim.Run.Invocation,
					journal.Completed(json.RawMessage(`1`)))
				if err == nil {
					named = done.Parent
				}
				return err
			})
			finishErr = err
		})
		wg.Go(func() { _, cancelErr = journal.CancelRun(ctx, db, tenant, parent.ID, journal.Identity{Subject: "bob"}) })
		wg.Wait()
		require.NoError(t, finishErr)
		require.NoError(t, cancelErr, "a waiting parent, woken or not, can be cancelled")
		require.Equal(t, journal.StatusCancelled, mustGetRun(t, db, parent).Status)
		require.Equal(t, parent.ID, named, "the child's end names its parent either way")
		es := mustEntries(t, db, parent.ID)
		if len(es) > 0 {
			require.Len(t, es, 1, "woken, then cancelled")
			outcomes["woken, then cancelled"]++
		} else {
			require.Empty(t, es, "nothing journaled in a cancelled parent")
			outcomes["cancelled first"]++
		}
	}
	t.Logf("parents after the race: %v", outcomes)
}

// TestChildRunsUnderRowLevelSecurity cancels a child through the API pool, as the
// gateway does: row-level security lets the statement wake its parent, of the same
// tenant, and never a run of another tenant that a forged child names as its parent.
func TestChildRunsUnderRowLevelSecurity(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	system, api := fencedPools(t, 2)
	a, b := newTenant(), newTenant()
	mustRegister(t, system, a, "child")
	parent, f := mustInvoke(t, system, a, "child")

	// Runs of tenant b that name a's waiting parent as their own, ended through b's
	// fenced handle and through the system pool (which sees every tenant).
	mustRegister(t, system, b, "fn")
	forge := func(seq int) *journal.Run {
		return mustCreateRunOf(t, system, b, "fn", func(n *journal.NewRun) {
			n.ParentID, n.ParentSeq, n.ParentName = &parent.ID, seq, "forged"
		})
	}
	_, err := journal.CancelRun(ctx, journal.ForTenant(api, b), b, forge(2).ID, journal.Identity{Subject: "eve"})
	require.NoError(t, err)
	forged := forge(3)
	claim, err := journal.ClaimRun(ctx, system, forged.ID, time.Minute)
	require.NoError(t, err)
	ended, err := journal.Finish(ctx, system, forged.ID, claim.Run.Invocation, journal.Failed(journal.ErrorInfo{Type: "x", Message: "y"}))
	require.NoError(t, err)
	require.Empty(t, ended.Parent)
	require.Nil(t, mustGetRun(t, system, parent).WakeAt, "another tenant's child wakes nothing")
	require.Empty(t, mustEntries(t, system, parent.ID))

	cancelled, err := journal.CancelRun(ctx, journal.ForTenant(api, a), a, f.Child.ID, journal.Identity{Subject: "bob"})
	require.NoError(t, err)
	require.Equal(t, journal.StatusCancelled, cancelled.Status)
	e := requireWoken(t, system, parent, f.Child)
	require.Equal(t, "cancelled", e.Error.Type)
}
