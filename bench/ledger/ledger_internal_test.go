package ledger

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestStatementName(t *testing.T) {
	t.Parallel()
	for sql, want := range map[string]string{
		"-- name: RunFinish :one\nUPDATE stepgate.run SET status = $1": "RunFinish",
		"  -- name: JobGetAvailable :many\nWITH":                       "JobGetAvailable",
		"begin":                                                        "begin",
		"commit":                                                       "commit",
		"SELECT 1":                                                     "SELECT",
		"-- a comment\nlisten \"x\"":                                   "listen",
		"/* TEMPLATE */ select now()":                                  "select",
		"":                                                             "empty",
		"-- only a comment":                                            "comment",
	} {
		require.Equal(t, want, StatementName(sql), sql)
	}
}

func TestTransactions(t *testing.T) {
	t.Parallel()
	log := []Statement{
		{Name: "begin", RoundTrip: true, Tx: true, Conn: 1},
		{Name: "TenantSet", RoundTrip: true, Tx: true, Conn: 2}, // a batch outside a transaction
		{Name: "RunFinish", RoundTrip: true, Conn: 1},
		{Name: "RunCreate", Conn: 2},
		{Name: "commit", RoundTrip: true, Conn: 1},
		{Name: "ClaimRun", RoundTrip: true, Tx: true, Conn: 1}, // alone
		{Name: "JobGetAvailable", RoundTrip: true, Tx: true, Conn: 2},
	}
	var got [][]string
	for _, tx := range Transactions(log) {
		var names []string
		for _, s := range tx {
			names = append(names, s.Name)
		}
		got = append(got, names)
	}
	require.Equal(t, [][]string{{"begin", "RunFinish", "commit"}, {"TenantSet", "RunCreate"}, {"ClaimRun"}, {"JobGetAvailable"}}, got)
}

func TestLedgerFile(t *testing.T) {
	t.Parallel()
	l := Ledger{Postgres: 15, Shapes: []string{"noop", "steps3"}, Costs: map[string]Cost{
		"noop": {HTTPIn: 1, HTTPOut: 1, Statements: 3, RoundTrips: 2, Transactions: 2, Commits: 2, Rows: 3, WALBytes: 2458, Allocs: 600,
			Details: []Detail{{"in", "POST /v1/functions/{name}/runs", 1}, {"stmt", "RunCreate", 1}, {"rows", "stepgate.run", 2}, {"lock", "stepgate.run", 1}}},
		"steps3": {HTTPIn: 1, HTTPOut: 1, HTTPBack: 4, Statements: 10, RoundTrips: 6, Transactions: 6, Commits: 6, Rows: 7, WALBytes: 3789, Allocs: 1119},
	}}
	var b bytes.Buffer
	require.NoError(t, l.Write(&b))
	back, err := Parse(&b)
	require.NoError(t, err)
	require.Empty(t, Compare(l, back), "written and read back:\n%s", b.String())

	t.Run("ACountThatRisesOrFallsIsAChange", func(t *testing.T) {
		t.Parallel()
		m := clone(l)
		c := m.Costs["noop"]
		c.Statements++
		c.Rows--
		c.Details = append(c.Details, Detail{"stmt", "SELECT", 1})
		m.Costs["noop"] = c
		changes := Compare(l, m)
		require.Equal(t, []Change{
			{Shape: "noop", What: "stmts", Was: 3, Is: 4},
			{Shape: "noop", What: "rows", Was: 3, Is: 2},
			{Shape: "noop", What: "stmt SELECT", Was: 0, Is: 1},
		}, changes)
		require.True(t, changes[0].Rose())
		require.False(t, changes[1].Rose())
		require.Equal(t, "noop: stmts rose from 3 to 4", changes[0].String())
	})
	t.Run("AllocationsAndWALWithinTheirSlackAreNot", func(t *testing.T) {
		t.Parallel()
		m := clone(l)
		c := m.Costs["steps3"]
		c.Allocs = 1119 * 104 / 100
		c.WALBytes = 3789 * 118 / 100
		m.Costs["steps3"] = c
		require.Empty(t, Compare(l, m))
		c.Allocs = 1119 * 106 / 100
		c.WALBytes = 3789 * 122 / 100
		m.Costs["steps3"] = c
		require.Equal(t, []string{"wal (bytes)", "allocs"}, whats(Compare(l, m)))
	})
	t.Run("WALOfAnotherPostgresIsNotCompared", func(t *testing.T) {
		t.Parallel()
		m := clone(l)
		m.Postgres = 16
		c := m.Costs["steps3"]
		c.WALBytes *= 2
		m.Costs["steps3"] = c
		require.Empty(t, Compare(l, m))
	})
	t.Run("ALockIsNotCompared", func(t *testing.T) {
		t.Parallel()
		m := clone(l)
		c := m.Costs["noop"]
		c.Details = append(c.Details, Detail{"lock", "stepgate.tenant_usage", 1})
		m.Costs["noop"] = c
		require.Empty(t, Compare(l, m))
	})
	t.Run("AShapeMissingOrNewIsAChange", func(t *testing.T) {
		t.Parallel()
		m := clone(l)
		m.Shapes = []string{"noop", "sleep"}
		m.Costs["sleep"] = Cost{}
		delete(m.Costs, "steps3")
		require.Equal(t, []string{"the shape (not measured)", "the shape (not in the file)"}, whats(Compare(l, m)))
	})
}

func clone(l Ledger) Ledger {
	m := l
	m.Costs = map[string]Cost{}
	for k, v := range l.Costs {
		v.Details = append([]Detail(nil), v.Details...)
		m.Costs[k] = v
	}
	return m
}

func whats(cs []Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.What)
	}
	return out
}
