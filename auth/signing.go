package auth

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"sync"
	"time"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/keyring"
	"github.com/stepgate/stepgate/protocol/signature"
)

// SigningKeys signs the gateway's requests to functions with their tenant's keys: one
// Ed25519 key pair and one HMAC secret per tenant (see package signature), made on the
// tenant's first request and kept in the database, where only the gateways read them.
// A function holds only its tenant's public keys (or its tenant's own HMAC secret), so it
// can sign nothing the gateway signs for another tenant, and with Ed25519 nothing at all.
//
// Keys are cached per tenant and read again after a minute, so a rotation made on one
// gateway reaches the others within a minute; during a rotation's overlap both keys
// sign, so no request is refused meanwhile. It is safe for concurrent use.
type SigningKeys struct {
	db journal.DB // the system pool

	mu    sync.Mutex
	cache map[string]*tenantKeys
}

type tenantKeys struct {
	keys     []keyring.SigningKey // current first
	signers  []signature.SigningKey
	loadedAt time.Time
}

// signingKeyRefresh is how long a tenant's keys are cached.
const signingKeyRefresh = time.Minute

// maxCachedTenants bounds the cache; past it, it starts afresh.
const maxCachedTenants = 10_000

// NewSigningKeys returns the signing keys kept in db, a system pool.
func NewSigningKeys(db journal.DB) *SigningKeys {
	return &SigningKeys{db: db, cache: map[string]*tenantKeys{}}
}

// NewSigningKey returns a new random key of tenant.
func NewSigningKey(tenant string) keyring.SigningKey {
	seed := make([]byte, ed25519.SeedSize)
	rand.Read(seed)
	secret := make([]byte, 32)
	rand.Read(secret)
	pub := ed25519.NewKeyFromSeed(seed).Public().(ed25519.PublicKey)
	sum := sha256.Sum256(pub)
	return keyring.SigningKey{
		Tenant: tenant, ID: base64.RawURLEncoding.EncodeToString(sum[:9]),
		Seed: seed, PublicKey: pub, HMACSecret: secret,
	}
}

// Sign returns the Stepgate-Signature header of r, a request of tenant, signed at now
// with every key of the tenant that signs; it makes the tenant's first key when it has
// none.
func (s *SigningKeys) Sign(ctx context.Context, tenant string, r signature.Request, now time.Time) (string, error) {
	tk, err := s.load(ctx, tenant, true)
	if err != nil {
		return "", err
	}
	var signers []signature.SigningKey
	for i, k := range tk.keys {
		if k.RetiresAt == nil || k.RetiresAt.After(now) {
			signers = append(signers, tk.signers[i])
		}
	}
	if len(signers) == 0 { // every key cached retired since: read them again
		if tk, err = s.reload(ctx, tenant, true); err != nil {
			return "", err
		}
		signers = tk.signers
	}
	return signature.Sign(now, tenant, r, signers...), nil
}

// Keys returns the tenant's keys that sign, the current one first, making its first key
// when it has none.
func (s *SigningKeys) Keys(ctx context.Context, tenant string) ([]keyring.SigningKey, error) {
	tk, err := s.load(ctx, tenant, true)
	if err != nil {
		return nil, err
	}
	return tk.keys, nil
}

// Verification returns what a function verifies the tenant's requests with: its public
// keys and HMAC secrets, read anew from the database when refresh is set. It makes no
// key: a tenant with none gets none. It is the signature.KeyFunc of functions that run
// inside the gateway's trust boundary (stepgate dev's examples, tests).
func (s *SigningKeys) Verification(ctx context.Context, tenant string, refresh bool) (signature.Keys, error) {
	var tk *tenantKeys
	var err error
	if refresh {
		tk, err = s.reload(ctx, tenant, false)
	} else {
		tk, err = s.load(ctx, tenant, false)
	}
	if err != nil {
		return signature.Keys{}, err
	}
	var out signature.Keys
	for _, k := range tk.keys {
		out.Public = append(out.Public, ed25519.PublicKey(k.PublicKey))
		out.HMAC = append(out.HMAC, k.HMACSecret)
	}
	return out, nil
}

// Rotate makes a new key the tenant's current one and retires the current one after
// overlap (both sign until then). It returns the keys that now sign, or an error wrapping
// keyring.ErrTooManyKeys.
func (s *SigningKeys) Rotate(ctx context.Context, tenant string, overlap time.Duration) ([]keyring.SigningKey, error) {
	keys, err := keyring.RotateSigningKey(ctx, s.db, NewSigningKey(tenant), overlap)
	if err != nil {
		return keys, err
	}
	s.store(tenant, keys)
	return keys, nil
}

// load returns the tenant's cached keys, reading them when absent or stale; create makes
// the tenant's first key when it has none.
func (s *SigningKeys) load(ctx context.Context, tenant string, create bool) (*tenantKeys, error) {
	s.mu.Lock()
	tk := s.cache[tenant]
	s.mu.Unlock()
	if tk != nil && time.Since(tk.loadedAt) < signingKeyRefresh && (len(tk.keys) > 0 || !create) {
		return tk, nil
	}
	return s.reload(ctx, tenant, create)
}

func (s *SigningKeys) reload(ctx context.Context, tenant string, create bool) (*tenantKeys, error) {
	var keys []keyring.SigningKey
	var err error
	if create {
		keys, err = keyring.EnsureSigningKeys(ctx, s.db, NewSigningKey(tenant))
	} else {
		keys, err = keyring.SigningKeys(ctx, s.db, tenant)
	}
	if err != nil {
		return nil, fmt.Errorf("auth: signing keys: %w", err)
	}
	if len(keys) == 0 && !create {
		return &tenantKeys{loadedAt: time.Now()}, nil // not cached: the tenant may get keys any moment
	}
	return s.store(tenant, keys), nil
}

func (s *SigningKeys) store(tenant string, keys []keyring.SigningKey) *tenantKeys {
	tk := &tenantKeys{keys: keys, loadedAt: time.Now()}
	for _, k := range keys {
		tk.signers = append(tk.signers, signature.SigningKey{Ed25519: ed25519.NewKeyFromSeed(k.Seed), HMAC: k.HMACSecret})
	}
	s.mu.Lock()
	if len(s.cache) >= maxCachedTenants {
		clear(s.cache)
	}
	s.cache[tenant] = tk
	s.mu.Unlock()
	return tk
}
