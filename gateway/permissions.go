package gateway

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/gateway/api/server"
)

// operationPermissions is the permission each operation of openapi.yaml needs (its
// x-permission), by operationId, as generated from the spec (server.Permissions,
// gateway/api/permgen, which refuses an operation a user's token may call without
// one). The empty permission marks the operations that take no user token: the health
// probes, the checkpoint and its stream writes (authorized by their invocation token),
// and the callback token routes (the token in the path is the credential). An
// operation missing here is refused, and a permission that is not one of access's
// stops the process at start. Some handlers check a second permission themselves
// (startRunWithMessage also needs events:send: it sends a message).
var operationPermissions = func() map[string]access.Permission {
	m := make(map[string]access.Permission, len(server.Permissions))
	for op, p := range server.Permissions {
		if p != "" && !slices.Contains(access.Permissions(), access.Permission(p)) {
			panic(fmt.Sprintf("gateway: operation %s needs x-permission %q, which is not a permission", op, p))
		}
		m[op] = access.Permission(p)
	}
	return m
}()

// OperationPermissions returns the permission each API operation needs, by the
// operationId of openapi.yaml; the empty permission for those that take no user token.
func OperationPermissions() map[string]access.Permission {
	return maps.Clone(operationPermissions)
}

// handlerPermissions is operationPermissions by the names the generated strict server
// gives its middleware: the operationId with its first letter in upper case.
var handlerPermissions = func() map[string]access.Permission {
	m := make(map[string]access.Permission, len(operationPermissions))
	for op, p := range operationPermissions {
		m[strings.ToUpper(op[:1])+op[1:]] = p
	}
	return m
}()

// authorize is the strict-server middleware that refuses, with a 403 naming the
// permission, a caller whose roles do not grant the operation's permission.
func authorize(f server.StrictHandlerFunc, operation string) server.StrictHandlerFunc {
	perm, ok := handlerPermissions[operation]
	switch {
	case !ok:
		return func(echo.Context, any) (any, error) {
			return nil, fmt.Errorf("gateway: operation %s declares no permission; refusing it", operation)
		}
	case perm == "":
		return f
	}
	return func(c echo.Context, req any) (any, error) {
		if id := identity(c.Request().Context()); !id.Has(perm) {
			return nil, &problemError{http.StatusForbidden, fmt.Sprintf(
				"this operation needs the %s permission; the token's roles (%s) do not grant it", perm, access.RoleList(id.Roles))}
		}
		return f(c, req)
	}
}
