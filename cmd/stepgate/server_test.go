package main

import (
	"strings"
	"testing"

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
