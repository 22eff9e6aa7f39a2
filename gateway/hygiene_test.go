package gateway_test

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/internal/wiring/stack"
)

// specParam is a path or query parameter of an openapi.yaml operation.
type specParam struct {
	Ref  string `yaml:"$ref"`
	Name string `yaml:"name"`
	In   string `yaml:"in"`
}

// paramOperation is an operation of openapi.yaml with its parameters, the path's and
// its own, references resolved.
type paramOperation struct {
	Method, Path string
	Params       []specParam
}

// readParamOperations returns every /v1 operation of openapi.yaml that has a path or
// query parameter.
func readParamOperations(t *testing.T) []paramOperation {
	t.Helper()
	b, err := os.ReadFile("../openapi.yaml")
	require.NoError(t, err)
	var doc struct {
		Paths      map[string]map[string]yaml.Node `yaml:"paths"`
		Components struct {
			Parameters map[string]specParam `yaml:"parameters"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(b, &doc))
	resolve := func(ps []specParam) []specParam {
		var out []specParam
		for _, p := range ps {
			if p.Ref != "" {
				ref, ok := doc.Components.Parameters[strings.TrimPrefix(p.Ref, "#/components/parameters/")]
				require.True(t, ok, p.Ref)
				p = ref
			}
			if p.In == "path" || p.In == "query" {
				out = append(out, p)
			}
		}
		return out
	}
	var ops []paramOperation
	for path, item := range doc.Paths {
		if !strings.HasPrefix(path, "/v1/") {
			continue
		}
		var shared []specParam
		if node, ok := item["parameters"]; ok {
			require.NoError(t, node.Decode(&shared))
		}
		for method, node := range item {
			switch method {
			case "get", "put", "post", "delete", "patch":
			default:
				continue
			}
			var op struct {
				Parameters []specParam `yaml:"parameters"`
			}
			require.NoError(t, node.Decode(&op))
			params := resolve(append(append([]specParam(nil), shared...), op.Parameters...))
			if len(params) > 0 {
				ops = append(ops, paramOperation{Method: strings.ToUpper(method), Path: path, Params: params})
			}
		}
	}
	return ops
}

// TestParametersMustBeText: a NUL byte or invalid UTF-8 (%00, %ff) in any path or query
// parameter of any /v1 operation is a 400 whose detail names the parameter, never a
// 500, and the gateway logs no error for it. The caller is of a second tenant, with no
// runs or functions: the check comes before any lookup.
func TestParametersMustBeText(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	s := stack.Start(t, stack.Options{Logs: &logs})
	token := s.NewToken(t, auth.Identity{Subject: "mallory", Tenant: "t2", Roles: []string{"admin"}})
	ops := readParamOperations(t)
	require.GreaterOrEqual(t, len(ops), 10, "the spec's operations with parameters")

	for _, op := range ops {
		for _, p := range op.Params {
			for _, bad := range []string{"%00", "%ff"} {
				path := op.Path
				for _, other := range op.Params {
					if other.In == "path" {
						v := "x"
						if other == p {
							v = bad
						}
						path = strings.Replace(path, "{"+other.Name+"}", v, 1)
					}
				}
				if p.In == "query" {
					path += "?" + url.QueryEscape(p.Name) + "=" + bad
				}
				what := op.Method + " " + path
				code, body := rawRequest(t, op.Method, s.URL+path, token, "application/json", strings.NewReader("{}"))
				if assert.Equal(t, http.StatusBadRequest, code, "%s: %v", what, body) {
					assert.Contains(t, body["detail"], p.In+` parameter "`+p.Name+`"`, what)
				}
			}
		}
	}
	assert.NotContains(t, logs.String(), `"level":"ERROR"`)
}

// TestHealthHidesDatabaseErrors: with the database cut, /healthz and /readyz (which
// take no token) answer 503 "database unreachable" without the database's error (its
// address, its user), which goes to the log instead.
func TestHealthHidesDatabaseErrors(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	proxy := pgtest.NewProxy(t, pgtest.DBURL(t))
	s := stack.Start(t, stack.Options{DatabaseURL: proxy.URL, Logs: &logs})
	u, err := url.Parse(proxy.URL)
	require.NoError(t, err)
	proxy.Cut()

	for _, path := range []string{"/healthz", "/readyz"} {
		var body string
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			resp, err := http.Get(s.URL + path)
			if !assert.NoError(ct, err) {
				return
			}
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			assert.NoError(ct, err)
			body = string(raw)
			assert.Equal(ct, http.StatusServiceUnavailable, resp.StatusCode)
		}, 30*time.Second, 20*time.Millisecond, path)
		require.Contains(t, body, "database unreachable", path)
		for _, raw := range []string{u.Port(), u.User.Username(), "dial", "connect"} {
			require.NotContains(t, body, raw, path)
		}
	}
	// The probes log the database's error at warn: at first the cut connections' EOF,
	// then, once they dial again, the address they could not reach.
	require.Contains(t, logs.String(), "the database does not answer", "the probes log that the database does not answer")
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), u.Port()) }, 30*time.Second, 20*time.Millisecond,
		"the log holds the database's error, with its address")
}
