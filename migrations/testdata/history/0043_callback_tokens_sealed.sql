-- A callback entry's output held its token in clear ({"url": ".../v1/callbacks/<token>",
-- "token": "<token>", "expires_at"}): the API masked it, but anyone reading the journal
-- table (the API's role, a backup, a dump) read the credential that resolves the
-- callback. From now on the token is nowhere in the database in clear: stepgate.callback
-- keeps its SHA-256 for the lookup (as before), and the entry keeps its url and token
-- masked ("xxxxx") with "sealed", base64url (no padding) of a 16-byte random salt then
-- the token's bytes XORed with the keystream
--   sha256(key || salt || '\x00') || sha256(key || salt || '\x01') || ...
-- where key is callback_key's secret, which only the gateways' system role reads. The
-- gateway opens it for the run's own function (its invocations' journal, its checkpoint's
-- answer), so a replay returns the same handle (journal.CallbackKey).
CREATE TABLE stepgate.callback_key (
    one        boolean     PRIMARY KEY DEFAULT true CHECK (one),
    secret     bytea       NOT NULL CHECK (octet_length(secret) = 32),
    created_at timestamptz NOT NULL DEFAULT now()
);
-- Only the system role reads it, as migration 0010's keys.
GRANT SELECT ON stepgate.callback_key TO stepgate_system;
ALTER TABLE stepgate.callback_key ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY system_access ON stepgate.callback_key TO stepgate_system USING (true);

-- 256 bits hashed from three random UUIDs (366 bits from the server's strong random
-- source: gen_random_uuid uses it).
INSERT INTO stepgate.callback_key (secret)
SELECT sha256(uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()));

-- seal_callback_token returns salt || the token XORed with the keystream above; this
-- migration's only, dropped below.
CREATE FUNCTION stepgate.seal_callback_token(key bytea, salt bytea, token bytea) RETURNS bytea
LANGUAGE sql AS $$
    SELECT salt || coalesce(string_agg(
        set_byte('\x00'::bytea, 0,
            get_byte(token, i) # get_byte(sha256(key || salt || set_byte('\x00'::bytea, 0, i / 32)), i % 32)),
        ''::bytea ORDER BY i), ''::bytea)
    FROM generate_series(0, length(token) - 1) AS i
$$;

-- The callback entries journaled so far, their copies in reruns included, are sealed in
-- place: the one update of journal entries, which mean to their functions what they did.
ALTER TABLE stepgate.journal_entry DISABLE TRIGGER journal_entry_is_immutable;
UPDATE stepgate.journal_entry e
SET output = jsonb_build_object(
        'url', regexp_replace(e.output->>'url', '[^/]*$', 'xxxxx'),
        'token', 'xxxxx',
        'expires_at', e.output->'expires_at',
        'sealed', rtrim(translate(replace(encode(stepgate.seal_callback_token(
            k.secret, uuid_send(gen_random_uuid()), convert_to(e.output->>'token', 'UTF8')), 'base64'), E'\n', ''), '+/', '-_'), '='))
FROM stepgate.callback_key k
WHERE e.kind = 'callback' AND jsonb_typeof(e.output) = 'object' AND NOT e.output ? 'sealed'
    AND coalesce(e.output->>'token', '') NOT IN ('', 'xxxxx')
    AND right(e.output->>'url', length(e.output->>'token') + 1) = '/' || (e.output->>'token');
ALTER TABLE stepgate.journal_entry ENABLE TRIGGER journal_entry_is_immutable;

DROP FUNCTION stepgate.seal_callback_token(bytea, bytea, bytea);
