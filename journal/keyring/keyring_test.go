package keyring_test

import (
	"crypto/rand"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/pgtest"
	"github.com/stepgate/stepgate/journal/keyring"
)

// newTenant returns a tenant no other test uses.
func newTenant() string { return "tenant-" + rand.Text()[:12] }

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func newSigningKey(tenant string) keyring.SigningKey {
	return keyring.SigningKey{Tenant: tenant, ID: rand.Text()[:12], Seed: randomBytes(32), PublicKey: randomBytes(32), HMACSecret: randomBytes(32)}
}

func TestInvocationKeys(t *testing.T) {
	t.Parallel()
	ctx, db := t.Context(), pgtest.DB(t)

	// Gateways starting together agree on one key: the first stored.
	var wg sync.WaitGroup
	got := make([][]keyring.InvocationKey, 8)
	for i := range got {
		wg.Go(func() {
			keys, err := keyring.InvocationKeys(ctx, db, keyring.InvocationKey{ID: rand.Text()[:8], Secret: randomBytes(32)})
			require.NoError(t, err)
			got[i] = keys
		})
	}
	wg.Wait()
	for _, keys := range got {
		require.Len(t, keys, 1)
		require.Equal(t, got[0][0].ID, keys[0].ID)
		require.Equal(t, got[0][0].Secret, keys[0].Secret)
		require.Nil(t, keys[0].RetiresAt)
	}
	first := got[0][0]

	next := keyring.InvocationKey{ID: "next", Secret: randomBytes(32)}
	require.NoError(t, keyring.RotateInvocationKey(ctx, db, next, time.Hour))
	keys, err := keyring.InvocationKeys(ctx, db, keyring.InvocationKey{ID: "ignored", Secret: randomBytes(32)})
	require.NoError(t, err)
	require.Len(t, keys, 2)
	require.Equal(t, "next", keys[0].ID, "the new key is current")
	require.Nil(t, keys[0].RetiresAt)
	require.Equal(t, first.ID, keys[1].ID, "the old one verifies until it retires")
	require.WithinDuration(t, time.Now().Add(time.Hour), *keys[1].RetiresAt, time.Minute)

	require.NoError(t, keyring.RotateInvocationKey(ctx, db, keyring.InvocationKey{ID: "third", Secret: randomBytes(32)}, 0))
	keys, err = keyring.InvocationKeys(ctx, db, keyring.InvocationKey{ID: "ignored", Secret: randomBytes(32)})
	require.NoError(t, err)
	require.Equal(t, []string{"third", first.ID}, []string{keys[0].ID, keys[1].ID}, "a zero overlap retires at once")

	_, err = db.Exec(ctx, `INSERT INTO stepgate.invocation_key (id, secret) VALUES ('weak', 'short')`)
	require.ErrorContains(t, err, "invocation_key_secret_check", "a short secret is refused by the schema too")
}

func TestSigningKeys(t *testing.T) {
	t.Parallel()
	ctx, db := t.Context(), pgtest.DB(t)
	tenant, other := newTenant(), newTenant()

	none, err := keyring.SigningKeys(ctx, db, tenant)
	require.NoError(t, err)
	require.Empty(t, none, "reading makes no key")

	var wg sync.WaitGroup
	got := make([][]keyring.SigningKey, 8)
	for i := range got {
		wg.Go(func() {
			keys, err := keyring.EnsureSigningKeys(ctx, db, newSigningKey(tenant))
			require.NoError(t, err)
			got[i] = keys
		})
	}
	wg.Wait()
	for _, keys := range got {
		require.Len(t, keys, 1, "one first key, however many gateways race")
		require.Equal(t, got[0][0].ID, keys[0].ID)
	}
	first := got[0][0]
	otherKeys, err := keyring.EnsureSigningKeys(ctx, db, newSigningKey(other))
	require.NoError(t, err)
	require.NotEqual(t, first.Seed, otherKeys[0].Seed, "each tenant has its own")

	second := newSigningKey(tenant)
	keys, err := keyring.RotateSigningKey(ctx, db, second, time.Hour)
	require.NoError(t, err)
	require.Equal(t, []string{second.ID, first.ID}, []string{keys[0].ID, keys[1].ID}, "both sign during the overlap, the new one first")
	require.Nil(t, keys[0].RetiresAt)
	require.NotNil(t, keys[1].RetiresAt)

	third := newSigningKey(tenant)
	_, err = keyring.RotateSigningKey(ctx, db, third, time.Hour)
	require.NoError(t, err)
	keys, err = keyring.RotateSigningKey(ctx, db, newSigningKey(tenant), time.Hour)
	require.ErrorIs(t, err, keyring.ErrTooManyKeys)
	require.Len(t, keys, keyring.MaxSigningKeys)
	require.Equal(t, third.ID, keys[0].ID, "a refused rotation changes nothing")

	keys, err = keyring.RotateSigningKey(ctx, db, newSigningKey(other), 0)
	require.NoError(t, err)
	require.Len(t, keys, 1, "a zero overlap retires the old key at once")
	keys, err = keyring.SigningKeys(ctx, db, tenant)
	require.NoError(t, err)
	require.Len(t, keys, keyring.MaxSigningKeys, "another tenant's rotation leaves this one's keys")
}
