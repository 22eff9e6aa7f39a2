package output

import (
	"strings"
	"testing"

	"github.com/stepgate/stepgate/journal/internal/dbsqlc"
)

// TestQueriesSpellTheKinds checks that the named queries spell out the kind and the
// channel that output's constants name.
func TestQueriesSpellTheKinds(t *testing.T) {
	for _, c := range []struct {
		query, literal string
	}{
		{dbsqlc.ValueGet, KindValue},
		{dbsqlc.ValueList, KindValue},
		{dbsqlc.OutputNotify, OutputChannel},
	} {
		if !strings.Contains(c.query, "'"+c.literal+"'") {
			t.Errorf("%q does not name '%s':\n%s", strings.SplitN(c.query, "\n", 2)[0], c.literal, c.query)
		}
	}
}
