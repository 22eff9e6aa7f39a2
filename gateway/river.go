package gateway

import (
	"fmt"
	"html"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/stepgate/stepgate/access"
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
//	                    debugging by the deployment's operators. It shows, pauses and
//	                    deletes every tenant's jobs (River's tables are not scoped by
//	                    tenant), so no tenant role opens it, admin included: only a token
//	                    with the operator role (Config.OperatorRole, of
//	                    Config.OperatorTenant when set). A browser cannot add a header to
//	                    the UI's own API calls, so it is signed in by the session cookie.
//
// The API itself (/v1) never reads the cookie: it takes bearer tokens only, so the
// cookie cannot be used to forge API calls from another site.
const sessionCookie = "stepgate_session"

// mountRiverUI registers /ui/session and River's UI under /river.
func (s *Server) mountRiverUI(e *echo.Echo, inv *invoker.Invoker) error {
	e.POST("/ui/session", s.createSession)
	e.DELETE("/ui/session", deleteSession)
	h, err := inv.RiverUI("/river", s.log.With("component", "riverui"))
	if err != nil {
		return fmt.Errorf("gateway: river ui: %w", err)
	}
	ui := echo.WrapHandler(h)
	e.Any("/river", ui, riverHeaders, s.requireRiverSession)
	e.Any("/river/*", ui, riverHeaders, s.requireRiverSession)
	return nil
}

// riverCSP allows River's UI its own scripts, styles and API only, and no framing.
const riverCSP = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"font-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"

// riverHeaders sets the security headers of every answer under /river.
func riverHeaders(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		h := c.Response().Header()
		h.Set("Content-Security-Policy", riverCSP)
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		return next(c)
	}
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

// createSession sets the session cookie. It takes only JSON from this origin: a form
// posted by another site can neither set a victim's session nor switch its tenant.
func (s *Server) createSession(c echo.Context) error {
	r := c.Request()
	if mt, _, _ := mime.ParseMediaType(r.Header.Get(echo.HeaderContentType)); mt != "application/json" {
		return &problemError{http.StatusUnsupportedMediaType, "a session is created with a JSON body (Content-Type: application/json)"}
	}
	if crossOrigin(r) {
		return &problemError{http.StatusForbidden, "cross-origin request refused"}
	}
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
	c.SetCookie(&http.Cookie{
		Name: sessionCookie, Value: req.Token, Path: "/",
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || strings.EqualFold(r.Header.Get(echo.HeaderXForwardedProto), "https"),
	})
	return c.JSON(http.StatusOK, sessionInfo{Subject: id.Subject, Tenant: id.Tenant, Roles: id.Roles, River: s.operates(id)})
}

func deleteSession(c echo.Context) error {
	c.SetCookie(&http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	return c.NoContent(http.StatusNoContent)
}

// requireRiverSession admits requests whose session cookie holds a valid token of an
// operator (see operates). Requests that change something (any method but GET and HEAD)
// must also prove they come from this origin (see sameOrigin); others are refused 403.
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
		if !s.operates(id) {
			return signInFirst(c, http.StatusForbidden, "River's UI shows every tenant's jobs, so it is for the deployment's operators only: "+
				"no tenant role opens it; the session's roles ("+access.RoleList(id.Roles)+") hold no operator role")
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead && !sameOrigin(r) {
			return &problemError{http.StatusForbidden, "cross-origin request refused: a write to River's UI needs an Origin of this gateway's own origin " +
				"(scheme, host and port) or Sec-Fetch-Site: same-origin"}
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

// crossOrigin reports whether r's browser headers name another origin than the
// gateway's own: an Origin whose scheme, host or port differ from ownOrigin's (or that
// is "null" or malformed), or a Sec-Fetch-Site other than same-origin (a sibling
// subdomain is same-site, not same-origin). A request with neither header is not
// cross-origin: it does not come from a browser.
func crossOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" {
		return true
	}
	origin := r.Header.Get("Origin")
	return origin != "" && !strings.EqualFold(origin, ownOrigin(r))
}

// sameOrigin reports whether r proves that it comes from the gateway's own origin: it is
// not cross-origin, and it carries an Origin or Sec-Fetch-Site: same-origin. Every
// browser sends one of them with a write, so a write with neither is refused.
func sameOrigin(r *http.Request) bool {
	return !crossOrigin(r) && (r.Header.Get("Origin") != "" || r.Header.Get("Sec-Fetch-Site") == "same-origin")
}

// ownOrigin is the gateway's origin as a browser writes it in Origin: scheme, host and
// port (the port only when not the scheme's default). The scheme is https when r came
// over TLS or through a proxy that says so (X-Forwarded-Proto: https), as for the
// session cookie's Secure flag; the host and port are r's Host.
func ownOrigin(r *http.Request) string {
	scheme, port := "http", "80"
	if r.TLS != nil || strings.EqualFold(r.Header.Get(echo.HeaderXForwardedProto), "https") {
		scheme, port = "https", "443"
	}
	host := &url.URL{Host: strings.ToLower(r.Host)}
	if p := host.Port(); p != "" && p != port {
		return scheme + "://" + host.Host
	}
	h := host.Hostname()
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	return scheme + "://" + h
}

// operates reports whether id is one of the deployment's operators: it has the
// configured operator role (of the operator tenant, when one is configured). No tenant
// role, admin included, makes an operator, and with no operator role configured nobody
// is one.
func (s *Server) operates(id auth.Identity) bool {
	return s.operatorRole != "" && slices.Contains(id.Roles, s.operatorRole) &&
		(s.operatorTenant == "" || id.Tenant == s.operatorTenant)
}
