package main

import (
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestServerCommandsReadTheirEnvironment: serve, dev and migrate read the cli's
// environment, not the process's, and report to the cli's stderr.
func TestServerCommandsReadTheirEnvironment(t *testing.T) {
	t.Parallel()
	secret := strings.Repeat("s", 32)
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		err  string
	}{
		{"ServeNeedsADatabase", []string{"serve"}, nil, "serve needs:\n  DATABASE_URL"},
		{"ServeChecksTheSecret", []string{"serve"}, map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/x", "STEPGATE_JWT_SECRET": "short"},
			"STEPGATE_JWT_SECRET: secret 1 is 5 bytes"},
		{"ServeParsesTheDatabaseURL", []string{"serve"}, map[string]string{"DATABASE_URL": "postgres://%zz", "STEPGATE_JWT_SECRET": secret},
			"DATABASE_URL: "},
		{"DevReadsItsSettings", []string{"dev", "--dir", "unused"}, map[string]string{"STEPGATE_LOG_LEVEL": "loud"},
			`STEPGATE_LOG_LEVEL "loud" is not one of`},
		{"MigrateNeedsADatabase", []string{"migrate"}, nil, "migrate needs DATABASE_URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, _, _ := newTestCLI(tc.env, "")
			require.ErrorContains(t, c.run(t.Context(), tc.args), tc.err)
		})
	}

	t.Run("FlagErrorsGoToTheCLIsStderr", func(t *testing.T) {
		t.Parallel()
		c, _, stderr := newTestCLI(nil, "")
		require.ErrorIs(t, c.run(t.Context(), []string{"serve", "--bogus"}), errFlagsReported)
		require.Contains(t, stderr.String(), "flag provided but not defined: -bogus")
	})
}

// TestMetricsSettings: STEPGATE_METRICS_ADDR and STEPGATE_METRICS_TENANT_LABEL reach the
// gateway process's config; a label setting that is not 1 or 0 is refused, named.
func TestMetricsSettings(t *testing.T) {
	t.Parallel()
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	c, err := readServerConfig(env("STEPGATE_METRICS_ADDR", "127.0.0.1:9090", "STEPGATE_METRICS_TENANT_LABEL", "1"))
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1:9090", c.metricsAddr)
	require.True(t, c.metrics.TenantLabel)
	c, err = readServerConfig(env())
	require.NoError(t, err)
	require.Empty(t, c.metricsAddr, "off by default")
	require.False(t, c.metrics.TenantLabel, "no tenant label by default")
	_, err = readServerConfig(env("STEPGATE_METRICS_TENANT_LABEL", "yes"))
	require.ErrorContains(t, err, `STEPGATE_METRICS_TENANT_LABEL "yes" is not 1 or 0`)
}

// TestServeLogsJSON: serve's logger writes JSON lines, dev's text.
func TestServeLogsJSON(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	newLogger(&b, slog.LevelInfo, true).Info("run finished", slog.String("run_id", "r1"))
	require.True(t, json.Valid([]byte(strings.TrimSpace(b.String()))), b.String())
	require.Contains(t, b.String(), `"run_id":"r1"`)
	b.Reset()
	newLogger(&b, slog.LevelInfo, false).Info("run finished", slog.String("run_id", "r1"))
	require.Contains(t, b.String(), "run_id=r1")
}

