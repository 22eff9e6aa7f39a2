package gateway

import (
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/journal"
	"github.com/stepgate/stepgate/protocol"
)

// jsonFields returns the JSON names of t's fields.
func jsonFields(t reflect.Type) []string {
	var out []string
	for f := range t.Fields() {
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// TestAwaitingIsTheAPIs: what a run awaits, as stored (journal.Awaiting), has the API's
// fields (protocol.Awaiting, from openapi.yaml), so awaitingToAPI copies every kind's
// fields by their JSON; and it does, for an await_run and a wait_any of one.
func TestAwaitingIsTheAPIs(t *testing.T) {
	t.Parallel()
	require.ElementsMatch(t, jsonFields(reflect.TypeFor[protocol.Awaiting]()), jsonFields(reflect.TypeFor[journal.Awaiting]()))

	run := "0190a0c1-0000-7000-8000-000000000000"
	got := awaitingToAPI(&journal.Awaiting{Kind: "wait_any", Seq: 3, Name: "first", Of: []journal.Awaiting{
		{Kind: "await_run", Seq: 3, Name: "first", RunID: run},
		{Kind: "wait_event", Seq: 3, Name: "first", Event: "paid", Match: []byte(`{"data.order":"o-1"}`)},
	}})
	require.Equal(t, protocol.AwaitingKindWaitAny, got.Kind)
	require.Len(t, *got.Of, 2)
	require.Equal(t, run, *(*got.Of)[0].RunID)
	require.JSONEq(t, `"o-1"`, string((*(*got.Of)[1].Match)["data.order"]))
	require.Nil(t, (*got.Of)[0].Attempt, "a field the stored form leaves out is absent")
	require.Nil(t, awaitingToAPI(nil))
}
