package invoker_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/invoker"
	"github.com/stepgate/stepgate/journal"
)

func TestKeyValue(t *testing.T) {
	t.Parallel()
	id := journal.Identity{Subject: "alice", Tenant: "t1", Claims: map[string]any{"org": "acme", "n": 7.0}}
	long := strings.Repeat("x", invoker.MaxKeyValueBytes+1)
	for _, tc := range []struct{ expr, input, want string }{
		{"", `{"a":1}`, ""},
		{"input.customer_id", `{"customer_id":"c-9"}`, "c-9"},
		{"input.order.region", `{"order":{"region":"eu"}}`, "eu"},
		{"input.n", `{"n":12345678901234567890}`, "12345678901234567890"}, // no float rounding
		{"input.obj", `{"obj":{"b":1,"a":2}}`, `{"a":2,"b":1}`},
		{"input.missing", `{"a":1}`, ""},
		{"input.a.b", `{"a":"not an object"}`, ""},
		{"input.a", `null`, ""},
		{"input.a", `{"a":null}`, ""},
		{"input.a", `{"a":"` + long + `"}`, "sha256:"},
		{"identity.subject", `{}`, "alice"},
		{"identity.tenant", `{}`, "t1"},
		{"identity.claims.org", `{}`, "acme"},
		{"identity.claims.n", `{}`, "7"},
		{"identity.claims.none", `{}`, ""},
	} {
		k, err := invoker.ParseKey("key", tc.expr)
		require.NoError(t, err, tc.expr)
		got := k.Value(json.RawMessage(tc.input), id)
		if tc.want == "sha256:" {
			require.True(t, strings.HasPrefix(got, "sha256:") && len(got) == len("sha256:")+64, got)
			continue
		}
		require.Equal(t, tc.want, got, tc.expr)
	}
	for _, bad := range []string{"customer_id", "input", "input.", "input..a", "identity", "identity.roles",
		"identity.claims", "identity.claims.a.b", "input.a b", "input.a.b.c.d.e.f.g.h.i", "output.x", strings.Repeat("a", 300)} {
		_, err := invoker.ParseKey("config.throttle.key", bad)
		require.ErrorContains(t, err, "config.throttle.key", bad)
	}
}

// TestRateBurstDefaults: a rate limit's burst defaults to limit-1 (limit starts back to
// back), a throttle's to 0; an explicit burst, 0 included, is kept.
func TestRateBurstDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		config              string
		throttle, rateLimit int
	}{
		{`{"rate_limit":{"limit":2,"period":"10s"}}`, -1, 1},
		{`{"rate_limit":{"limit":1,"period":"10s"}}`, -1, 0},
		{`{"rate_limit":{"limit":2,"period":"10s","burst":0}}`, -1, 0},
		{`{"rate_limit":{"limit":2,"period":"10s","burst":5}}`, -1, 5},
		{`{"throttle":{"limit":2,"period":"10s"}}`, 0, -1},
		{`{"throttle":{"limit":2,"period":"10s","burst":3}}`, 3, -1},
	} {
		f, err := invoker.ParseFlow(json.RawMessage(tc.config))
		require.NoError(t, err, tc.config)
		burst := func(r *invoker.Rate) int {
			if r == nil {
				return -1
			}
			return r.Burst
		}
		require.Equal(t, tc.throttle, burst(f.Throttle), tc.config)
		require.Equal(t, tc.rateLimit, burst(f.RateLimit), tc.config)
	}
}
