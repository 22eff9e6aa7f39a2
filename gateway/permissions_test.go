package gateway_test

import (
	"cmp"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/gateway"
	"github.com/stepgate/stepgate/gateway/api/server"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// specOperation is one operation of openapi.yaml.
type specOperation struct {
	Method, Path string
	ID           string `yaml:"operationId"`
	Permission   string `yaml:"x-permission"`
	RequestBody  *struct {
		Content map[string]any `yaml:"content"`
	} `yaml:"requestBody"`
}

type spec struct {
	Description string
	Operations  []specOperation
}

func readSpec(t *testing.T) spec {
	t.Helper()
	b, err := os.ReadFile("../openapi.yaml")
	require.NoError(t, err)
	var doc struct {
		Info struct {
			Description string `yaml:"description"`
		} `yaml:"info"`
		Paths map[string]map[string]yaml.Node `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(b, &doc))
	s := spec{Description: doc.Info.Description}
	for path, item := range doc.Paths {
		for method, node := range item {
			switch method {
			case "get", "put", "post", "delete", "patch", "head", "options":
			default:
				continue // parameters, summary
			}
			op := specOperation{Method: strings.ToUpper(method), Path: path}
			require.NoError(t, node.Decode(&op))
			s.Operations = append(s.Operations, op)
		}
	}
	slices.SortFunc(s.Operations, func(a, b specOperation) int { return strings.Compare(a.ID, b.ID) })
	require.NotEmpty(t, s.Operations)
	return s
}

// TestPermissionsMatchTheSpec keeps the gateway's permissions equal to what
// openapi.yaml documents: each operation's x-permission, and the role table.
func TestPermissionsMatchTheSpec(t *testing.T) {
	t.Parallel()
	s := readSpec(t)

	t.Run("EveryOperationsXPermission", func(t *testing.T) {
		t.Parallel()
		want := map[string]access.Permission{}
		for _, op := range s.Operations {
			if op.Permission != "" {
				require.Contains(t, access.Permissions(), access.Permission(op.Permission), "%s: x-permission %q is not a permission", op.ID, op.Permission)
			}
			want[op.ID] = access.Permission(op.Permission)
		}
		require.Equal(t, want, gateway.OperationPermissions())
	})

	t.Run("EveryHandlerHasAnEntry", func(t *testing.T) {
		t.Parallel()
		perms := gateway.OperationPermissions()
		typ := reflect.TypeFor[server.StrictServerInterface]()
		for i := range typ.NumMethod() {
			name := typ.Method(i).Name
			require.Contains(t, perms, strings.ToLower(name[:1])+name[1:])
		}
		require.Len(t, perms, typ.NumMethod())
	})

	t.Run("RoleTable", func(t *testing.T) {
		t.Parallel()
		row := regexp.MustCompile("(?m)^\\s*\\| `([a-z]+)` \\| (.+) \\|$")
		got := map[string][]access.Permission{}
		for _, m := range row.FindAllStringSubmatch(s.Description, -1) {
			if m[2] == "all" {
				got[m[1]] = access.Permissions()
				continue
			}
			for p := range strings.SplitSeq(m[2], ",") {
				got[m[1]] = append(got[m[1]], access.Permission(strings.Trim(strings.TrimSpace(p), "`")))
			}
		}
		want := access.Roles()
		require.Len(t, got, len(want), "the roles of openapi.yaml's info.description")
		for role, ps := range want {
			require.ElementsMatch(t, ps, got[role], "role %s", role)
		}
	})
}

// call sends method path with token, and headers (name, value, ...), and answers the
// status and the problem detail. It reads no more than the headers of a stream.
func call(t *testing.T, method, url, token, body string, headers ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, r)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	if resp.Header.Get("Content-Type") != "application/problem+json" {
		return resp.StatusCode, ""
	}
	var p protocol.Problem
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&p))
	return resp.StatusCode, p.Detail
}

