// Package entrytest helps the tests of the two conversions of a stored journal entry to
// its protocol form (the invoker's, for the function; the gateway's, for the API's
// readers) check that each maps every field.
package entrytest

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// Full returns a stored entry with every field set, so that a conversion that leaves a
// protocol field unset shows.
func Full() journal.Entry {
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	return journal.Entry{
		Seq: 3, Kind: journal.KindStep, Name: "charge", Output: json.RawMessage(`{"ok":true}`),
		Error: &journal.ErrorInfo{Type: "declined", Message: "no"}, Attempt: 2,
		WakeAt: &at, StartedAt: &at, FinishedAt: at, Copied: true, Window: 4,
	}
}

// RequireEveryField fails for each field of out left at its zero value, but those a
// stored entry never carries (Window: a checkpoint's, never stored).
func RequireEveryField(t *testing.T, out protocol.JournalEntry) {
	t.Helper()
	v := reflect.ValueOf(out)
	for i := range v.NumField() {
		if name := v.Type().Field(i).Name; name != "Window" {
			require.False(t, v.Field(i).IsZero(), "protocol.JournalEntry.%s is not mapped", name)
		}
	}
}
