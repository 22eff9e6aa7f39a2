-- Keys the gateway holds and no function, and no tenant, ever does.
--
-- invocation_key signs the invocation tokens that authorize checkpoints: random secrets
-- made by the first gateway that needs one (the unique index lets exactly one be
-- current), shared by every gateway on the database. A rotation retires the current key
-- at a time (retires_at), until which it still verifies, and makes a new one.
CREATE TABLE stepgate.invocation_key (
    id         text        PRIMARY KEY,
    secret     bytea       NOT NULL CHECK (octet_length(secret) >= 32),
    created_at timestamptz NOT NULL DEFAULT now(),
    retires_at timestamptz
);
CREATE UNIQUE INDEX invocation_key_current ON stepgate.invocation_key ((true)) WHERE retires_at IS NULL;

-- signing_key holds each tenant's keys for the requests to its functions: an Ed25519
-- private key (its 32-byte seed) and an HMAC-SHA256 secret, made on the tenant's first
-- request. Functions get only the public key (or the tenant's own HMAC secret). A
-- rotation retires the current key at the end of an overlap, during which both sign.
CREATE TABLE stepgate.signing_key (
    tenant      text        NOT NULL,
    id          text        NOT NULL,
    seed        bytea       NOT NULL CHECK (octet_length(seed) = 32),
    public_key  bytea       NOT NULL CHECK (octet_length(public_key) = 32),
    hmac_secret bytea       NOT NULL CHECK (octet_length(hmac_secret) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    retires_at  timestamptz,
    PRIMARY KEY (tenant, id)
);
CREATE UNIQUE INDEX signing_key_current ON stepgate.signing_key (tenant) WHERE retires_at IS NULL;

-- Only the system role reads them: the API pool (one tenant per transaction) never
-- touches a private key, so no query of it can leak one, whatever its tenant filter.
-- Fenced like every table (migration 0004), with no policy or grant for stepgate_app.
GRANT SELECT, INSERT, UPDATE ON stepgate.invocation_key TO stepgate_system;
GRANT SELECT, INSERT, UPDATE ON stepgate.signing_key TO stepgate_system;
ALTER TABLE stepgate.invocation_key ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
ALTER TABLE stepgate.signing_key ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY system_access ON stepgate.invocation_key TO stepgate_system USING (true);
CREATE POLICY system_access ON stepgate.signing_key TO stepgate_system USING (true);
