package gateway

import (
	"fmt"
	"maps"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/gateway/api/server"
)

// operationPermissions is the permission each operation of openapi.yaml needs (its
// x-permission), by operationId. The empty permission marks the operations that take no
// user token: the health probe, and the checkpoint (authorized by its invocation token).
// An operation missing here is refused, so a new one cannot go out unguarded; a test
// keeps this map equal to the spec.
var operationPermissions = map[string]auth.Permission{
	"healthz":            "",
	"checkpoint":         "",
	"listFunctions":      auth.PermissionFunctionsRead,
	"getFunction":        auth.PermissionFunctionsRead,
	"functionStats":      auth.PermissionFunctionsRead,
	"registerFunction":   auth.PermissionFunctionsWrite,
	"deleteFunction":     auth.PermissionFunctionsWrite,
	"syncApp":            auth.PermissionFunctionsWrite,
	"listSchedules":      auth.PermissionFunctionsRead,
	"getSchedule":        auth.PermissionFunctionsRead,
	"putSchedule":        auth.PermissionFunctionsWrite,
	"deleteSchedule":     auth.PermissionFunctionsWrite,
	"startRun":           auth.PermissionRunsInvoke,
	"listRuns":           auth.PermissionRunsRead,
	"getRun":             auth.PermissionRunsRead,
	"getRunResult":       auth.PermissionRunsRead,
	"streamRuns":         auth.PermissionRunsRead,
	"cancelRun":          auth.PermissionRunsManage,
	"rerunRun":           auth.PermissionRunsInvoke,
	"sendEvent":          auth.PermissionEventsSend,
	"listEvents":         auth.PermissionRunsRead,
	"listSigningKeys":    auth.PermissionFunctionsRead,
	"rotateSigningKey":   auth.PermissionFunctionsWrite,
	"listSigningSecrets": auth.PermissionFunctionsWrite,
}

// OperationPermissions returns the permission each API operation needs, by the
// operationId of openapi.yaml; the empty permission for those that take no user token.
func OperationPermissions() map[string]auth.Permission {
	return maps.Clone(operationPermissions)
}

// handlerPermissions is operationPermissions by the names the generated strict server
// gives its middleware: the operationId with its first letter in upper case.
var handlerPermissions = func() map[string]auth.Permission {
	m := make(map[string]auth.Permission, len(operationPermissions))
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
				"this operation needs the %s permission; the token's roles (%s) do not grant it", perm, auth.RoleList(id.Roles))}
		}
		return f(c, req)
	}
}
