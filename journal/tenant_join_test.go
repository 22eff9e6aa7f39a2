package journal_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestJoinsMatchTheTenant: every statement of queries/*.sql, and every function of the
// schema (migrations/schema.sql), that joins two tables holding a tenant column, or a
// table and a CTE drawn from one, also equates their tenants, so that a database
// sharded by tenant answers it within one shard (docs/schema.md#ready-to-shard-by-tenant).
//
// The check reads the SQL text, not a parse tree (see crossTenantJoins): it finds
// the joins written as an equality of two aliases' columns (a.x = b.y, in ON, WHERE or
// USING (…)), and an equality of tenants written directly (a.tenant = b.tenant) or
// through a shared term (a.tenant = @tenant and b.tenant = @tenant, or another
// alias's tenant). Its limits: a join by IN (subquery), by = ANY, or through a
// function's argument (NEW.parent_id) is not seen; an alias reused in one statement
// for two tables counts as both; a CTE counts as the first table its body names.
// TestCrossTenantJoinsAreFound shows what it catches.
func TestJoinsMatchTheTenant(t *testing.T) {
	t.Parallel()
	schema, err := os.ReadFile("../migrations/schema.sql")
	require.NoError(t, err)
	tables := tablesWithTenant(string(schema))
	require.Contains(t, tables, "journal_entry")
	require.Contains(t, tables, "attempt_failure")
	require.Contains(t, tables, "run")

	statements := map[string]string{}
	files, err := filepath.Glob("queries/*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		text, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, part := range strings.Split(string(text), "-- name: ")[1:] {
			name, _, _ := strings.Cut(part, " ")
			statements[filepath.Base(f)+" "+name] = part
		}
	}
	for _, m := range schemaFunction.FindAllStringSubmatch(string(schema), -1) {
		statements["function "+m[1]] = m[2]
	}
	require.Greater(t, len(statements), 100)
	for name, sql := range statements {
		for _, p := range crossTenantJoins(sql, tables) {
			t.Errorf("%s: %s", name, p)
		}
	}
}

// TestCrossTenantJoinsAreFound: crossTenantJoins flags the joins without the tenant's
// equality, as written in this package's statements before their tables were keyed by
// tenant, and passes them with it.
func TestCrossTenantJoinsAreFound(t *testing.T) {
	t.Parallel()
	tables := []string{"run", "journal_entry", "attempt_failure", "run_wait"}
	for _, sql := range []string{
		`SELECT e.seq FROM stepgate.journal_entry e JOIN stepgate.run r ON r.id = e.run_id AND r.tenant = @tenant`,
		`SELECT 1 FROM stepgate.attempt_failure f WHERE NOT EXISTS (
			SELECT 1 FROM stepgate.journal_entry e WHERE e.run_id = f.run_id AND e.seq = f.seq)`,
		`SELECT (SELECT max(e.seq) FROM stepgate.journal_entry e WHERE e.run_id = r.id) FROM stepgate.run r`,
		`WITH u AS (UPDATE stepgate.run r SET x = 1 RETURNING r.id, r.tenant)
		 DELETE FROM stepgate.run_wait w USING u WHERE w.run_id = u.id`,
		`WITH picked AS (SELECT x.id FROM stepgate.run x) SELECT 1 FROM picked p, LATERAL (
			SELECT max(e.seq) FROM stepgate.journal_entry e WHERE e.run_id = p.id) j`,
		`SELECT 1 FROM stepgate.run r JOIN stepgate.run_wait USING (run_id)`,
		`WITH RECURSIVE tree (id) AS (SELECT r.id FROM stepgate.run r
			UNION ALL SELECT r.id FROM tree t JOIN stepgate.run r ON r.parent_id = t.id) SELECT id FROM tree`,
	} {
		require.NotEmpty(t, crossTenantJoins(sql, tables), sql)
	}
	for _, sql := range []string{
		`SELECT e.seq FROM stepgate.journal_entry e JOIN stepgate.run r ON r.id = e.run_id AND r.tenant = e.tenant`,
		`SELECT e.seq FROM stepgate.journal_entry e JOIN stepgate.run r ON r.id = e.run_id
		 WHERE r.tenant = sqlc.arg(tenant) AND e.tenant = sqlc.arg(tenant)`,
		`SELECT 1 FROM stepgate.attempt_failure f WHERE NOT EXISTS (
			SELECT 1 FROM stepgate.journal_entry e WHERE e.tenant = f.tenant AND e.run_id = f.run_id AND e.seq = f.seq)`,
		`WITH u AS (UPDATE stepgate.run r SET x = 1 RETURNING r.id, r.tenant)
		 DELETE FROM stepgate.run_wait w USING u WHERE w.tenant = u.tenant AND w.run_id = u.id`,
		`SELECT 1 FROM stepgate.run r JOIN stepgate.run_wait USING (tenant, run_id)`,
		`SELECT 1 FROM stepgate.journal_entry e WHERE e.run_id = @run_id AND e.seq = @seq`,
	} {
		require.Empty(t, crossTenantJoins(sql, tables), sql)
	}
}

var (
	schemaTable    = regexp.MustCompile(`(?s)CREATE TABLE stepgate\.(\w+) \((.*?)\n\);`)
	schemaFunction = regexp.MustCompile(`(?s)CREATE FUNCTION stepgate\.(\w+)\(.*?AS \$\$(.*?)\$\$;`)
	sqlComment     = regexp.MustCompile(`--[^\n]*`)
	// A table of the schema, then perhaps its alias ("stepgate.run r", "stepgate.run AS r").
	tableRef = regexp.MustCompile(`(?i)\bstepgate\.(\w+)(\s*\()?(?:\s+(?:AS\s+)?(\w+))?`)
	// A CTE: its name (and perhaps its columns), up to the parenthesis that opens its body.
	cteStart = regexp.MustCompile(`(?i)\b(\w+)\s*(?:\([\w\s,]*\))?\s+AS\s+(?:NOT\s+)?(?:MATERIALIZED\s+)?\(`)
	// A relation in a FROM list, a JOIN or a USING, perhaps with an alias.
	relationRef = regexp.MustCompile(`(?i)(?:\bFROM|\bJOIN|\bUSING|,)\s+(\w+)(?:\s+(?:AS\s+)?(\w+))?`)
	// a.x = b.y, neither side a function call.
	columnEquality = regexp.MustCompile(`\b(\w+)\.(\w+)\s*=\s*(\w+)\.(\w+)\b(\s*\()?`)
	// a.tenant = term, or term = a.tenant.
	tenantEquality = regexp.MustCompile(`\b(\w+)\.tenant\s*=\s*(@\w+|sqlc\.n?arg\(\w+\)|\$\d+|\w+\.\w+)|(@\w+|sqlc\.n?arg\(\w+\)|\$\d+|\w+\.\w+)\s*=\s*(\w+)\.tenant\b`)
	joinUsing      = regexp.MustCompile(`(?i)\bJOIN\s+stepgate\.(\w+)(?:\s+(?:AS\s+)?\w+)?\s+USING\s*\(([^)]*)\)`)
)

// sqlWords are the words that may follow a table's name and are not its alias.
var sqlWords = map[string]bool{}

func init() {
	for _, w := range strings.Fields(`where on set using join left right inner full cross natural lateral
		values select for order group limit returning as union default when then and or
		on conflict do nothing update delete insert into from with not exists is null
		window having offset fetch except intersect`) {
		sqlWords[w] = true
	}
}

// tablesWithTenant returns the tables of schema (a pg_dump) that have a tenant column.
func tablesWithTenant(schema string) []string {
	var out []string
	for _, m := range schemaTable.FindAllStringSubmatch(schema, -1) {
		if regexp.MustCompile(`(?m)^\s+tenant text`).MatchString(m[2]) {
			out = append(out, m[1])
		}
	}
	return out
}

// crossTenantJoins returns, for the SQL text sql, the joins of relations drawn from
// tables (which hold a tenant column) that do not equate their tenants.
func crossTenantJoins(sql string, tables []string) []string {
	sql = sqlComment.ReplaceAllString(sql, "")
	// alias (or bare table or CTE name) -> whether it stands for a tenant table.
	tenantAlias := map[string]bool{}
	for _, m := range tableRef.FindAllStringSubmatch(sql, -1) {
		if m[2] != "" || !slices.Contains(tables, m[1]) {
			continue // a function's call, or a table without a tenant
		}
		tenantAlias[m[1]] = true
		if alias := strings.ToLower(m[3]); alias != "" && !sqlWords[alias] {
			tenantAlias[m[3]] = true
		}
	}
	// A CTE stands for the first table its body names.
	for _, loc := range cteStart.FindAllStringSubmatchIndex(sql, -1) {
		name := sql[loc[2]:loc[3]]
		body := balanced(sql[loc[1]-1:])
		if m := tableRef.FindStringSubmatch(body); m != nil && m[2] == "" && slices.Contains(tables, m[1]) {
			tenantAlias[name] = true
		}
	}
	for _, m := range relationRef.FindAllStringSubmatch(sql, -1) {
		if tenantAlias[m[1]] && m[2] != "" && !sqlWords[strings.ToLower(m[2])] {
			tenantAlias[m[2]] = true
		}
	}

	// The tenants equated, directly or through a shared term: a union-find.
	parent := map[string]string{}
	var find func(string) string
	find = func(x string) string {
		if p, ok := parent[x]; ok && p != x {
			r := find(p)
			parent[x] = r
			return r
		}
		return x
	}
	union := func(a, b string) { parent[find(a)] = find(b) }
	for _, m := range tenantEquality.FindAllStringSubmatch(sql, -1) {
		if m[1] != "" {
			union(m[1]+".tenant", m[2])
		} else {
			union(m[4]+".tenant", m[3])
		}
	}

	var problems []string
	for _, m := range columnEquality.FindAllStringSubmatch(sql, -1) {
		a, b := m[1], m[3]
		if m[5] != "" || a == b || !tenantAlias[a] || !tenantAlias[b] || (m[2] == "tenant" && m[4] == "tenant") {
			continue
		}
		if find(a+".tenant") != find(b+".tenant") {
			problems = append(problems, "joins "+a+" and "+b+" by "+strings.TrimSpace(m[0])+" without "+a+".tenant = "+b+".tenant")
		}
	}
	for _, m := range joinUsing.FindAllStringSubmatch(sql, -1) {
		if !slices.Contains(tables, m[1]) {
			continue
		}
		cols := strings.Split(m[2], ",")
		for i := range cols {
			cols[i] = strings.TrimSpace(cols[i])
		}
		if !slices.Contains(cols, "tenant") {
			problems = append(problems, "joins "+m[1]+" USING ("+m[2]+") without tenant")
		}
	}
	return problems
}

// balanced returns s, which starts with "(", up to its matching ")".
func balanced(s string) string {
	depth := 0
	for i, c := range s {
		switch c {
		case '(':
			depth++
		case ')':
			depth--
			if depth == 0 {
				return s[:i+1]
			}
		}
	}
	return s
}
