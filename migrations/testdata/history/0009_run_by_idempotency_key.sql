-- Finding a tenant's runs by idempotency key, whatever their function (GET /v1/runs?
-- idempotency_key=, the dashboard's search). Only runs with a key are indexed.
CREATE INDEX run_by_idempotency_key ON stepgate.run (tenant, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
