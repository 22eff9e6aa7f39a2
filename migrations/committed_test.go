package migrations_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCommittedMigrationsAreUnchanged: every migration's SHA-256 is recorded in
// committed.sha256 when it is committed, and a migration whose text no longer has its
// recorded sum fails here — in the suite, not first on a database that applied the old
// text (Up refuses that one too, naming the file). A new migration fails until its line
// is added; a recorded one that is gone fails too (a migration is never removed).
func TestCommittedMigrationsAreUnchanged(t *testing.T) {
	t.Parallel()
	f, err := os.Open("committed.sha256")
	require.NoError(t, err)
	defer f.Close()
	recorded := map[string]string{}
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		line := lines.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sum, name, ok := strings.Cut(line, "  ")
		require.True(t, ok, "committed.sha256: %q is not `<sha256>  <file>`", line)
		recorded[name] = sum
	}
	require.NoError(t, lines.Err())

	files, err := filepath.Glob("[0-9][0-9][0-9][0-9]_*.sql")
	require.NoError(t, err)
	for _, name := range files {
		text, err := os.ReadFile(name)
		require.NoError(t, err)
		sum := sha256.Sum256(text)
		got := hex.EncodeToString(sum[:])
		want, ok := recorded[name]
		if !ok {
			t.Errorf("%s is not in committed.sha256: commit it with the line\n%s  %s", name, got, name)
			continue
		}
		require.Equal(t, want, got, "%s changed after it was committed: a committed migration is never edited; write a new one", name)
		delete(recorded, name)
	}
	require.Empty(t, recorded, "committed.sha256 records migrations that are gone; a migration is never removed")
}
