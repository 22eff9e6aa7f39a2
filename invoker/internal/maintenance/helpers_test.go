package maintenance_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/journal"
)

// newRun registers tenant t1's function work (again: a new revision) and creates a run
// of it, as opts say.
func newRun(t *testing.T, db *pgxpool.Pool, opts ...func(*journal.NewRun)) *journal.Run {
	t.Helper()
	_, err := journal.RegisterFunction(t.Context(), db, "t1", "work", "http://127.0.0.1:1/work", json.RawMessage(`{}`), time.Minute, 0)
	require.NoError(t, err)
	n := journal.NewRun{ID: uuid.NewString(), Tenant: "t1", Function: "work", Input: json.RawMessage(`{}`),
		Identity: journal.Identity{Subject: "tester", Tenant: "t1", Roles: []string{"admin"}}}
	for _, o := range opts {
		o(&n)
	}
	run, created, err := journal.CreateRun(t.Context(), db, n)
	require.NoError(t, err)
	require.True(t, created)
	return run
}

// claimed creates the run claimed by its first invocation, leased for a minute.
func claimed(n *journal.NewRun) { n.Claim, n.Lease = true, time.Minute }

func exec(t *testing.T, db *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	_, err := db.Exec(t.Context(), sql, args...)
	require.NoError(t, err)
}

func status(t *testing.T, db *pgxpool.Pool, id string) string {
	t.Helper()
	var s string
	require.NoError(t, db.QueryRow(t.Context(), `SELECT status FROM stepgate.run WHERE id = $1`, id).Scan(&s))
	return s
}

// enqueuer records the runs it is asked to enqueue in their transaction; with fail set,
// it fails instead, and that transaction rolls back.
type enqueuer struct {
	mu   sync.Mutex
	ids  []string
	fail error
}

func (e *enqueuer) enqueue(_ context.Context, tx pgx.Tx, ids []string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fail != nil {
		return e.fail
	}
	e.ids = append(e.ids, ids...)
	return nil
}

func (e *enqueuer) enqueued() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.ids)
}

// logs is a logger whose lines a test reads.
type logs struct {
	mu    sync.Mutex
	lines strings.Builder
}

func (l *logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines.Write(p)
}

func (l *logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lines.String()
}

func (l *logs) logger() *slog.Logger { return slog.New(slog.NewTextHandler(l, nil)) }

// eventually waits, polling, until cond holds, for at most 10 seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, time.Millisecond, what)
}
