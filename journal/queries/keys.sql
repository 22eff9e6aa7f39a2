-- name: InvocationKeys :many
-- Stores candidate as the current key when there is none, and returns the keys that
-- still verify, the current one first.
WITH ins AS (
    INSERT INTO stepgate.invocation_key (id, secret) VALUES (@id, @secret)
    ON CONFLICT DO NOTHING
    RETURNING id, secret, created_at, retires_at
)
SELECT * FROM ins
UNION ALL
SELECT id, secret, created_at, retires_at FROM stepgate.invocation_key
WHERE retires_at IS NULL OR retires_at > now()
ORDER BY retires_at DESC NULLS FIRST, created_at DESC;

-- name: InvocationKeyLock :exec
-- Serializes rotations until the transaction ends.
SELECT pg_advisory_xact_lock(hashtextextended('stepgate.invocation_key', 0));

-- name: InvocationKeyRetire :exec
UPDATE stepgate.invocation_key SET retires_at = now() + make_interval(secs => @overlap_secs)
WHERE retires_at IS NULL;

-- name: InvocationKeyInsert :exec
INSERT INTO stepgate.invocation_key (id, secret) VALUES (@id, @secret);

-- name: SigningKeys :many
-- The tenant's keys that still sign, the current one first.
SELECT * FROM stepgate.signing_key
WHERE tenant = @tenant AND (retires_at IS NULL OR retires_at > now())
ORDER BY retires_at DESC NULLS FIRST, created_at DESC;

-- name: SigningKeyInsertFirst :exec
INSERT INTO stepgate.signing_key (tenant, id, seed, public_key, hmac_secret)
VALUES (@tenant, @id, @seed, @public_key, @hmac_secret) ON CONFLICT DO NOTHING;

-- name: SigningKeyLock :exec
-- Serializes the tenant's rotations until the transaction ends.
SELECT pg_advisory_xact_lock(hashtextextended('stepgate.signing_key/' || sqlc.arg(tenant)::text, 0));

-- name: SigningKeyRetire :exec
-- Retires the tenant's current key after the overlap, unless it has max_keys that sign.
UPDATE stepgate.signing_key SET retires_at = now() + make_interval(secs => @overlap_secs)
WHERE signing_key.tenant = @tenant AND retires_at IS NULL
    AND (SELECT count(*) FROM stepgate.signing_key k
        WHERE k.tenant = @tenant AND (k.retires_at IS NULL OR k.retires_at > now())) < sqlc.arg(max_keys)::bigint;

-- name: SigningKeyInsertCurrent :exec
-- Stores the tenant's new current key, unless its current key was not retired.
INSERT INTO stepgate.signing_key (tenant, id, seed, public_key, hmac_secret)
SELECT @tenant, @id, @seed, @public_key, @hmac_secret
WHERE NOT EXISTS (SELECT 1 FROM stepgate.signing_key WHERE tenant = @tenant AND retires_at IS NULL);
