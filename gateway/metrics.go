package gateway

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/auth"
)

// The gateway's metrics route, not part of the public API (so not in openapi.yaml: it
// answers Prometheus' text exposition, not JSON):
//
//	GET /metrics  Prometheus exposition of Config.Metrics. The metrics are the whole
//	              deployment's (every tenant's functions, queue depth, River's jobs),
//	              so only the deployment's operators may read them: a bearer token with
//	              the operator role (Config.OperatorRole, of Config.OperatorTenant when
//	              set). No token or a bad one: 401; another token: 403.
//
// A scraper that cannot hold a token is served by a listener of its own
// (STEPGATE_METRICS_ADDR, see gatewayproc), on a network only it reaches.
func (s *Server) mountMetrics(e *echo.Echo, metrics http.Handler) {
	e.GET("/metrics", echo.WrapHandler(metrics), s.requireOperator)
}

// requireOperator admits a request whose bearer token is valid and an operator's.
func (s *Server) requireOperator(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		token, err := auth.BearerToken(c.Request().Header.Get(echo.HeaderAuthorization))
		if err != nil {
			return err
		}
		id, _, err := s.verifier.Check(c.Request().Context(), token)
		if err != nil {
			return err
		}
		if !s.operates(id) {
			return &problemError{http.StatusForbidden, "the metrics show every tenant's functions and queues, so they are for the deployment's operators only: " +
				"no tenant role grants them; the token's roles (" + access.RoleList(id.Roles) + ") hold no operator role"}
		}
		return next(c)
	}
}
