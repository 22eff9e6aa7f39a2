package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/helpers/version"
	"github.com/stepgate/stepgate/protocol"
)

func TestVersion(t *testing.T) {
	t.Parallel()

	want := "stepgate " + version.String() + " (function protocol " + protocol.Version + ")\n"
	for _, arg := range []string{"version", "--version", "-version"} {
		t.Run(strings.TrimLeft(arg, "-"), func(t *testing.T) {
			t.Parallel()
			c, stdout, stderr := newTestCLI(nil, "")
			require.NoError(t, c.run(t.Context(), []string{arg}))
			require.Equal(t, want, stdout.String())
			require.True(t, strings.HasPrefix(stdout.String(), "stepgate "+version.Version+" "), stdout.String())
			require.Empty(t, stderr.String())
		})
	}

	t.Run("Help", func(t *testing.T) {
		t.Parallel()
		c, stdout, stderr := newTestCLI(nil, "")
		require.NoError(t, c.run(t.Context(), []string{"version", "-h"}))
		require.Empty(t, stdout.String())
		require.Contains(t, stderr.String(), "Usage: stepgate version")
	})
	t.Run("NoArguments", func(t *testing.T) {
		t.Parallel()
		c, stdout, _ := newTestCLI(nil, "")
		err := c.run(t.Context(), []string{"version", "extra"})
		var uerr *usageError
		require.True(t, errors.As(err, &uerr), "%v", err)
		require.EqualError(t, err, `version: unexpected argument "extra"`)
		require.Empty(t, stdout.String())
	})
	t.Run("ListedInHelp", func(t *testing.T) {
		t.Parallel()
		c, stdout, _ := newTestCLI(nil, "")
		require.NoError(t, c.run(t.Context(), []string{"help"}))
		require.Contains(t, stdout.String(), "\n  version ")
	})
}
