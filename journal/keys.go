package journal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// The gateway's own keys (migration 0010). Only the system pool may read them: they are
// never handed to a function or a tenant, except a tenant's public keys and its own HMAC
// secret. This package stores them; package auth makes and uses them.

// InvocationKey is a secret that signs invocation tokens. The current key (RetiresAt
// nil) signs; a retired one verifies until RetiresAt.
type InvocationKey struct {
	ID        string     `db:"id"`
	Secret    []byte     `db:"secret"`
	CreatedAt time.Time  `db:"created_at"`
	RetiresAt *time.Time `db:"retires_at"`
}

// InvocationKeys returns the invocation keys that still verify, the current one first.
// When there is no current key it stores candidate as the current one first, so the
// first gateway on a database makes the deployment's key and every other uses it;
// concurrent callers agree on one.
func InvocationKeys(ctx context.Context, db DB, candidate InvocationKey) ([]InvocationKey, error) {
	for range 2 {
		// A key that another transaction inserted after this statement's snapshot makes
		// the insert do nothing and stays invisible to the select: look again.
		rows, _ := db.Query(ctx, `
			WITH ins AS (
				INSERT INTO stepgate.invocation_key (id, secret) VALUES ($1, $2)
				ON CONFLICT DO NOTHING
				RETURNING id, secret, created_at, retires_at
			)
			SELECT * FROM ins
			UNION ALL
			SELECT id, secret, created_at, retires_at FROM stepgate.invocation_key
			WHERE retires_at IS NULL OR retires_at > now()
			ORDER BY retires_at DESC NULLS FIRST, created_at DESC`, candidate.ID, candidate.Secret)
		keys, err := pgx.CollectRows(rows, pgx.RowToStructByName[InvocationKey])
		if err != nil {
			return nil, fmt.Errorf("load invocation keys: %w", err)
		}
		if len(keys) > 0 {
			return keys, nil
		}
	}
	return nil, errors.New("journal: no invocation key could be stored")
}

// RotateInvocationKey makes next the current invocation key and retires the current one
// after overlap, so tokens it signed stay valid until then.
func RotateInvocationKey(ctx context.Context, db DB, next InvocationKey, overlap time.Duration) error {
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended('stepgate.invocation_key', 0))`)
	b.Queue(`UPDATE stepgate.invocation_key SET retires_at = now() + make_interval(secs => $1) WHERE retires_at IS NULL`, overlap.Seconds())
	b.Queue(`INSERT INTO stepgate.invocation_key (id, secret) VALUES ($1, $2)`, next.ID, next.Secret)
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
	Tenant     string     `db:"tenant"`
	ID         string     `db:"id"`
	Seed       []byte     `db:"seed"` // The Ed25519 private key's seed.
	PublicKey  []byte     `db:"public_key"`
	HMACSecret []byte     `db:"hmac_secret"`
	CreatedAt  time.Time  `db:"created_at"`
	RetiresAt  *time.Time `db:"retires_at"`
}

const signingKeyColumns = `tenant, id, seed, public_key, hmac_secret, created_at, retires_at`

// signingKeysSQL selects a tenant's keys that still sign, the current one first.
const signingKeysSQL = `
	SELECT ` + signingKeyColumns + ` FROM stepgate.signing_key
	WHERE tenant = $1 AND (retires_at IS NULL OR retires_at > now())
	ORDER BY retires_at DESC NULLS FIRST, created_at DESC`

// SigningKeys returns the tenant's keys that still sign, the current one first; none
// when the tenant has none yet. It never creates one.
func SigningKeys(ctx context.Context, db DB, tenant string) ([]SigningKey, error) {
	rows, _ := db.Query(ctx, signingKeysSQL, tenant)
	keys, err := pgx.CollectRows(rows, pgx.RowToStructByName[SigningKey])
	if err != nil {
		return nil, fmt.Errorf("load signing keys of tenant %q: %w", tenant, err)
	}
	return keys, nil
}

// EnsureSigningKeys returns the tenant's keys that still sign, the current one first,
// storing candidate as its first key when it has none; concurrent callers agree on one.
func EnsureSigningKeys(ctx context.Context, db DB, candidate SigningKey) ([]SigningKey, error) {
	keys, err := SigningKeys(ctx, db, candidate.Tenant)
	if err != nil || len(keys) > 0 {
		return keys, err
	}
	if _, err := db.Exec(ctx, `
		INSERT INTO stepgate.signing_key (tenant, id, seed, public_key, hmac_secret)
		VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`,
		candidate.Tenant, candidate.ID, candidate.Seed, candidate.PublicKey, candidate.HMACSecret); err != nil {
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
func RotateSigningKey(ctx context.Context, db DB, next SigningKey, overlap time.Duration) ([]SigningKey, error) {
	var keys []SigningKey
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_advisory_xact_lock(hashtextextended('stepgate.signing_key/' || $1::text, 0))`, next.Tenant)
	b.Queue(`
		UPDATE stepgate.signing_key SET retires_at = now() + make_interval(secs => $2)
		WHERE tenant = $1 AND retires_at IS NULL
			AND (SELECT count(*) FROM stepgate.signing_key
				WHERE tenant = $1 AND (retires_at IS NULL OR retires_at > now())) < $3`,
		next.Tenant, overlap.Seconds(), MaxSigningKeys)
	b.Queue(`
		INSERT INTO stepgate.signing_key (tenant, id, seed, public_key, hmac_secret)
		SELECT $1, $2, $3, $4, $5
		WHERE NOT EXISTS (SELECT 1 FROM stepgate.signing_key WHERE tenant = $1 AND retires_at IS NULL)`,
		next.Tenant, next.ID, next.Seed, next.PublicKey, next.HMACSecret)
	b.Queue(signingKeysSQL, next.Tenant).Query(func(rows pgx.Rows) error {
		var err error
		keys, err = pgx.CollectRows(rows, pgx.RowToStructByName[SigningKey])
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
