package access_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/access"
)

func TestPermissions(t *testing.T) {
	t.Parallel()
	all := access.Permissions()
	for _, tc := range []struct {
		roles []string
		want  []access.Permission
	}{
		{nil, nil},
		{[]string{"unknown"}, nil},
		{[]string{"admin"}, all},
		{[]string{"developer"}, all},
		{[]string{"operator"}, []access.Permission{access.PermissionFunctionsRead, access.PermissionRunsRead, access.PermissionRunsManage}},
		{[]string{"invoker"}, []access.Permission{access.PermissionFunctionsRead, access.PermissionRunsInvoke, access.PermissionRunsRead, access.PermissionEventsSend}},
		{[]string{"viewer"}, []access.Permission{access.PermissionFunctionsRead, access.PermissionRunsRead}},
		{[]string{"runs:invoke"}, []access.Permission{access.PermissionRunsInvoke}},
		{[]string{"viewer", "runs:manage"}, []access.Permission{access.PermissionFunctionsRead, access.PermissionRunsRead, access.PermissionRunsManage}},
		{[]string{"Admin", "RUNS:READ"}, nil}, // roles are case-sensitive
	} {
		id := access.Identity{Roles: tc.roles}
		var got []access.Permission
		for _, p := range all {
			if id.Has(p) {
				got = append(got, p)
			}
		}
		require.ElementsMatch(t, tc.want, got, "roles %v", tc.roles)
	}
	require.Equal(t, []access.Permission{access.PermissionRunsRead}, access.RolePermissions("runs:read"))
	require.Nil(t, access.RolePermissions("root"))
}

func TestMayInvoke(t *testing.T) {
	t.Parallel()
	billing := []string{"billing", "finance"}
	require.True(t, access.Identity{Roles: []string{"invoker"}}.MayInvoke(nil))
	require.True(t, access.Identity{Roles: []string{"invoker", "finance"}}.MayInvoke(billing))
	require.True(t, access.Identity{Roles: []string{"admin"}}.MayInvoke(billing))
	require.False(t, access.Identity{Roles: []string{"developer"}}.MayInvoke(billing))
	require.False(t, access.Identity{}.MayInvoke(billing))
	require.Equal(t, "none", access.RoleList(nil))
	require.Equal(t, "viewer, x", access.RoleList([]string{"viewer", "x"}))
}
