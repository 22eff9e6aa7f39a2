package auth

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestVerifiedTokensAreRememberedBriefly: a verified token is remembered until
// verifiedFor after its check, never past its exp; what get returns is a copy, so a
// caller that changes an identity's roles or claims changes no other request's; the
// memory starts afresh past maxVerified tokens.
func TestVerifiedTokensAreRememberedBriefly(t *testing.T) {
	var c verified
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	id := Identity{Subject: "ada", Tenant: "t1", Roles: []string{"viewer"}, Claims: map[string]any{"team": "a"}}

	long := [32]byte{1}
	c.put(long, id, now.Add(time.Hour), now)
	got, exp, ok := c.get(long, now.Add(verifiedFor-time.Millisecond))
	require.True(t, ok)
	require.Equal(t, id, got)
	require.Equal(t, now.Add(time.Hour), exp)
	_, _, ok = c.get(long, now.Add(verifiedFor))
	require.False(t, ok, "remembered for verifiedFor at most")

	short := [32]byte{2}
	c.put(short, id, now.Add(time.Second), now)
	_, _, ok = c.get(short, now.Add(time.Second))
	require.False(t, ok, "never past the token's exp")

	got, _, _ = c.get(long, now)
	got.Roles[0], got.Claims["team"] = "admin", "b"
	again, _, _ := c.get(long, now)
	require.Equal(t, []string{"viewer"}, again.Roles, "a copy")
	require.Equal(t, "a", again.Claims["team"], "a copy")
	id.Roles[0] = "admin"
	again, _, _ = c.get(long, now)
	require.Equal(t, []string{"viewer"}, again.Roles, "put keeps a copy too")

	_, _, ok = c.get([32]byte{3}, now)
	require.False(t, ok, "never verified")
	for i := range maxVerified {
		c.put([32]byte{4, byte(i), byte(i >> 8)}, id, now.Add(time.Hour), now)
	}
	require.LessOrEqual(t, len(c.tokens), maxVerified, "bounded")
}
