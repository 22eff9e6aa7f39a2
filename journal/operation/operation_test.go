package operation_test

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
	"github.com/stepgate/stepgate/journal/operation"
	"github.com/stepgate/stepgate/journal/storable"
)

// TestOperationQueriesMatchTheSameRuns: an operation counts the runs it then cancels,
// so OperationCountMatching and OperationBatch, which each write out the conditions on
// the run, write out the same ones, with the same parameters.
func TestOperationQueriesMatchTheSameRuns(t *testing.T) {
	t.Parallel()
	conditions := func(sql string) string {
		start := strings.Index(sql, "WHERE r.tenant")
		end := strings.Index(sql, "::text[])")
		require.True(t, start >= 0 && end > start, sql)
		return strings.Join(strings.Fields(sql[start:end]), " ")
	}
	require.Equal(t, conditions(dbsqlc.OperationCountMatching), conditions(dbsqlc.OperationBatch))
}

// TestCreateOperationUnstorableFilter: a filter holding text Postgres cannot store is an
// ErrUnstorable (a 400 at the gateway), not an internal error.
func TestCreateOperationUnstorableFilter(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	_, err := operation.CreateOperation(t.Context(), tx, uuid.Must(uuid.NewV7()).String(), "t1", operation.OperationKindCancel,
		operation.CancelFilter{IdempotencyKeyPrefix: new("a\x00")}, nil, journal.Identity{Subject: "alice", Tenant: "t1"})
	require.ErrorIs(t, err, storable.ErrUnstorable)
}
