package journal_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/canceltree"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// TestCancelQueriesNotifyNotifyChannel: the named queries that cancel runs spell out
// NotifyChannel, which a sqlc query cannot splice in.
func TestCancelQueriesNotifyNotifyChannel(t *testing.T) {
	t.Parallel()
	for name, sql := range map[string]string{
		"CancelDescendants":    dbsqlc.CancelDescendants,
		"OperationCancelBatch": dbsqlc.OperationCancelBatch,
	} {
		require.Contains(t, sql, "pg_notify('"+journal.NotifyChannel+"', ", name)
	}
}

// mustChain makes parent → child → grandchild, the grandchild detached or not, and
// cancels the parent alone.
func mustChain(t *testing.T, db journal.DB, tenant string, detached bool) (parent, child, grand *journal.Run) {
	t.Helper()
	ctx := t.Context()
	mustRegister(t, db, tenant, "child")
	parent, f := mustInvoke(t, db, tenant, "child")
	c, err := journal.ClaimRun(ctx, db, f.Child.ID, time.Minute)
	require.NoError(t, err)
	g, err := journal.Finish(ctx, db, f.Child.ID, c.Run.Invocation, journal.InvokingChild(
		journal.Invoke{Seq: 1, Name: "grand", ChildID: newID(), Function: "child", Input: json.RawMessage(`{}`), Detached: detached}))
	require.NoError(t, err)
	_, err = journal.CancelRun(ctx, db, tenant, parent.ID, journal.Identity{Subject: "bob", Tenant: tenant})
	require.NoError(t, err)
	return parent, f.Child, g.Child
}

func TestCancelDescendants(t *testing.T) {
	t.Parallel()

	t.Run("ADetachedGrandchildGoesOn", func(t *testing.T) {
		t.Parallel()
		ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
		parent, child, grand := mustChain(t, tx, tenant, true)
		require.True(t, mustGetRun(t, tx, grand).Detached)
		by := journal.Identity{Subject: "bob", Tenant: tenant}

		ids, err := canceltree.CancelDescendants(ctx, tx, newTenant(), []string{parent.ID}, by, 10)
		require.NoError(t, err)
		require.Empty(t, ids, "another tenant's tree is out of reach")

		ids, err = canceltree.CancelDescendants(ctx, tx, tenant, []string{parent.ID}, by, 10)
		require.NoError(t, err)
		require.Equal(t, []string{child.ID}, ids)
		got := mustGetRun(t, tx, child)
		require.Equal(t, journal.StatusCancelled, got.Status)
		require.Equal(t, "cancelled with its parent run "+parent.ID+" by bob", got.Error.Message)
		require.Equal(t, "bob", got.CancelledBy.Subject)
		require.Nil(t, got.Awaiting)
		require.Empty(t, mustEntries(t, tx, parent.ID), "nothing journaled in the cancelled parent")
		require.Equal(t, journal.StatusQueued, mustGetRun(t, tx, grand).Status, "detached")
		require.Empty(t, mustEntries(t, tx, child.ID), "nothing journaled in the cancelled child")
	})

	t.Run("ABoundedPassContinuesWhereItStopped", func(t *testing.T) {
		t.Parallel()
		ctx, tx, tenant := t.Context(), pgtest.Tx(t), newTenant()
		parent, child, grand := mustChain(t, tx, tenant, false)
		by := journal.Identity{Subject: "bob", Tenant: tenant}
		ids, err := canceltree.CancelDescendants(ctx, tx, tenant, []string{parent.ID}, by, 1)
		require.NoError(t, err)
		require.Equal(t, []string{child.ID}, ids, "the shallowest first")
		ids, err = canceltree.CancelDescendants(ctx, tx, tenant, []string{parent.ID}, by, 1)
		require.NoError(t, err)
		require.Equal(t, []string{grand.ID}, ids, "through the cancelled child")
		ids, err = canceltree.CancelDescendants(ctx, tx, tenant, []string{parent.ID}, by, 1)
		require.NoError(t, err)
		require.Empty(t, ids)
	})
}
