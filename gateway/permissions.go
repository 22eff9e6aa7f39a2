package gateway

import (
	"fmt"
	"maps"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/gateway/api/server"
)

// operationPermissions is the permission each operation of openapi.yaml needs (its
// x-permission), by operationId. The empty permission marks the operations that take no
// user token: the health probes, the checkpoint and its stream writes (authorized by
// their invocation token), and the callback token routes (authorized by the callback's
// token).
// An operation missing here is refused, so a new one cannot go out unguarded; a test
// keeps this map equal to the spec.
var operationPermissions = map[string]access.Permission{
	"healthz":            "",
	"readyz":             "",
	"checkpoint":         "",
	"checkpointStream":   "",
	"checkpointCurrent":  "",
	"resolveCallback":    "", // the token in the path is the credential
	"rejectCallback":     "",
	"resolveRunCallback": access.PermissionRunsManage,
	"rejectRunCallback":  access.PermissionRunsManage,
	"listFunctions":      access.PermissionFunctionsRead,
	"getFunction":        access.PermissionFunctionsRead,
	"functionStats":      access.PermissionFunctionsRead,
	"getUsage":           access.PermissionRunsRead,
	"getFunctionQueue":   access.PermissionFunctionsRead,
	"registerFunction":   access.PermissionFunctionsWrite,
	"deleteFunction":     access.PermissionFunctionsWrite,
	"syncApp":            access.PermissionFunctionsWrite,
	"listSchedules":      access.PermissionFunctionsRead,
	"getSchedule":        access.PermissionFunctionsRead,
	"putSchedule":        access.PermissionFunctionsWrite,
	"deleteSchedule":     access.PermissionFunctionsWrite,
	"startRun":           access.PermissionRunsInvoke,
	"cancelRuns":         access.PermissionRunsManage,
	"getOperation":       access.PermissionRunsRead,
	"listRuns":           access.PermissionRunsRead,
	"getRun":             access.PermissionRunsRead,
	"getRunResult":       access.PermissionRunsRead,
	"streamRuns":         access.PermissionRunsRead,
	"listRunValues":      access.PermissionRunsRead,
	"getRunValue":        access.PermissionRunsRead,
	"listRunStreams":     access.PermissionRunsRead,
	"readRunStream":      access.PermissionRunsRead,
	"cancelRun":          access.PermissionRunsManage,
	"rerunRun":           access.PermissionRunsInvoke,
	"sendEvent":          access.PermissionEventsSend,
	"sendMessage":        access.PermissionEventsSend,
	"sendRequest":        access.PermissionEventsSend, // a request is a message that waits for a reply
	"getRequest":         access.PermissionRunsRead,
	"listRequests":       access.PermissionRunsRead,
	"listEvents":         access.PermissionRunsRead,
	"listSigningKeys":    access.PermissionFunctionsRead,
	"rotateSigningKey":   access.PermissionFunctionsWrite,
	"listSigningSecrets": access.PermissionFunctionsWrite,

	// Its handler also checks events:send: it sends a message.
	"startRunWithMessage": access.PermissionRunsInvoke,
}

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
