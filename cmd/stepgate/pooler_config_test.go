package main

import (
	"log/slog"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/wiring/gatewayproc"
)

// TestPoolerConfig: STEPGATE_DATABASE_POOLER is none (the default), session or
// transaction, anything else an error naming it; STEPGATE_DATABASE_LISTEN_URL is taken
// with transaction only; behind a transaction pooler a DATABASE_URL that asks for named
// prepared statements is refused, and one that says nothing uses cache_describe.
func TestPoolerConfig(t *testing.T) {
	t.Parallel()
	env := func(kv ...string) func(string) string {
		m := map[string]string{"DATABASE_URL": "postgres://u@pgbouncer:6432/db", "STEPGATE_JWT_SECRET": testSecret}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	log := slog.New(slog.DiscardHandler)
	for _, v := range []string{"", "none", "session"} {
		c, err := readServerConfig(env("STEPGATE_DATABASE_POOLER", v))
		require.NoError(t, err, v)
		pc, err := c.process(log)
		require.NoError(t, err)
		require.Empty(t, pc.Pooler, v)
		require.Nil(t, pc.ListenDatabase)
	}
	for _, bad := range []string{"Transaction", "statement", "yes"} {
		_, err := readServerConfig(env("STEPGATE_DATABASE_POOLER", bad))
		require.ErrorContains(t, err, "STEPGATE_DATABASE_POOLER "+strconv.Quote(bad)+" is not none, session or transaction")
	}
	_, err := readServerConfig(env("STEPGATE_DATABASE_LISTEN_URL", "postgres://u@db/db"))
	require.ErrorContains(t, err, "STEPGATE_DATABASE_LISTEN_URL is set but STEPGATE_DATABASE_POOLER is not transaction")

	c, err := readServerConfig(env("STEPGATE_DATABASE_POOLER", "transaction", "STEPGATE_DATABASE_LISTEN_URL", "postgres://u@db:5432/db"))
	require.NoError(t, err)
	pc, err := c.process(log)
	require.NoError(t, err)
	require.Equal(t, gatewayproc.PoolerTransaction, pc.Pooler)
	require.Equal(t, "db", pc.ListenDatabase.ConnConfig.Host)
	require.Equal(t, pgx.QueryExecModeCacheStatement, pc.Database.ConnConfig.DefaultQueryExecMode,
		"left to gatewayproc.Start, which makes it cache_describe")

	c, err = readServerConfig(env("STEPGATE_DATABASE_POOLER", "transaction", "DATABASE_URL", "postgres://u@pgbouncer/db?default_query_exec_mode=exec"))
	require.NoError(t, err)
	pc, err = c.process(log)
	require.NoError(t, err)
	require.Equal(t, pgx.QueryExecModeExec, pc.Database.ConnConfig.DefaultQueryExecMode)
	require.Nil(t, pc.ListenDatabase, "no listen URL: the gateway polls")

	c, err = readServerConfig(env("STEPGATE_DATABASE_POOLER", "transaction", "DATABASE_URL", "postgres://u@pgbouncer/db?default_query_exec_mode=cache_statement"))
	require.NoError(t, err)
	_, err = c.process(log)
	require.ErrorContains(t, err, "default_query_exec_mode=cache_statement prepares named statements")

	c, err = readServerConfig(env("STEPGATE_DATABASE_POOLER", "transaction", "STEPGATE_DATABASE_LISTEN_URL", "postgres://u@db:notaport/db"))
	require.NoError(t, err)
	_, err = c.process(log)
	require.ErrorContains(t, err, "STEPGATE_DATABASE_LISTEN_URL")
}
