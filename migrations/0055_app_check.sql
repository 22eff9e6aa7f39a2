-- The check each tenant is running of an app's new code against its live runs
-- (POST /v1/apps?check=true, gateway/check.go): a tenant runs one at a time, whichever
-- gateway serves it, as it runs one bulk operation at a time. A check takes its tenant's
-- row at its start (journal StartAppCheck) and deletes it at its end; a row past
-- expires_at (its gateway died mid-check) is taken over by the next check. app is the
-- app's URL, masked as a function's is.
CREATE TABLE stepgate.app_check (
    tenant text PRIMARY KEY,
    id uuid NOT NULL,
    subject text NOT NULL,
    app text NOT NULL,
    started_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);

ALTER TABLE stepgate.app_check ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.app_check TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.app_check TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT,UPDATE,DELETE ON TABLE stepgate.app_check TO stepgate_app;
GRANT SELECT,INSERT,UPDATE,DELETE ON TABLE stepgate.app_check TO stepgate_system;
