package invoker

import (
	"os"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/stepgate/stepgate/protocol"
)

// TestEveryAwaitTypeIsRegistered: each await type of the protocol (openapi.yaml's
// AwaitType) has its kind in awaitKinds, registered by its own file, and nothing else
// is registered; each checkpoint kind is an entry kind of the protocol.
func TestEveryAwaitTypeIsRegistered(t *testing.T) {
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
	awaits := spec.Components.Schemas["AwaitType"].Enum
	require.NotEmpty(t, awaits)
	var registered []string
	for typ := range awaitKinds {
		registered = append(registered, string(typ))
	}
	slices.Sort(awaits)
	slices.Sort(registered)
	require.Equal(t, awaits, registered)
	entries := spec.Components.Schemas["EntryKind"].Enum
	require.NotEmpty(t, entries)
	for kind := range checkpointKinds {
		require.Contains(t, entries, string(kind), "checkpoint kind %q is not an entry kind of the protocol", kind)
	}
	require.Contains(t, checkpointKinds, protocol.EntryKindStep)
}
