package journal_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/internal/wiring/pgtest"
)

// TestMayInvokeAgrees: the invoke-roles rule has a Go form (access.Identity.MayInvoke,
// used where no statement runs) and a SQL form (stepgate.may_invoke, inside the
// statements that start runs); they decide alike.
func TestMayInvokeAgrees(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	for _, config := range []string{`{}`, `{"invoke_roles":[]}`, `{"invoke_roles":["billing"]}`, `{"invoke_roles":["billing","ops"]}`, `{"invoke_roles":"billing"}`} {
		var invokeRoles []string
		var c struct {
			InvokeRoles []string `json:"invoke_roles"`
		}
		if json.Unmarshal([]byte(config), &c) == nil {
			invokeRoles = c.InvokeRoles
		}
		for _, roles := range [][]string{nil, {"developer"}, {"billing"}, {"ops", "viewer"}, {"admin"}} {
			id := access.Identity{Subject: "s", Tenant: "t", Roles: roles}
			var sql bool
			if roles == nil {
				roles = []string{}
			}
			require.NoError(t, tx.QueryRow(t.Context(), `SELECT stepgate.may_invoke($1::jsonb, $2, $3::text[])`,
				config, !id.IsAdmin(), roles).Scan(&sql))
			require.Equal(t, id.MayInvoke(invokeRoles), sql, "config %s, roles %v", config, roles)
		}
	}
}

// TestMayResumeAgrees: the resume rule has a Go form (access.Identity.MayResume) and a
// SQL form (stepgate.may_resume, inside the statements that resume waits and deliver
// messages); they decide alike, and the SQL form is never NULL.
func TestMayResumeAgrees(t *testing.T) {
	t.Parallel()
	tx := pgtest.Tx(t)
	for _, config := range []string{`{}`, `{"invoke_roles":["billing"]}`, `{"resume_roles":["hooks"]}`,
		`{"invoke_roles":["billing"],"resume_roles":[]}`, `{"invoke_roles":["billing"],"resume_roles":["hooks","ops"]}`,
		`{"invoke_roles":["billing"],"resume_roles":"hooks"}`} {
		var c struct {
			InvokeRoles []string `json:"invoke_roles"`
			ResumeRoles []string `json:"resume_roles"`
		}
		_ = json.Unmarshal([]byte(config), &c) // a list that is not one restricts, or adds, nothing
		if c.InvokeRoles == nil {
			var i struct {
				InvokeRoles []string `json:"invoke_roles"`
			}
			_ = json.Unmarshal([]byte(config), &i)
			c.InvokeRoles = i.InvokeRoles
		}
		for _, roles := range [][]string{nil, {"developer"}, {"billing"}, {"hooks"}, {"ops", "viewer"}, {"admin"}} {
			id := access.Identity{Subject: "s", Tenant: "t", Roles: roles}
			var sql *bool
			require.NoError(t, tx.QueryRow(t.Context(), `SELECT stepgate.may_resume($1::jsonb, $2::jsonb)`, config, id).Scan(&sql))
			require.NotNil(t, sql, "config %s, roles %v", config, roles)
			require.Equal(t, id.MayResume(c.InvokeRoles, c.ResumeRoles), *sql, "config %s, roles %v", config, roles)
		}
	}
	var sql *bool
	require.NoError(t, tx.QueryRow(t.Context(), `SELECT stepgate.may_resume('{"invoke_roles":["billing"]}', '{"subject":"s"}')`).Scan(&sql))
	require.False(t, *sql, "an identity with no roles list has no roles")
}
