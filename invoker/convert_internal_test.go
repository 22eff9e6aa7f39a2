package invoker

import (
	"testing"

	"github.com/stepgate/stepgate/internal/tooling/entrytest"
)

// TestEntryToAPIMapsEveryField: the function's conversion sets every field of the
// protocol entry a stored entry has (the gateway's entryForReaders is checked the same
// way), so a field added to one side is not forgotten by the other.
func TestEntryToAPIMapsEveryField(t *testing.T) {
	entrytest.RequireEveryField(t, entryToAPI(entrytest.Full()))
}
