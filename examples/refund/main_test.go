package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/examples/internal/programtest"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

func TestMain(m *testing.M) { stack.Main(m) }

// addr is where the program listens; the test serves it on a free port.
const addr = `"127.0.0.1:9090"`

// TestProgram builds the program (the README tour's), runs it with the public keys of a
// real gateway's tenant as STEPGATE_PUBLIC_KEYS, syncs it and starts orders.refund as
// the tour's step 3 does: the run journals its refund step and sleeps for an hour, as
// the tour says.
func TestProgram(t *testing.T) {
	t.Parallel()
	root := programtest.ModuleRoot(t)
	src, err := os.ReadFile(filepath.Join(root, "examples", "refund", "main.go"))
	require.NoError(t, err)
	require.Contains(t, string(src), addr, "the program listens elsewhere: update the test")
	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	keys, err := c.ListSigningKeysWithResponse(t.Context())
	require.NoError(t, err)
	require.NotNil(t, keys.JSON200, string(keys.Body))
	var pubs []string
	for _, k := range keys.JSON200.Keys {
		pubs = append(pubs, k.X)
	}

	// The program listens on a port that was free when the test picked it: another
	// process may take it first, and then the program exits at once, saying so; it is
	// built again for another port.
	var listen string
	for try := 1; ; try++ {
		listen = programtest.FreeAddr(t)
		bin := programtest.Build(t, "examples/refund", map[string]string{
			"main.go": strings.Replace(string(src), addr, `"`+listen+`"`, 1),
		})
		p := programtest.Start(t, bin, "STEPGATE_PUBLIC_KEYS="+strings.Join(pubs, ","))
		if p.AwaitListen(t, listen) {
			break
		}
		require.Less(t, try, 5, "the program found its port taken 5 times")
	}

	// apps sync, once the program listens.
	appURL := "http://" + listen + "/"
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		resp, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: appURL})
		if assert.NoError(ct, err) {
			assert.Equal(ct, http.StatusOK, resp.StatusCode(), string(resp.Body))
		}
	}, 30*time.Second, 20*time.Millisecond)

	started, err := c.StartRunWithBodyWithResponse(t.Context(), "orders.refund", nil, "application/json",
		strings.NewReader(`{"order_id":"o1","amount":500}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, started.StatusCode(), string(started.Body))
	run := stack.AwaitStatus(t, c, started.JSON202.ID, protocol.RunStatusSuspended)
	require.NotNil(t, run.Awaiting)
	require.Equal(t, protocol.AwaitingKindSleep, run.Awaiting.Kind)
	require.NotEmpty(t, run.Journal)
	require.Equal(t, "refund", run.Journal[0].Name)
	require.JSONEq(t, `"rf_o1"`, string(*run.Journal[0].Output))
	require.NotNil(t, run.WakeAt)
	require.WithinDuration(t, time.Now().Add(time.Hour), *run.WakeAt, time.Minute, "it sleeps for an hour")
}
