-- Each function's last check of an app's new code against its live runs
-- (POST /v1/apps?check=true, gateway/check.go): one row per function, replaced by the
-- next check. result is the check's FunctionCheck (openapi.yaml) as the API shows it.
CREATE TABLE stepgate.function_check (
    tenant text NOT NULL,
    function text NOT NULL,
    checked_at timestamptz NOT NULL DEFAULT now(),
    subject text NOT NULL,
    registered boolean NOT NULL,
    forced boolean NOT NULL,
    result jsonb NOT NULL,
    PRIMARY KEY (tenant, function)
);

ALTER TABLE stepgate.function_check ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;

CREATE POLICY system_access ON stepgate.function_check TO stepgate_system USING (true);

CREATE POLICY tenant_isolation ON stepgate.function_check TO stepgate_app USING ((tenant = NULLIF(current_setting('stepgate.tenant'::text, true), ''::text)));

GRANT SELECT,INSERT,UPDATE ON TABLE stepgate.function_check TO stepgate_app;
GRANT SELECT,INSERT,UPDATE,DELETE ON TABLE stepgate.function_check TO stepgate_system;