// TestPermissionMatrix calls every operation of the spec that needs a permission, with
// a token whose only role is that permission (not refused) and with one that has every
// other permission (403 naming it).
func TestPermissionMatrix(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	bodies := map[string]string{
		"registerFunction":    `{"url":"http://127.0.0.1:9/fn"}`,
		"syncApp":             `{"url":"http://127.0.0.1:9/"}`,
		"startRunWithMessage": `{"message":{"topic":"t"}}`,
		"rerunRuns":           `{"filter":{"function":"matrix"}}`,
	}
	// The permissions an operation's handler checks besides its x-permission, and the
	// headers it requires.
	besides := map[string][]string{
		"startRunWithMessage": {string(access.PermissionEventsSend)},
		"rerunRuns":           {string(access.PermissionRunsManage)},
	}
	headers := map[string][]string{"startRunWithMessage": {"Idempotency-Key", "matrix"}}
	for _, op := range readSpec(t).Operations {
		if op.Permission == "" {
			continue
		}
		perm := access.Permission(op.Permission)
		url := s.URL + strings.NewReplacer("{name}", "matrix-"+op.ID, "{id}", uuid.NewString(), "{group}", "0123456789abcdef").Replace(op.Path)
		body := ""
		if op.RequestBody != nil {
			body = cmp.Or(bodies[op.ID], `{}`)
		}
		var others []string
		for _, p := range access.Permissions() {
			if p != perm {
				others = append(others, string(p))
			}
		}
		with := s.NewToken(t, auth.Identity{Subject: "matrix", Tenant: auth.DefaultTenant, Roles: append([]string{string(perm)}, besides[op.ID]...)})
		without := s.NewToken(t, auth.Identity{Subject: "matrix", Tenant: auth.DefaultTenant, Roles: others})

		t.Run(op.ID, func(t *testing.T) {
			t.Parallel()
			status, detail := call(t, op.Method, url, with, body, headers[op.ID]...)
			require.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, status, detail)

			status, detail = call(t, op.Method, url, without, body, headers[op.ID]...)
			require.Equal(t, http.StatusForbidden, status, detail)
			require.Equal(t, "this operation needs the "+string(perm)+" permission; the token's roles ("+
				strings.Join(others, ", ")+") do not grant it", detail)
		})
	}

	t.Run("NamedRoles", func(t *testing.T) {
		t.Parallel()
		viewer := s.NewToken(t, auth.Identity{Subject: "v", Tenant: auth.DefaultTenant, Roles: []string{"viewer"}})
		status, detail := call(t, "POST", s.URL+"/v1/functions/hello/runs", viewer, `{}`)
		require.Equal(t, http.StatusForbidden, status)
		require.Equal(t, "this operation needs the runs:invoke permission; the token's roles (viewer) do not grant it", detail)
		status, _ = call(t, "GET", s.URL+"/v1/runs", viewer, "")
		require.Equal(t, http.StatusOK, status)

		none := s.NewToken(t, auth.Identity{Subject: "n", Tenant: auth.DefaultTenant})
		status, detail = call(t, "GET", s.URL+"/v1/functions", none, "")
		require.Equal(t, http.StatusForbidden, status)
		require.Equal(t, "this operation needs the functions:read permission; the token's roles (none) do not grant it", detail)

		operator := s.NewToken(t, auth.Identity{Subject: "o", Tenant: auth.DefaultTenant, Roles: []string{"operator"}})
		status, detail = call(t, "PUT", s.URL+"/v1/functions/x", operator, `{"url":"http://127.0.0.1:9/x"}`)
		require.Equal(t, http.StatusForbidden, status)
		require.Contains(t, detail, "needs the functions:write permission")
	})

	t.Run("HealthzAndCheckpointNeedNoRole", func(t *testing.T) {
		t.Parallel()
		status, _ := call(t, "GET", s.URL+"/healthz", "", "")
		require.Equal(t, http.StatusOK, status)
		id := uuid.NewString()
		tok := s.Tokens.Issue(t.Context(), id, 1, time.Now().Add(time.Minute))
		status, detail := call(t, "POST", s.URL+"/v1/runs/"+id+"/checkpoint", tok, `{"seq":1,"kind":"step","name":"a","output":1}`)
		require.NotContains(t, []int{http.StatusUnauthorized, http.StatusForbidden}, status, detail)
	})
}

