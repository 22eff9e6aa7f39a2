package invoker

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/stepgate/stepgate/protocol"
)

// TestEveryCheckpointKindIsAnEntryKind: each checkpoint kind is an entry kind of the
// protocol (openapi.yaml's EntryKind). The await kinds are protocol/awaits'.
func TestEveryCheckpointKindIsAnEntryKind(t *testing.T) {
	raw, err := os.ReadFile("../openapi.yaml")
	require.NoError(t, err)
	var spec struct {
		Components struct {
			Schemas map[string]struct {
				Enum []string `yaml:"enum"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(raw, &spec))
	entries := spec.Components.Schemas["EntryKind"].Enum
	require.NotEmpty(t, entries)
	for kind := range checkpointKinds {
		require.Contains(t, entries, string(kind), "checkpoint kind %q is not an entry kind of the protocol", kind)
	}
	require.Contains(t, checkpointKinds, protocol.EntryKindStep)
}
