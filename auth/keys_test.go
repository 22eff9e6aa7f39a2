package auth_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/protocol/signature"
)

func TestInvocationTokens(t *testing.T) {
	t.Parallel()
	now := time.Now()
	const run = "01a22695-0000-7000-8000-000000000001"

	t.Run("OperatorKeys", func(t *testing.T) {
		t.Parallel()
		older, newer := []byte(strings.Repeat("o", 32)), []byte(strings.Repeat("n", 32))
		_, err := auth.NewInvocationTokens([]byte("short"))
		require.ErrorContains(t, err, "at least 32")
		before, err := auth.NewInvocationTokens(older)
		require.NoError(t, err)
		rotated, err := auth.NewInvocationTokens(newer, older)
		require.NoError(t, err)
		after, err := auth.NewInvocationTokens(newer)
		require.NoError(t, err)

		tok := before.Issue(t.Context(), run, 3, now.Add(time.Minute))
		gotRun, inv, err := rotated.Verify(t.Context(), tok, now)
		require.NoError(t, err, "a rotation keeps the old key verifying")
		require.Equal(t, run, gotRun)
		require.Equal(t, 3, inv)
		_, _, err = after.Verify(t.Context(), tok, now)
		require.ErrorIs(t, err, auth.ErrUnauthorized)
		require.ErrorContains(t, err, "unknown or retired key")
		_, _, err = after.Verify(t.Context(), rotated.Issue(t.Context(), run, 1, now.Add(time.Minute)), now)
		require.NoError(t, err, "the newest key signs")
	})

	t.Run("Refusals", func(t *testing.T) {
		t.Parallel()
		tokens, err := auth.NewInvocationTokens([]byte(strings.Repeat("k", 32)))
		require.NoError(t, err)
		good := tokens.Issue(t.Context(), run, 1, now.Add(time.Minute))
		parts := strings.Split(good, ".")
		for name, tc := range map[string]struct{ token, reason string }{
			"Expired":      {tokens.Issue(t.Context(), run, 1, now.Add(-time.Second)), "expired"},
			"OtherRun":     {strings.Replace(good, run, "01a22695-0000-7000-8000-000000000002", 1), "signature is invalid"},
			"OtherInvoc":   {strings.Join([]string{parts[0], parts[1], "2", parts[3], parts[4]}, "."), "signature is invalid"},
			"LaterExpiry":  {strings.Join([]string{parts[0], parts[1], parts[2], "99999999999", parts[4]}, "."), "signature is invalid"},
			"UnknownKey":   {strings.Join(append([]string{"nokey"}, parts[1:]...), "."), "unknown or retired key"},
			"Garbage":      {"garbage", "malformed"},
			"TooLong":      {strings.Repeat("a.", 600), "malformed"},
			"Unsigned":     {strings.Join(parts[:4], "."), "malformed"},
			"AnotherKeyed": {mustTokens(t, strings.Repeat("x", 32)).Issue(t.Context(), run, 1, now.Add(time.Minute)), "unknown or retired key"},
		} {
			_, _, err := tokens.Verify(t.Context(), tc.token, now)
			require.ErrorIs(t, err, auth.ErrUnauthorized, name)
			require.ErrorContains(t, err, tc.reason, name)
		}
	})

	t.Run("DatabaseKeys", func(t *testing.T) {
		t.Parallel()
		ctx, db := t.Context(), pgtest.DB(t)
		a, err := auth.LoadInvocationTokens(ctx, db)
		require.NoError(t, err)
		b, err := auth.LoadInvocationTokens(ctx, db)
		require.NoError(t, err)
		tok := a.Issue(ctx, run, 1, now.Add(time.Minute))
		_, _, err = b.Verify(ctx, tok, now)
		require.NoError(t, err, "every gateway on the database shares the key")

		// A rotation on a third gateway: b learns the new key at the first token that
		// names it; a's old tokens verify until the old key retires.
		require.NoError(t, auth.RotateInvocationKey(ctx, db, time.Hour))
		c, err := auth.LoadInvocationTokens(ctx, db)
		require.NoError(t, err)
		fresh := c.Issue(ctx, run, 2, now.Add(time.Minute))
		_, inv, err := b.Verify(ctx, fresh, now)
		require.NoError(t, err)
		require.Equal(t, 2, inv)
		_, _, err = c.Verify(ctx, tok, now)
		require.NoError(t, err)
		_, _, err = c.Verify(ctx, tok, now.Add(2*time.Hour))
		require.ErrorContains(t, err, "unknown or retired key", "past its retirement the old key verifies nothing")
		require.NotEqual(t, strings.Split(tok, ".")[0], strings.Split(fresh, ".")[0])
	})
}

func mustTokens(t *testing.T, key string) *auth.InvocationTokens {
	t.Helper()
	tokens, err := auth.NewInvocationTokens([]byte(key))
	require.NoError(t, err)
	return tokens
}

func TestSigningKeys(t *testing.T) {
	t.Parallel()
	ctx, db := t.Context(), pgtest.DB(t)
	keys := auth.NewSigningKeys(db)
	now := time.Now()
	body := signature.Request{Method: "POST", Path: "/f", Body: []byte(`{"protocol":1}`)}

	none, err := keys.Verification(ctx, "acme", false)
	require.NoError(t, err)
	require.Empty(t, none.Public, "verification makes no key: a forged header may name any tenant")

	h, err := keys.Sign(ctx, "acme", body, now)
	require.NoError(t, err)
	acme, err := keys.Verification(ctx, "acme", false)
	require.NoError(t, err)
	require.Len(t, acme.Public, 1, "the first request makes the tenant's key")
	got, err := signature.Verify(h, body, now, 0, signature.Keys{Public: acme.Public})
	require.NoError(t, err)
	require.Equal(t, "acme", got)
	_, err = signature.Verify(h, body, now, 0, signature.Keys{HMAC: acme.HMAC})
	require.NoError(t, err, "and its HMAC secret")

	// Another tenant's keys verify nothing of acme's, and another gateway signs alike.
	hg, err := keys.Sign(ctx, "globex", body, now)
	require.NoError(t, err)
	globex, err := keys.Verification(ctx, "globex", false)
	require.NoError(t, err)
	_, err = signature.Verify(h, body, now, 0, globex)
	require.ErrorIs(t, err, signature.ErrMismatch)
	_, err = signature.Verify(hg, body, now, 0, acme)
	require.ErrorIs(t, err, signature.ErrMismatch)
	h2, err := auth.NewSigningKeys(db).Sign(ctx, "acme", body, now)
	require.NoError(t, err)
	require.Equal(t, h, h2, "the keys live in the database, not in one gateway")

	// A rotation: both keys sign during the overlap, so functions holding either accept.
	rotated, err := keys.Rotate(ctx, "acme", time.Hour)
	require.NoError(t, err)
	require.Len(t, rotated, 2)
	h, err = keys.Sign(ctx, "acme", body, now)
	require.NoError(t, err)
	_, err = signature.Verify(h, body, now, 0, signature.Keys{Public: acme.Public})
	require.NoError(t, err, "the old public key still verifies")
	p, err := signature.Parse(h)
	require.NoError(t, err)
	require.Len(t, p.Ed25519, 2)
	require.Len(t, p.HMAC, 2)
	// Past the overlap only the new key signs.
	h, err = keys.Sign(ctx, "acme", body, now.Add(2*time.Hour))
	require.NoError(t, err)
	_, err = signature.Verify(h, body, now.Add(2*time.Hour), 0, signature.Keys{Public: acme.Public})
	require.ErrorIs(t, err, signature.ErrMismatch)
}