// TestOperatorRole: serve and dev refuse an operator role that a tenant's tokens carry
// (a built-in role or a permission name, in any case), naming the variable; serve warns
// at start when the operator role is open to every tenant (no STEPGATE_OPERATOR_TENANT).
func TestOperatorRole(t *testing.T) {
	t.Parallel()
	secret := strings.Repeat("s", 32)
	for _, role := range []string{"admin", "Admin", "developer", "operator", "invoker", "viewer", "runs:manage", "functions:write", "EVENTS:SEND"} {
		for _, cmd := range [][]string{{"serve"}, {"dev", "--dir", t.TempDir()}} {
			t.Run(role+"/"+cmd[0], func(t *testing.T) {
				t.Parallel()
				c, _, _ := newTestCLI(map[string]string{"DATABASE_URL": "postgres://127.0.0.1:1/x", "STEPGATE_JWT_SECRET": secret,
					"STEPGATE_OPERATOR_ROLE": role, "STEPGATE_OPERATOR_TENANT": "platform"}, "")
				err := c.run(t.Context(), cmd)
				require.ErrorContains(t, err, `STEPGATE_OPERATOR_ROLE "`+role+`" is a`)
				require.ErrorContains(t, err, "choose a role only your platform's operators hold")
			})
		}
	}

	// A database URL serve cannot parse stops it just after its start's warnings.
	serve := func(t *testing.T, env map[string]string) string {
		t.Helper()
		env["DATABASE_URL"], env["STEPGATE_JWT_SECRET"] = "postgres://%zz", secret
		c, _, stderr := newTestCLI(env, "")
		require.ErrorContains(t, c.run(t.Context(), []string{"serve"}), "DATABASE_URL: ")
		return stderr.String()
	}
	t.Run("WarnsWithNoOperatorTenant", func(t *testing.T) {
		t.Parallel()
		out := serve(t, map[string]string{"STEPGATE_OPERATOR_ROLE": "platform-ops"})
		require.Contains(t, out, `"level":"WARN"`)
		require.Contains(t, out, "STEPGATE_OPERATOR_TENANT is unset")
		require.Contains(t, out, `"operator_role":"platform-ops"`)
		require.NotContains(t, serve(t, map[string]string{"STEPGATE_OPERATOR_ROLE": "platform-ops", "STEPGATE_OPERATOR_TENANT": "platform"}), "STEPGATE_OPERATOR_TENANT")
		require.NotContains(t, serve(t, map[string]string{}), "STEPGATE_OPERATOR_TENANT", "no operator role, no operator: nothing to warn of")
	})
}

// TestSyncStartCapSettings: STEPGATE_MAX_SYNC_STARTS_PER_TENANT and …_PER_SUBJECT reach
// the gateway process's config, apart from the streams' caps; unset, they are zero (the
// gateway's defaults); one that is not a number is refused, named.
func TestSyncStartCapSettings(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"DATABASE_URL": "postgres://127.0.0.1:1/x", "STEPGATE_JWT_SECRET": strings.Repeat("s", 32),
		"STEPGATE_MAX_SYNC_STARTS_PER_TENANT": "300", "STEPGATE_MAX_SYNC_STARTS_PER_SUBJECT": "30",
		"STEPGATE_MAX_STREAMS_PER_SUBJECT": "5",
	}
	c, err := readServerConfig(func(k string) string { return env[k] })
	require.NoError(t, err)
	p, err := c.process(nil)
	require.NoError(t, err)
	require.Equal(t, 300, p.MaxSyncStartsPerTenant)
	require.Equal(t, 30, p.MaxSyncStartsPerSubject)
	require.Equal(t, 5, p.MaxStreamsPerSubject)

	c, err = readServerConfig(func(string) string { return "" })
	require.NoError(t, err)
	require.Zero(t, c.maxSyncStartsPerTenant)
	require.Zero(t, c.maxSyncStartsPerSubject)

	_, err = readServerConfig(func(k string) string {
		if k == "STEPGATE_MAX_SYNC_STARTS_PER_SUBJECT" {
			return "many"
		}
		return ""
	})
	require.ErrorContains(t, err, "STEPGATE_MAX_SYNC_STARTS_PER_SUBJECT")
}

