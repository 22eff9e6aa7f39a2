-- name: RunClaimInvocation :one
-- Claims invocation @invocation of the running run @run_id for the process that sent
-- @nonce: the first nonce asked for the invocation is stored, and the same nonce asked
-- again is claimed again (parallel steps, a retried question). No row: the run is not
-- running under this invocation, or another nonce claimed it first.
UPDATE stepgate.run SET owner_nonce = @nonce::text
WHERE id = @run_id AND invocation = @invocation AND status = 'running'
    AND (owner_nonce IS NULL OR owner_nonce = @nonce::text)
RETURNING id;
