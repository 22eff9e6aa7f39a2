package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDevWarnsOffLoopback: `stepgate dev` listening beyond this machine (any address
// but loopback) warns that the default tenant's admin token it prints opens the
// instance to whoever reaches it; on loopback it does not.
func TestDevWarnsOffLoopback(t *testing.T) {
	t.Parallel()
	// A database URL dev cannot parse stops it just after its start's warnings.
	dev := func(t *testing.T, addr string) string {
		t.Helper()
		c, _, stderr := newTestCLI(map[string]string{"DATABASE_URL": "postgres://%zz"}, "")
		require.ErrorContains(t, c.run(t.Context(), []string{"dev", "--dir", t.TempDir(), "--addr", addr}), "DATABASE_URL: ")
		return stderr.String()
	}
	for _, addr := range []string{"0.0.0.0:8080", ":8080", "[::]:0", "192.168.1.20:8080", "gateway.lan:8080"} {
		t.Run(addr, func(t *testing.T) {
			t.Parallel()
			out := dev(t, addr)
			require.Contains(t, out, "level=WARN")
			require.Contains(t, out, addr)
			require.Contains(t, out, `tenant \"default\"`)
			require.Contains(t, out, "admin token")
		})
	}
	for _, addr := range []string{"127.0.0.1:0", "127.0.0.2:8080", "[::1]:0", "localhost:0", "LOCALHOST:8080"} {
		t.Run(addr, func(t *testing.T) {
			t.Parallel()
			require.NotContains(t, dev(t, addr), "level=WARN")
		})
	}
}
