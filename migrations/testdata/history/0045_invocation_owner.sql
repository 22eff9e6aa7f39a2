-- One claim per invocation (issue 24, item 7: a captured signed request runs nowhere
-- twice). Before the first step body of an invocation that its journal does not hold, the
-- SDK asks the gateway whether the invocation owns its run (checkpointCurrent), sending a
-- random 128-bit nonce that the process handling the invocation request made. The first
-- nonce asked for an invocation is stored here (journal.ClaimInvocation, one UPDATE), and
-- only that nonce is answered yes: a copy of the signed request sent to another process
-- while the invocation is still the run's current one asks with another nonce and runs
-- no step body. Every statement that bumps the run's invocation (a claim for a new
-- invocation: status 'running', invocation + 1; a deadline's failure) sets it back to
-- NULL; a run created claimed starts NULL.
ALTER TABLE stepgate.run ADD COLUMN owner_nonce text;

COMMENT ON COLUMN stepgate.run.owner_nonce IS 'The nonce of the process that claimed the current invocation (checkpointCurrent): 32 lowercase hex digits, or NULL before the first question of the invocation. Set back to NULL by every statement that bumps invocation.';
