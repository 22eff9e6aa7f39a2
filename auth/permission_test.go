package auth_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
)

func TestPermissions(t *testing.T) {
	t.Parallel()
	all := auth.Permissions()
	for _, tc := range []struct {
		roles []string
		want  []auth.Permission
	}{
		{nil, nil},
		{[]string{"unknown"}, nil},
		{[]string{"admin"}, all},
		{[]string{"developer"}, all},
		{[]string{"operator"}, []auth.Permission{auth.PermissionFunctionsRead, auth.PermissionRunsRead, auth.PermissionRunsManage}},
		{[]string{"invoker"}, []auth.Permission{auth.PermissionFunctionsRead, auth.PermissionRunsInvoke, auth.PermissionRunsRead, auth.PermissionEventsSend}},
		{[]string{"viewer"}, []auth.Permission{auth.PermissionFunctionsRead, auth.PermissionRunsRead}},
		{[]string{"runs:invoke"}, []auth.Permission{auth.PermissionRunsInvoke}},
		{[]string{"viewer", "runs:manage"}, []auth.Permission{auth.PermissionFunctionsRead, auth.PermissionRunsRead, auth.PermissionRunsManage}},
		{[]string{"Admin", "RUNS:READ"}, nil}, // roles are case-sensitive
	} {
		id := auth.Identity{Roles: tc.roles}
		var got []auth.Permission
		for _, p := range all {
			if id.Has(p) {
				got = append(got, p)
			}
		}
		require.ElementsMatch(t, tc.want, got, "roles %v", tc.roles)
	}
	require.Equal(t, []auth.Permission{auth.PermissionRunsRead}, auth.RolePermissions("runs:read"))
	require.Nil(t, auth.RolePermissions("root"))
}

func TestMayInvoke(t *testing.T) {
	t.Parallel()
	billing := []string{"billing", "finance"}
	require.True(t, auth.Identity{Roles: []string{"invoker"}}.MayInvoke(nil))
	require.True(t, auth.Identity{Roles: []string{"invoker", "finance"}}.MayInvoke(billing))
	require.True(t, auth.Identity{Roles: []string{"admin"}}.MayInvoke(billing))
	require.False(t, auth.Identity{Roles: []string{"developer"}}.MayInvoke(billing))
	require.False(t, auth.Identity{}.MayInvoke(billing))
	require.Equal(t, "none", auth.RoleList(nil))
	require.Equal(t, "viewer, x", auth.RoleList([]string{"viewer", "x"}))
}
