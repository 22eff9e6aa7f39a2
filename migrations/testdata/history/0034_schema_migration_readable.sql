-- The gateway's readiness probe (GET /readyz) compares the migrations this build embeds
-- with those the database recorded; it asks through the system pool, which acts as
-- stepgate_system.
GRANT SELECT ON stepgate.schema_migration TO stepgate_system;
