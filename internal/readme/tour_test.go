package readme

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/stack"
	"github.com/stepgate/stepgate/protocol"
)

func TestMain(m *testing.M) { stack.Main(m) }

// tourAddr is where the tour's program listens; the test serves it on a free port.
const tourAddr = `"127.0.0.1:9090"`

// TestTourProgramRuns builds the README tour's program (the block that registers
// orders.refund), runs it with the public keys of a real gateway's tenant as
// STEPGATE_PUBLIC_KEYS, syncs it and starts orders.refund as the tour's step 3 does:
// the run journals its refund step and sleeps for an hour, as the tour says.
func TestTourProgramRuns(t *testing.T) {
	root := moduleRoot(t)
	var tour *block
	for _, b := range markdownBlocks(t, root) {
		if b.whole && strings.Contains(b.code, `"orders.refund"`) {
			tour = &b
		}
	}
	require.NotNil(t, tour, "no whole Go block in README.md registers orders.refund")
	require.Contains(t, tour.src, tourAddr, "the tour's program listens elsewhere: update the test")
	addr := freeAddr(t)
	pkg := writeBlock(t, blockDir(t, root), "tour", strings.Replace(tour.src, tourAddr, `"`+addr+`"`, 1))
	bin := filepath.Join(pkg, "tour")
	goCommand(t, root, "build", "-o", bin, "./"+filepath.ToSlash(mustRel(t, root, pkg)))

	s := stack.Start(t, stack.Options{})
	c := s.Client(t, s.Token)
	keys, err := c.ListSigningKeysWithResponse(t.Context())
	require.NoError(t, err)
	require.NotNil(t, keys.JSON200, string(keys.Body))
	var pubs []string
	for _, k := range keys.JSON200.Keys {
		pubs = append(pubs, k.X)
	}

	var out bytes.Buffer
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "STEPGATE_PUBLIC_KEYS="+strings.Join(pubs, ","))
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("the tour's program said:\n%s", out.String())
		}
	})

	// apps sync, once the program listens.
	appURL := "http://" + addr + "/"
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		resp, err := c.SyncAppWithResponse(t.Context(), protocol.AppSync{URL: appURL})
		if assert.NoError(ct, err) {
			assert.Equal(ct, http.StatusOK, resp.StatusCode(), string(resp.Body))
		}
	}, 30*time.Second, 20*time.Millisecond)

	started, err := c.StartRunWithBodyWithResponse(t.Context(), "orders.refund", nil, "application/json",
		strings.NewReader(`{"order_id":"o1","amount":500}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusAccepted, started.StatusCode(), string(started.Body))
	id := started.JSON202.ID
	var run protocol.RunDetail
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		resp, err := c.GetRunWithResponse(t.Context(), id, nil)
		if assert.NoError(ct, err) && assert.NotNil(ct, resp.JSON200, string(resp.Body)) {
			run = *resp.JSON200
			assert.Equal(ct, protocol.RunStatusSuspended, run.Status)
		}
	}, 30*time.Second, 20*time.Millisecond)
	require.NotNil(t, run.Awaiting)
	require.Equal(t, protocol.AwaitingKindSleep, run.Awaiting.Kind)
	require.NotEmpty(t, run.Journal)
	require.Equal(t, "refund", run.Journal[0].Name)
	require.JSONEq(t, `"rf_o1"`, string(*run.Journal[0].Output))
	require.NotNil(t, run.WakeAt)
	require.WithinDuration(t, time.Now().Add(time.Hour), *run.WakeAt, time.Minute, "it sleeps for an hour")
}

// freeAddr returns a loopback address with a port no one listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}
