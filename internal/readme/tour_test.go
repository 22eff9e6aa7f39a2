package readme

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
		if b.whole && strings.Contains(b.code, `functions.Register(app, "orders.refund", refund,`) {
			tour = &b
		}
	}
	require.NotNil(t, tour, "no whole Go block in README.md registers orders.refund")
	require.Contains(t, tour.src, tourAddr, "the tour's program listens elsewhere: update the test")
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
	var addr string
	for try := 1; ; try++ {
		addr = freeAddr(t)
		pkg := writeBlock(t, blockDir(t, root), "tour", strings.Replace(tour.src, tourAddr, `"`+addr+`"`, 1))
		bin := filepath.Join(pkg, "tour")
		goCommand(t, root, "build", "-o", bin, "./"+filepath.ToSlash(mustRel(t, root, pkg)))
		if runTour(t, bin, addr, pubs) {
			break
		}
		require.Less(t, try, 5, "the tour's program found its port taken 5 times")
	}

	// apps sync, once the program listens.
	appURL := "http://" + addr + "/"
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

// runTour runs the tour's program bin with the gateway's public keys, until the test
// ends, and returns once it listens on addr (true), or once it has exited because
// another process took addr first (false).
func runTour(t *testing.T, bin, addr string, pubs []string) bool {
	var out bytes.Buffer
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "STEPGATE_PUBLIC_KEYS="+strings.Join(pubs, ","))
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("the tour's program said:\n%s", out.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			require.Contains(t, out.String(), "address already in use", "the tour's program exited")
			return false
		default:
		}
		if listensOn(t, cmd.Process.Pid, addr) {
			return true
		}
		select {
		case <-exited:
		case <-time.After(10 * time.Millisecond):
		}
	}
	t.Fatalf("the tour's program did not listen on %s in 30s", addr)
	return false
}

// listensOn reports whether process pid holds the listening TCP socket of addr (IPv4),
// from /proc: a listener of another process on addr does not count.
func listensOn(t *testing.T, pid int, addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	table, err := os.ReadFile("/proc/net/tcp")
	require.NoError(t, err)
	inode := ""
	for line := range strings.Lines(string(table)) {
		f := strings.Fields(line)
		// local_address is HEX_IP:HEX_PORT; state 0A is LISTEN; the inode is field 9.
		if len(f) > 9 && f[3] == "0A" && strings.HasSuffix(f[1], fmt.Sprintf(":%04X", p)) {
			inode = f[9]
		}
	}
	if inode == "" {
		return false
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false // it exited
	}
	for _, fd := range fds {
		if link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && link == "socket:["+inode+"]" {
			return true
		}
	}
	return false
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
