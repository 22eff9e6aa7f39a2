-- name: TenantActAs :exec
-- CASE evaluates in order: no membership test of a role that does not exist.
SELECT CASE WHEN to_regrole(@role) IS NULL THEN NULL
    WHEN pg_has_role(session_user, @role, 'MEMBER') THEN set_config('role', @role, false) END;

-- name: TenantCheckFence :one
SELECT current_user::text AS user_name, rolsuper OR rolbypassrls AS bypassed FROM pg_catalog.pg_roles WHERE rolname = current_user;

-- name: TenantSet :exec
-- Sets the tenant setting (stepgate.tenant) for the transaction.
SELECT set_config('stepgate.tenant', @tenant, true);
