package gateway

import (
	"fmt"
	"html"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v4"
	"riverqueue.com/riverui"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/invoker"
)

// The dashboard's own routes, not part of the public API (so not in openapi.yaml):
//
//	POST   /ui/session  {"token": "<JWT>"}  verifies the token and sets it as the
//	                    stepgate_session cookie (HttpOnly, SameSite=Strict, Path=/);
//	                    answers {"subject", "tenant", "roles", "river"}, river telling
//	                    whether the token may open River's UI. 401 for a bad token.
//	DELETE /ui/session  clears the cookie; 204.
//	/river/...          River's own UI (riverqueue.com/riverui), for job-level
//	                    debugging. A browser cannot add a header to the UI's own API
//	                    calls, so it is signed in by the session cookie, whose token must
//	                    grant runs:manage (or be an admin's). It shows every tenant's
//	                    jobs: River's tables are not scoped by tenant.
//
// The API itself (/v1) never reads the cookie: it takes bearer tokens only, so the
// cookie cannot be used to forge API calls from another site.
const sessionCookie = "stepgate_session"

// mountRiverUI registers /ui/session and River's UI under /river.
func (s *Server) mountRiverUI(e *echo.Echo, inv *invoker.Invoker) error {
	e.POST("/ui/session", s.createSession)
	e.DELETE("/ui/session", deleteSession)
	h, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(inv.River(), nil),
		Logger:    s.log.With("component", "riverui"),
		Prefix:    "/river",
	})
	if err != nil {
		return fmt.Errorf("gateway: river ui: %w", err)
	}
	// The handler is not started: started, it would refresh its job counts in the
	// background forever; unstarted, it counts when asked.
	ui := echo.WrapHandler(h)
	e.Any("/river", ui, s.requireRiverSession)
	e.Any("/river/*", ui, s.requireRiverSession)
	return nil
}

type sessionRequest struct {
	Token string `json:"token"`
}

type sessionInfo struct {
	Subject string   `json:"subject"`
	Tenant  string   `json:"tenant"`
	Roles   []string `json:"roles"`
	River   bool     `json:"river"` // the token may open /river
}

func (s *Server) createSession(c echo.Context) error {
	var req sessionRequest
	if err := c.Bind(&req); err != nil {
		return err
	}
	if req.Token == "" {
		return badRequest(`body must be {"token": "<JWT>"}`)
	}
	id, err := s.verifier.Verify(c.Request().Context(), req.Token)
	if err != nil {
		return err
	}
	r := c.Request()
	c.SetCookie(&http.Cookie{
		Name: sessionCookie, Value: req.Token, Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || strings.EqualFold(r.Header.Get(echo.HeaderXForwardedProto), "https"),
	})
	return c.JSON(http.StatusOK, sessionInfo{Subject: id.Subject, Tenant: id.Tenant, Roles: id.Roles, River: canManageRuns(id)})
}

func deleteSession(c echo.Context) error {
	c.SetCookie(&http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	return c.NoContent(http.StatusNoContent)
}

// requireRiverSession admits requests whose session cookie holds a valid token granting
// runs:manage. Requests that change something must also come from this origin.
func (s *Server) requireRiverSession(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		cookie, err := r.Cookie(sessionCookie)
		if err != nil || cookie.Value == "" {
			return signInFirst(c, http.StatusUnauthorized, "no dashboard session: sign in to the dashboard, then open River's UI again")
		}
		id, err := s.verifier.Verify(r.Context(), cookie.Value)
		if err != nil {
			return signInFirst(c, http.StatusUnauthorized, "the dashboard session is no longer valid ("+
				strings.TrimPrefix(err.Error(), auth.ErrUnauthorized.Error()+": ")+"): sign in again")
		}
		if !canManageRuns(id) {
			return signInFirst(c, http.StatusForbidden, "River's UI needs the runs:manage permission; the session's roles ("+
				auth.RoleList(id.Roles)+") do not grant it")
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !sameOrigin(r) {
			return &problemError{http.StatusForbidden, "cross-origin request refused"}
		}
		return next(c)
	}
}

// signInFirst answers a browser with a page pointing to the dashboard, and anything
// else with a problem.
func signInFirst(c echo.Context, status int, detail string) error {
	if strings.Contains(c.Request().Header.Get(echo.HeaderAccept), "text/html") {
		page := `<!doctype html><meta charset="utf-8"><title>stepgate: sign in</title>` +
			`<body style="font-family:system-ui,sans-serif;max-width:40em;margin:4em auto">` +
			`<h1>River's UI needs a dashboard session</h1><p>` + html.EscapeString(detail) + `</p>` +
			`<p><a href="/">Open the stepgate dashboard</a></p></body>`
		return c.HTML(status, page)
	}
	return &problemError{status, detail}
}

func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return r.Header.Get("Sec-Fetch-Site") != "cross-site"
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// canManageRuns reports whether id's roles grant runs:manage.
func canManageRuns(id auth.Identity) bool { return id.Has(auth.PermissionRunsManage) }
