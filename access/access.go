// Package access is who a caller is and what they may do: the Identity taken from a
// verified token, the permissions of the API's operations and the roles that grant them.
// It is the one definition of both, shared by the token verifier (auth), the journal
// (a run's identity), the API's types and the gateway's checks.
package access

import (
	"encoding/json"
	"slices"
	"strings"
)

// Identity is who is calling, or who started a run: taken from a verified token, never
// the token itself.
type Identity struct {
	Subject string         `json:"subject"`
	Tenant  string         `json:"tenant"`
	Roles   []string       `json:"roles"`
	Claims  map[string]any `json:"claims,omitempty"`
}

// MarshalJSON writes no roles as [], not null: an identity always has a list, in the API
// and the protocol as in storage.
func (id Identity) MarshalJSON() ([]byte, error) {
	type plain Identity
	if id.Roles == nil {
		id.Roles = []string{}
	}
	return json.Marshal(plain(id))
}

// Permission is what an API operation needs; a token's roles grant permissions.
type Permission string

// The permissions; openapi.yaml states which one each operation needs (x-permission).
const (
	PermissionFunctionsWrite Permission = "functions:write" // register, delete, sync apps
	PermissionFunctionsRead  Permission = "functions:read"
	PermissionRunsInvoke     Permission = "runs:invoke"
	PermissionRunsRead       Permission = "runs:read"
	PermissionRunsManage     Permission = "runs:manage" // cancel, rerun
	PermissionEventsSend     Permission = "events:send"
)

// Permissions lists every permission.
func Permissions() []Permission {
	return []Permission{
		PermissionFunctionsRead, PermissionFunctionsWrite, PermissionRunsInvoke,
		PermissionRunsRead, PermissionRunsManage, PermissionEventsSend,
	}
}

// RoleAdmin has every permission and may invoke every function, whatever its
// invoke_roles.
const RoleAdmin = "admin"

// rolePermissions is the role table of openapi.yaml (info.description) and docs/auth.md;
// a test keeps them equal.
var rolePermissions = map[string][]Permission{
	RoleAdmin: Permissions(),
	"developer": {PermissionFunctionsRead, PermissionFunctionsWrite, PermissionRunsInvoke,
		PermissionRunsRead, PermissionRunsManage, PermissionEventsSend},
	"operator": {PermissionFunctionsRead, PermissionRunsRead, PermissionRunsManage},
	"invoker":  {PermissionFunctionsRead, PermissionRunsInvoke, PermissionRunsRead, PermissionEventsSend},
	"viewer":   {PermissionFunctionsRead, PermissionRunsRead},
}

// Roles returns the named roles and the permissions each grants. Besides these, a role
// spelled like a permission ("runs:invoke") grants that permission.
func Roles() map[string][]Permission {
	m := make(map[string][]Permission, len(rolePermissions))
	for r, ps := range rolePermissions {
		m[r] = slices.Clone(ps)
	}
	return m
}

// RolePermissions returns the permissions role grants, none for an unknown role.
func RolePermissions(role string) []Permission {
	if ps, ok := rolePermissions[role]; ok {
		return slices.Clone(ps)
	}
	if slices.Contains(Permissions(), Permission(role)) {
		return []Permission{Permission(role)}
	}
	return nil
}

// Has reports whether one of id's roles grants p.
func (id Identity) Has(p Permission) bool {
	for _, r := range id.Roles {
		if r == string(p) || slices.Contains(rolePermissions[r], p) {
			return true
		}
	}
	return false
}

// IsAdmin reports whether id has the admin role.
func (id Identity) IsAdmin() bool { return slices.Contains(id.Roles, RoleAdmin) }

// MayInvoke reports whether id may start runs of a function whose config names
// invokeRoles: always when the list is empty, else when id is an admin or has one of
// them. It does not check [PermissionRunsInvoke], which is needed besides.
func (id Identity) MayInvoke(invokeRoles []string) bool {
	if len(invokeRoles) == 0 || id.IsAdmin() {
		return true
	}
	return slices.ContainsFunc(id.Roles, func(r string) bool { return slices.Contains(invokeRoles, r) })
}

// MayResume reports whether id may resume the waits of a run of a function whose config
// names invokeRoles and resumeRoles, by an event (wait_event, an alternative of a
// wait_any) or a message (receive): when id may invoke the function ([MayInvoke]), or
// has one of resumeRoles. resumeRoles add resumers; they never restrict: a function
// without invoke_roles is resumed by anyone of its tenant, as it is started by anyone.
func (id Identity) MayResume(invokeRoles, resumeRoles []string) bool {
	return id.MayInvoke(invokeRoles) ||
		slices.ContainsFunc(id.Roles, func(r string) bool { return slices.Contains(resumeRoles, r) })
}

// RoleList writes roles for a message: "viewer, runs:read", or "none".
func RoleList(roles []string) string {
	if len(roles) == 0 {
		return "none"
	}
	return strings.Join(roles, ", ")
}
