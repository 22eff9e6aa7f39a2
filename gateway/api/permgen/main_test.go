package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestAnOperationIsNeverUnguarded: an operation a user's token may call (the spec's
// bearerAuth, or its own) without an x-permission is refused, naming it; one with
// security [] or another scheme gets the empty permission, and an x-permission there is
// refused as a mistake.
func TestAnOperationIsNeverUnguarded(t *testing.T) {
	const head = "security:\n  - bearerAuth: []\npaths:\n  /x:\n    post:\n      operationId: x\n"
	for _, tc := range []struct {
		name, op, want, err string
	}{
		{"APermission", "      x-permission: runs:read\n", `"x": "runs:read"`, ""},
		{"NoPermission", "", "", "operation x (post /x) takes a user's token but has no x-permission"},
		{"ItsOwnBearer", "      security:\n        - bearerAuth: []\n", "", "takes a user's token but has no x-permission"},
		{"NoToken", "      security: []\n", `"x": ""`, ""},
		{"AnotherScheme", "      security:\n        - invocationToken: []\n", `"x": ""`, ""},
		{"APermissionWithoutAToken", "      security: []\n      x-permission: runs:read\n", "", "has an x-permission but takes no user's token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := generate([]byte(head+tc.op), "server")
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.True(t, strings.Contains(string(src), tc.want), "%s", src)
		})
	}
}