// TestReadURLConfig: STEPGATE_DATABASE_READ_URL is optional and may name several hosts;
// STEPGATE_DATABASE_READ_MAX_LAG defaults to 1s, 0s sends every read to the primary,
// and one out of 0s..1m stops the start with an error naming the variable.
func TestReadURLConfig(t *testing.T) {
	t.Parallel()
	env := func(kv ...string) func(string) string {
		m := map[string]string{"DATABASE_URL": "postgres://u@primary/db", "STEPGATE_JWT_SECRET": testSecret}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	c, err := readServerConfig(env())
	require.NoError(t, err)
	pc, err := c.process(slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Nil(t, pc.ReadDatabase, "no replicas by default")

	c, err = readServerConfig(env("STEPGATE_DATABASE_READ_URL", "postgres://u@r1:5433,r2:5434/db"))
	require.NoError(t, err)
	require.Equal(t, time.Second, c.readMaxLag)
	pc, err = c.process(slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NotNil(t, pc.ReadDatabase)
	require.Equal(t, "r1", pc.ReadDatabase.ConnConfig.Host)
	require.Equal(t, time.Second, pc.ReadMaxLag)

	c, err = readServerConfig(env("STEPGATE_DATABASE_READ_URL", "postgres://u@r1/db", "STEPGATE_DATABASE_READ_MAX_LAG", "250ms"))
	require.NoError(t, err)
	require.Equal(t, 250*time.Millisecond, c.readMaxLag)
	c, err = readServerConfig(env("STEPGATE_DATABASE_READ_MAX_LAG", "0s"))
	require.NoError(t, err)
	require.Negative(t, c.readMaxLag, "0s: every read on the primary")
	for _, bad := range []string{"2m", "-1s", "soon"} {
		_, err = readServerConfig(env("STEPGATE_DATABASE_READ_MAX_LAG", bad))
		require.ErrorContains(t, err, "STEPGATE_DATABASE_READ_MAX_LAG "+strconv.Quote(bad)+" is not a duration from 0s to 1m0s")
	}
	c, err = readServerConfig(env("STEPGATE_DATABASE_READ_URL", "postgres://u@r1:notaport/db"))
	require.NoError(t, err)
	_, err = c.process(slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "STEPGATE_DATABASE_READ_URL")
}

// TestServeWarnsOfOpenedLoopbackAndMetadata: serve starts with a warning for each
// allowed network that opens loopback or a cloud metadata range, naming the ranges
// (0.0.0.0/0: loopback opened, the metadata ranges it contains refused); a network
// that opens neither warrants none.
func TestServeWarnsOfOpenedLoopbackAndMetadata(t *testing.T) {
	t.Parallel()
	// A database URL serve cannot parse stops it just after its start's warnings.
	serve := func(t *testing.T, env map[string]string) string {
		t.Helper()
		env["DATABASE_URL"], env["STEPGATE_JWT_SECRET"] = "postgres://%zz", strings.Repeat("s", 32)
		c, _, stderr := newTestCLI(env, "")
		require.ErrorContains(t, c.run(t.Context(), []string{"serve"}), "DATABASE_URL: ")
		return stderr.String()
	}
	out := serve(t, map[string]string{"STEPGATE_ALLOWED_NETWORKS": "0.0.0.0/0"})
	require.Contains(t, out, `"level":"WARN"`)
	require.Contains(t, out, "STEPGATE_ALLOWED_NETWORKS: allowed network 0.0.0.0/0 opens loopback (127.0.0.0/8)")
	require.Contains(t, out, "169.254.0.0/16")
	require.Contains(t, out, "cloud metadata")

	out = serve(t, map[string]string{"STEPGATE_TENANT_NETWORKS": "acme=169.254.169.254"})
	require.Contains(t, out, `STEPGATE_TENANT_NETWORKS: tenant \"acme\"'s network 169.254.169.254/32 opens the cloud metadata or link-local range 169.254.169.254/32`)

	require.NotContains(t, serve(t, map[string]string{"STEPGATE_ALLOWED_NETWORKS": "10.0.0.0/8"}), `"level":"WARN"`)
}
