package gateway_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/internal/wiring/stack"
)

// browser is an HTTP client with a cookie jar.
func browser(t *testing.T) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar}
}

func send(t *testing.T, c *http.Client, method, url, body string, header map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	require.NoError(t, err)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

func TestRiverUI(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	s.SyncExamples(t)
	c := s.Client(t, s.Token)
	id := startAsync(t, c, "hello", `{}`)
	awaitJobsDone(t, s, id)

	signIn := func(t *testing.T, c *http.Client, token string) (*http.Response, map[string]any) {
		t.Helper()
		resp, body := send(t, c, http.MethodPost, s.URL+"/ui/session", `{"token":"`+token+`"}`, map[string]string{"Content-Type": "application/json"})
		var out map[string]any
		require.NoError(t, json.Unmarshal([]byte(body), &out), body)
		return resp, out
	}

	t.Run("NeedsASession", func(t *testing.T) {
		t.Parallel()
		c := browser(t)
		resp, body := send(t, c, http.MethodGet, s.URL+"/river/", "", nil)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
		require.Contains(t, body, "sign in to the dashboard")
		resp, body = send(t, c, http.MethodGet, s.URL+"/river/", "", map[string]string{"Accept": "text/html"})
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.Contains(t, body, `<a href="/">`, "a browser is pointed to the dashboard")

		resp, out := signIn(t, c, "garbage")
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		require.Contains(t, out["detail"], "malformed")
		resp, _ = send(t, c, http.MethodGet, s.URL+"/river/api/states", "", nil)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	})

	t.Run("NoTenantRoleOpensIt", func(t *testing.T) {
		t.Parallel()
		for _, tok := range []string{
			s.NewToken(t, auth.Identity{Subject: "vic", Tenant: auth.DefaultTenant, Roles: []string{"viewer"}}),
			s.NewToken(t, auth.Identity{Subject: "ada", Tenant: auth.DefaultTenant, Roles: []string{"admin", "runs:manage", "operator"}}),
			s.NewToken(t, auth.Identity{Subject: "eve", Tenant: "evil", Roles: []string{"admin"}}),
		} {
			c := browser(t)
			resp, out := signIn(t, c, tok)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, false, out["river"], "the dashboard hides the link")
			for _, path := range []string{"/river/", "/river/api/states", "/river/api/jobs?state=completed"} {
				resp, body := send(t, c, http.MethodGet, s.URL+path, "", nil)
				require.Equal(t, http.StatusForbidden, resp.StatusCode, path)
				require.Contains(t, body, "for the deployment's operators only")
			}
		}
	})

	t.Run("SessionTakesJSONFromThisOriginOnly", func(t *testing.T) {
		t.Parallel()
		c := browser(t)
		resp, _ := send(t, c, http.MethodPost, s.URL+"/ui/session", "token="+s.Token, map[string]string{"Content-Type": "application/x-www-form-urlencoded"})
		require.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode)
		resp, _ = send(t, c, http.MethodPost, s.URL+"/ui/session", `{"token":"`+s.Token+`"}`,
			map[string]string{"Content-Type": "application/json", "Origin": "https://evil.example"})
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
		require.Empty(t, resp.Cookies(), "another site cannot set a session")
		u, err := url.Parse(s.URL)
		require.NoError(t, err)
		for _, header := range []map[string]string{
			{"Origin": "https://" + u.Host}, {"Origin": "http://" + u.Hostname() + ":1"}, {"Sec-Fetch-Site": "same-site"},
		} {
			header["Content-Type"] = "application/json"
			resp, _ = send(t, c, http.MethodPost, s.URL+"/ui/session", `{"token":"`+s.Token+`"}`, header)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, header)
			require.Empty(t, resp.Cookies(), "another origin cannot set a session: %v", header)
		}
	})

	t.Run("OperatorSeesRiversJobs", func(t *testing.T) {
		t.Parallel()
		c := browser(t)
		resp, out := signIn(t, c, s.Token)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, map[string]any{"subject": "tester", "tenant": auth.DefaultTenant, "roles": []any{"admin", stack.OperatorRole}, "river": true}, out)
		cookies := resp.Cookies()
		require.Len(t, cookies, 1)
		ck := cookies[0]
		require.Equal(t, "stepgate_session", ck.Name)
		require.True(t, ck.HttpOnly)
		require.Equal(t, http.SameSiteStrictMode, ck.SameSite)
		require.Equal(t, "/", ck.Path)

		resp, body := send(t, c, http.MethodGet, s.URL+"/river/", "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, body, "<title>River</title>")
		require.Contains(t, resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'none'")
		require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))
		require.Contains(t, body, `/river/assets/`, "assets are served under the prefix, from the binary")

		resp, body = send(t, c, http.MethodGet, s.URL+"/river/api/jobs?state=completed&limit=20", "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Contains(t, body, "stepgate.invoke")
		resp, body = send(t, c, http.MethodGet, s.URL+"/river/api/states", "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		require.Contains(t, body, `"completed"`)

		resp, body = send(t, c, http.MethodPost, s.URL+"/river/api/jobs/retry", `{"ids":["1"]}`,
			map[string]string{"Origin": "https://evil.example", "Content-Type": "application/json"})
		require.Equal(t, http.StatusForbidden, resp.StatusCode, body)
		require.Contains(t, body, "cross-origin")

		resp, _ = send(t, c, http.MethodDelete, s.URL+"/ui/session", "", nil)
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
		resp, _ = send(t, c, http.MethodGet, s.URL+"/river/api/states", "", nil)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "signed out")
	})

	// Writes to River's UI prove they come from the gateway's own origin: the whole
	// origin (scheme, host and port) in Origin, or Sec-Fetch-Site: same-origin when the
	// browser sends no Origin.
	t.Run("WritesComeFromThisOriginOnly", func(t *testing.T) {
		t.Parallel()
		c := browser(t)
		resp, _ := signIn(t, c, s.Token)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		resp, body := send(t, c, http.MethodGet, s.URL+"/river/api/jobs?state=completed&limit=1", "", nil)
		require.Equal(t, http.StatusOK, resp.StatusCode, body)
		var jobs struct {
			Data []struct {
				ID json.Number `json:"id"`
			} `json:"data"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &jobs), body)
		require.NotEmpty(t, jobs.Data, body)
		// Cancelling a completed job changes nothing, and answers 200.
		cancel := `{"ids":["` + jobs.Data[0].ID.String() + `"]}`
		u, err := url.Parse(s.URL)
		require.NoError(t, err)
		require.Equal(t, "http", u.Scheme)

		for name, header := range map[string]map[string]string{
			"NoOriginSameSite":    {"Sec-Fetch-Site": "same-site"},
			"NoOriginCrossSite":   {"Sec-Fetch-Site": "cross-site"},
			"NoOriginNoFetchSite": {},
			"HTTPSOrigin":         {"Origin": "https://" + u.Host},
			"AnotherPort":         {"Origin": "http://" + u.Hostname() + ":1"},
			"NullOrigin":          {"Origin": "null"},
			"SameOriginSameSite":  {"Origin": s.URL, "Sec-Fetch-Site": "same-site"},
			"HTTPOriginBehindTLS": {"Origin": s.URL, "X-Forwarded-Proto": "https"},
		} {
			header["Content-Type"] = "application/json"
			resp, body := send(t, c, http.MethodPost, s.URL+"/river/api/jobs/cancel", cancel, header)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s: %s", name, body)
			require.Contains(t, body, "cross-origin request refused", name)
		}
		for name, header := range map[string]map[string]string{
			"SameOrigin":              {"Origin": s.URL},
			"SameOriginFetchSite":     {"Origin": s.URL, "Sec-Fetch-Site": "same-origin"},
			"NoOriginSameOriginFetch": {"Sec-Fetch-Site": "same-origin"},
			"HTTPSOriginBehindTLS":    {"Origin": "https://" + u.Host, "X-Forwarded-Proto": "https"},
		} {
			header["Content-Type"] = "application/json"
			resp, body := send(t, c, http.MethodPost, s.URL+"/river/api/jobs/cancel", cancel, header)
			require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", name, body)
		}
	})

	t.Run("APIIgnoresTheCookie", func(t *testing.T) {
		t.Parallel()
		c := browser(t)
		resp, _ := signIn(t, c, s.Token)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		resp, _ = send(t, c, http.MethodGet, s.URL+"/v1/runs", "", nil)
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	})
}
