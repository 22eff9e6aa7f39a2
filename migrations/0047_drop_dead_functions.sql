-- Functions nothing calls any more (no Go code, trigger or other function), which
-- migrations 0001-0045 left in a database they made. The baseline (0000_baseline.sql)
-- does not make them, so on a database it made this file does nothing.
--   - take_slots without p_create: 0037's signature, kept by 0039 for a gateway of an
--     older build during a rolling upgrade; every build since calls the seven-argument
--     form (journal's CreateRun, claim_slots).
--   - stripe_cap: a stripe's share of a key's limit, called only by 0037's take_slots,
--     which 0038 replaced; and slot_stripes, how many stripes a key had, called only
--     by stripe_cap. (Keys of 64 or more are counted since 0039, not striped; the
--     column run.slot_stripes stays: it records the stripe a run took of each key, 0 now.)
DROP FUNCTION IF EXISTS stepgate.take_slots(text, text, text[], integer[], timestamptz, uuid);
DROP FUNCTION IF EXISTS stepgate.stripe_cap(integer, integer);
DROP FUNCTION IF EXISTS stepgate.slot_stripes(integer);
