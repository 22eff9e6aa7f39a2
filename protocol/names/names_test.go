package names_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/stepgate/stepgate/protocol/names"
)

func TestNames(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"a", "orders.checkout", "A-1_b.c", strings.Repeat("a", names.MaxBytes)} {
		require.NoError(t, names.CheckFunction("function name", ok), ok)
		require.NoError(t, names.Check("step name", ok), ok)
	}
	for _, bad := range []string{"", "-a", ".a", "a b", "a/b", "é", strings.Repeat("a", names.MaxBytes+1)} {
		require.ErrorContains(t, names.CheckFunction("function name", bad), "function name", bad)
	}
	for _, bad := range []string{"", strings.Repeat("x", names.MaxBytes+1), "a\x00b", "bad\xffutf8"} {
		require.ErrorContains(t, names.Check("step name", bad), "step name", bad)
	}
	require.NoError(t, names.Check("step name", "réserver la chambre 🛏"), "any text")
	err := names.Check("event name", strings.Repeat("y", 1000))
	require.Less(t, len(err.Error()), 200, "a long name is cut short in the message")
}

// TestOpenAPIUsesThePattern: the API's contract names functions and schedules by the
// same rule as the gateway and the SDK.
func TestOpenAPIUsesThePattern(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../../openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Components struct {
			Parameters map[string]struct {
				Schema struct {
					Pattern string `yaml:"pattern"`
				} `yaml:"schema"`
			} `yaml:"parameters"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"FunctionName", "ScheduleName"} {
		if got := doc.Components.Parameters[p].Schema.Pattern; got != names.FunctionPattern {
			t.Errorf("openapi.yaml's %s pattern is %q, not names.FunctionPattern %q", p, got, names.FunctionPattern)
		}
	}
}
