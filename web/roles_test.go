package web_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/access"
	"github.com/stepgate/stepgate/web"
)

// TestRoleTable requires the dashboard's copy of the role table (ROLE_PERMISSIONS in
// js/api.js, which hides the actions a token cannot do) to equal auth's, as served.
// openapi.yaml's copy is checked by gateway's TestPermissionsMatchTheSpec.
func TestRoleTable(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	web.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/js/api.js", nil))
	require.Equal(t, http.StatusOK, rec.Code)

	m := regexp.MustCompile(`(?s)\nconst ROLE_PERMISSIONS = (\{.*?\n\});\n`).FindSubmatch(rec.Body.Bytes())
	require.NotNil(t, m, "js/api.js has no `const ROLE_PERMISSIONS = {...};`")
	table := regexp.MustCompile(`,(\s*[\]}])`).ReplaceAll(m[1], []byte("$1")) // JS allows trailing commas
	var js map[string][]string
	require.NoError(t, json.Unmarshal(table, &js), "ROLE_PERMISSIONS is to stay JSON but for trailing commas: quoted keys, string values")

	got := map[string][]string{}
	for role, ps := range js {
		if slices.Equal(ps, []string{"*"}) {
			ps = permissions(access.Permissions())
		}
		got[role] = slices.Sorted(slices.Values(ps))
	}
	want := map[string][]string{}
	for role, ps := range access.Roles() {
		want[role] = slices.Sorted(slices.Values(permissions(ps)))
	}
	require.Equal(t, want, got)
}

func permissions(ps []access.Permission) []string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = string(p)
	}
	return s
}
