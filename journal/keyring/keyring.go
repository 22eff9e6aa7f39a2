// Package keyring stores the gateway's own keys (docs/schema.md, Keys): the secrets that
// sign invocation tokens and the tenants' signing keys, with their rotation. Only the
// system pool may read them: they are never handed to a function or a tenant, except a
// tenant's public keys and its own HMAC secret. This package stores them; package auth
// makes and uses them.
package keyring

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// InvocationKey is a secret that signs invocation tokens. The current key (RetiresAt
// nil) signs; a retired one verifies until RetiresAt.
type InvocationKey struct {
	ID        string
	Secret    []byte
	CreatedAt time.Time
	RetiresAt *time.Time
}

// InvocationKeys returns the invocation keys that still verify, the current one first.
// When there is no current key it stores candidate as the current one first, so the
// first gateway on a database makes the deployment's key and every other uses it;
// concurrent callers agree on one.
func InvocationKeys(ctx context.Context, db journal.DB, candidate InvocationKey) ([]InvocationKey, error) {
	for range 2 {
		// A key that another transaction inserted after this statement's snapshot makes
		// the insert do nothing and stays invisible to the select: look again.
		rows, err := dbsqlc.New(db).InvocationKeys(ctx, dbsqlc.InvocationKeysParams{ID: candidate.ID, Secret: candidate.Secret})
		if err != nil {
			return nil, fmt.Errorf("load invocation keys: %w", err)
		}
		if len(rows) > 0 {
			keys := make([]InvocationKey, len(rows))
			for i, r := range rows {
				keys[i] = InvocationKey(r)
			}
			return keys, nil
		}
	}
	return nil, errors.New("journal: no invocation key could be stored")
}

// RotateInvocationKey makes next the current invocation key and retires the current one
// after overlap, so tokens it signed stay valid until then.
func RotateInvocationKey(ctx context.Context, db journal.DB, next InvocationKey, overlap time.Duration) error {
	b := &pgx.Batch{}
	b.Queue(dbsqlc.InvocationKeyLock, dbsqlc.InvocationKeyLockParams{}.Args()...)
	b.Queue(dbsqlc.InvocationKeyRetire, dbsqlc.InvocationKeyRetireParams{OverlapSecs: overlap.Seconds()}.Args()...)
	b.Queue(dbsqlc.InvocationKeyInsert, dbsqlc.InvocationKeyInsertParams{ID: next.ID, Secret: next.Secret}.Args()...)
	// A batch outside a transaction runs as one implicit transaction.
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("rotate invocation key: %w", err)
	}
	return nil
}

// SigningKey is one of a tenant's keys for the requests to its functions. The current key
// (RetiresAt nil) signs; a retiring one signs too until RetiresAt, so functions that hold
// either public key accept every request of the overlap.
type SigningKey struct {
	Tenant     string
	ID         string
	Seed       []byte // The Ed25519 private key's seed.
	PublicKey  []byte
	HMACSecret []byte
	CreatedAt  time.Time
	RetiresAt  *time.Time
}

// signingKeysOf are the keys rows of stepgate.signing_key hold.
func signingKeysOf(rows []dbsqlc.StepgateSigningKey) []SigningKey {
	keys := make([]SigningKey, len(rows))
	for i, r := range rows {
		keys[i] = SigningKey{
			Tenant: r.Tenant, ID: r.ID, Seed: r.Seed, PublicKey: r.PublicKey, HMACSecret: r.HmacSecret,
			CreatedAt: r.CreatedAt, RetiresAt: r.RetiresAt,
		}
	}
	return keys
}

// SigningKeys returns the tenant's keys that still sign, the current one first; none
// when the tenant has none yet. It never creates one.
func SigningKeys(ctx context.Context, db journal.DB, tenant string) ([]SigningKey, error) {
	rows, err := dbsqlc.New(db).SigningKeys(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("load signing keys of tenant %q: %w", tenant, err)
	}
	return signingKeysOf(rows), nil
}

// EnsureSigningKeys returns the tenant's keys that still sign, the current one first,
// storing candidate as its first key when it has none; concurrent callers agree on one.
func EnsureSigningKeys(ctx context.Context, db journal.DB, candidate SigningKey) ([]SigningKey, error) {
	keys, err := SigningKeys(ctx, db, candidate.Tenant)
	if err != nil || len(keys) > 0 {
		return keys, err
	}
	if err := dbsqlc.New(db).SigningKeyInsertFirst(ctx, dbsqlc.SigningKeyInsertFirstParams{
		Tenant: candidate.Tenant, ID: candidate.ID, Seed: candidate.Seed, PublicKey: candidate.PublicKey,
		HmacSecret: candidate.HMACSecret,
	}); err != nil {
		return nil, fmt.Errorf("store the first signing key of tenant %q: %w", candidate.Tenant, err)
	}
	return SigningKeys(ctx, db, candidate.Tenant)
}

// ErrTooManyKeys: a tenant already has MaxSigningKeys keys that sign.
var ErrTooManyKeys = errors.New("journal: too many signing keys")

// MaxSigningKeys bounds a tenant's keys that sign at once (the current one and those
// still in their overlap): each signs every request.
const MaxSigningKeys = 3

// RotateSigningKey makes next the tenant's current key and retires the current one after
// overlap (zero retires it at once). It returns the keys that now sign, the current one
// first, or ErrTooManyKeys, changing nothing, when the tenant already has MaxSigningKeys
// keys that sign. Rotations of one tenant are serialized.
func RotateSigningKey(ctx context.Context, db journal.DB, next SigningKey, overlap time.Duration) ([]SigningKey, error) {
	var keys []SigningKey
	b := &pgx.Batch{}
	// The statements go in one round trip, with their generated SQL and their arguments
	// in the order of their generated Params structs.
	b.Queue(dbsqlc.SigningKeyLock, dbsqlc.SigningKeyLockParams{Tenant: next.Tenant}.Args()...)
	b.Queue(dbsqlc.SigningKeyRetire, dbsqlc.SigningKeyRetireParams{OverlapSecs: overlap.Seconds(), Tenant: next.Tenant, MaxKeys: MaxSigningKeys}.Args()...)
	b.Queue(dbsqlc.SigningKeyInsertCurrent, dbsqlc.SigningKeyInsertCurrentParams{Tenant: next.Tenant, ID: next.ID, Seed: next.Seed, PublicKey: next.PublicKey, HmacSecret: next.HMACSecret}.Args()...)
	b.Queue(dbsqlc.SigningKeys, dbsqlc.SigningKeysParams{Tenant: next.Tenant}.Args()...).Query(func(rows pgx.Rows) error {
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[dbsqlc.StepgateSigningKey])
		keys = signingKeysOf(got)
		return err
	})
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("rotate the signing key of tenant %q: %w", next.Tenant, err)
	}
	if len(keys) == 0 || keys[0].ID != next.ID {
		return keys, ErrTooManyKeys
	}
	return keys, nil
}
