package readme

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/protocol/signature"
)

// TestProtocolSignatureVectors keeps the test vectors of docs/protocol.md ("How
// functions verify the gateway") true: signed with protocol/signature, the key of the
// seed 00 01 … 1f and the HMAC secret 20 21 … 3f give the public key the page shows,
// and, for an invocation (POST /orders.checkout with {"protocol":1}) and the manifest
// (GET / with no body), the message the page shows (its newlines written \n) and the
// Stepgate-Signature header, on a line of its own.
func TestProtocolSignatureVectors(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile(filepath.Join(moduleRoot(t), "docs", "protocol.md"))
	require.NoError(t, err)
	page := string(text)
	lines := strings.Split(page, "\n")

	seq := func(first byte) []byte {
		b := make([]byte, 32)
		for i := range b {
			b[i] = first + byte(i)
		}
		return b
	}
	key := signature.SigningKey{Ed25519: ed25519.NewKeyFromSeed(seq(0)), HMAC: seq(0x20)}
	public := signature.FormatKey(key.Ed25519.Public().(ed25519.PublicKey))
	require.Contains(t, page, "`"+public+"`", "the vector's public key")

	now, tenant := time.Unix(1_800_000_000, 0), "acme corp"
	for _, r := range []signature.Request{
		{Method: "POST", Path: "/orders.checkout", Body: []byte(`{"protocol":1}`)},
		{Method: "GET", Path: "/"},
	} {
		msg := strings.ReplaceAll(string(signature.Message(now.Unix(), tenant, r)), "\n", `\n`)
		require.Contains(t, page, "`"+msg+"`", "the message signed for %s %s", r.Method, r.Path)
		header := signature.Header + ": " + signature.Sign(now, tenant, r, key)
		require.True(t, slices.Contains(lines, header), "docs/protocol.md has no line\n%s\nfor %s %s", header, r.Method, r.Path)
	}
}