// TestInvokeRoles checks a function whose config names invoke_roles: only those roles
// (or admin) start its runs, and a refusal leaves no run behind.
func TestInvokeRoles(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{})
	app := s.NewApp()
	functions.Register(app, "payout", func(ctx context.Context, _ struct{}) (string, error) { return "paid", nil },
		functions.InvokeRoles("billing", "finance"))
	functions.Register(app, "hello", func(ctx context.Context, _ struct{}) (string, error) { return "hi", nil })
	appURL := s.ServeApp(t, app)
	s.Sync(t, appURL)

	token := func(roles ...string) string {
		return s.NewToken(t, auth.Identity{Subject: "u", Tenant: auth.DefaultTenant, Roles: roles})
	}
	start := func(tok, fn, query, key string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), "POST", s.URL+"/v1/functions/"+fn+"/runs"+query, strings.NewReader(`{}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var p protocol.Problem
		_ = json.NewDecoder(resp.Body).Decode(&p)
		return resp.StatusCode, p.Detail
	}
	refused := "function payout may be invoked only by the roles (billing, finance) or admin; the token's roles (invoker) include none of them"

	invoker := token("invoker")
	for _, query := range []string{"", "?wait=30s"} {
		status, detail := start(invoker, "payout", query, "")
		require.Equal(t, http.StatusForbidden, status, query)
		require.Equal(t, refused, detail)
	}
	status, detail := start(token("billing"), "payout", "", "")
	require.Equal(t, http.StatusForbidden, status)
	require.Contains(t, detail, "needs the runs:invoke permission", "an invoke role does not replace the permission")

	status, detail = start(token("invoker", "finance"), "payout", "?wait=30s", "")
	require.Equal(t, http.StatusOK, status, detail)
	status, detail = start(token("invoker", "billing"), "payout", "", "")
	require.Equal(t, http.StatusAccepted, status, detail)
	status, detail = start(s.Token, "payout", "?wait=30s", "k1")
	require.Equal(t, http.StatusOK, status, detail)
	status, detail = start(invoker, "hello", "?wait=30s", "")
	require.Equal(t, http.StatusOK, status, detail)

	// An idempotency key does not hand another caller's run to a refused one.
	status, detail = start(invoker, "payout", "?wait=30s", "k1")
	require.Equal(t, http.StatusForbidden, status)
	require.Equal(t, refused, detail)

	runs, err := s.Client(t, s.Token).ListRunsWithResponse(t.Context(), &protocol.ListRunsParams{Function: ptr("payout")})
	require.NoError(t, err)
	require.Len(t, runs.JSON200.Runs, 3, "the refused starts made no run")

	// The roles belong to a revision: registering one without them opens the function,
	// and one with them closes it again.
	admin := s.Client(t, s.Token)
	reg, err := admin.RegisterFunctionWithResponse(t.Context(), "payout", protocol.FunctionRegistration{URL: appURL + "payout"})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, reg.StatusCode(), string(reg.Body))
	status, detail = start(invoker, "payout", "?wait=30s", "")
	require.Equal(t, http.StatusOK, status, detail)
	reg, err = admin.RegisterFunctionWithResponse(t.Context(), "payout", protocol.FunctionRegistration{URL: appURL + "payout",
		Config: &protocol.FunctionConfig{InvokeRoles: &[]string{"billing"}}})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, reg.StatusCode(), string(reg.Body))
	status, detail = start(invoker, "payout", "?wait=30s", "")
	require.Equal(t, http.StatusForbidden, status)
	require.Contains(t, detail, "only by the roles (billing)")
}
