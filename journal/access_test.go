package journal_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/internal/pgtest"
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
