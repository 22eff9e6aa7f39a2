package gateway

import (
	"testing"

	"github.com/stepgate/stepgate/internal/tooling/entrytest"
)

// TestEntryForReadersMapsEveryField: the readers' conversion sets every field of the
// protocol entry a stored entry has (the invoker's entryToAPI, for the function, is
// checked the same way), so a field added to one side is not forgotten by the other.
func TestEntryForReadersMapsEveryField(t *testing.T) {
	entrytest.RequireEveryField(t, entryForReaders(entrytest.Full()))
}
