package journal_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
)

// runRowTables are the tables of a run's rows keyed by (tenant, run_id, ...) (migration
// 0050; journal_entry and attempt_failure since 0049).
var runRowTables = map[string]bool{"callback": true, "message": true, "stream": true, "stream_chunk": true, "run_wait": true}

// byTokenAlone are the statements that find a run's row without its tenant: a callback's
// URL carries its token and no tenant (docs/schema.md#ready-to-shard-by-tenant).
var byTokenAlone = map[string]bool{"CallbackByToken": true}

// TestRunRowsAreFoundByTheirTenant: every statement of this package that reads, changes
// or deletes rows of callback, message, stream, stream_chunk or run_wait finds them
// through an index whose condition holds the tenant (the key's leading column), so a
// database sharded by tenant answers it on the run's shard. Each statement's generic
// plan is read with sequential scans priced out: one left means no index serves it.
func TestRunRowsAreFoundByTheirTenant(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	tx := pgtest.Tx(t)
	_, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off; SET LOCAL plan_cache_mode = force_generic_plan`)
	require.NoError(t, err)

	files, err := filepath.Glob("internal/dbsqlc/*.sql.go")
	require.NoError(t, err)
	checked := 0
	for _, f := range files {
		text, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range generatedStatement.FindAllStringSubmatch(string(text), -1) {
			name, sql := m[1], m[2]
			if !touchesRunRows.MatchString(sql) || byTokenAlone[name] {
				continue
			}
			checked++
			sd, err := tx.Conn().Prepare(ctx, name, sql)
			require.NoError(t, err, name)
			args := strings.TrimSuffix(strings.Repeat("NULL, ", len(sd.ParamOIDs)), ", ")
			stmt := "EXPLAIN (FORMAT JSON) EXECUTE " + pgx.Identifier{name}.Sanitize()
			if args != "" {
				stmt += "(" + args + ")"
			}
			var plan []struct{ Plan planNode }
			require.NoError(t, tx.QueryRow(ctx, stmt).Scan(&plan), name)
			for _, p := range scansOfRunRows(plan[0].Plan) {
				t.Errorf("%s: %s", name, p)
			}
		}
	}
	require.Greater(t, checked, 20)
}

var (
	generatedStatement = regexp.MustCompile("(?s)const (\\w+) = `-- name: \\w+ :\\w+\n(.*?)`")
	touchesRunRows     = regexp.MustCompile(`stepgate\.(callback|message|stream|stream_chunk|run_wait)\b`)
)

// planNode is a node of EXPLAIN (FORMAT JSON)'s plan.
type planNode struct {
	NodeType     string     `json:"Node Type"`
	RelationName string     `json:"Relation Name"`
	IndexName    string     `json:"Index Name"`
	IndexCond    string     `json:"Index Cond"`
	RecheckCond  string     `json:"Recheck Cond"`
	Plans        []planNode `json:"Plans"`
}

// scansOfRunRows describes the scans of runRowTables under n whose index condition does
// not hold the tenant.
func scansOfRunRows(n planNode) []string {
	var bad []string
	if runRowTables[n.RelationName] && n.NodeType != "ModifyTable" {
		cond := n.IndexCond + n.RecheckCond
		if !strings.Contains(cond, "tenant = ") {
			b, _ := json.Marshal(n)
			bad = append(bad, fmt.Sprintf("%s on %s (%s) without the tenant in its index condition: %s",
				n.NodeType, n.RelationName, n.IndexName, b))
		}
	}
	for _, c := range n.Plans {
		bad = append(bad, scansOfRunRows(c)...)
	}
	return bad
}
