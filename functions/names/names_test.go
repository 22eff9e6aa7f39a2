package names_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions/names"
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
