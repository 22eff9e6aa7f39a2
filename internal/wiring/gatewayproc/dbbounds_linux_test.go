package gatewayproc

import (
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestBoundedDialer: a bounded config's connections get a connect timeout (unless the
// URL has one), TCP keepalive and TCP_USER_TIMEOUT.
func TestBoundedDialer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	pc, err := pgxpool.ParseConfig("postgres://u@" + ln.Addr().String() + "/db")
	require.NoError(t, err)
	b := bounded(pc, 0, DefaultConnectTimeout)
	require.Equal(t, DefaultConnectTimeout, b.ConnConfig.ConnectTimeout)
	require.Equal(t, DefaultDatabaseTimeout, b.PingTimeout)
	require.Zero(t, pc.ConnConfig.ConnectTimeout, "the config given is not changed")

	c, err := b.ConnConfig.DialFunc(t.Context(), "tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	rc, err := c.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	var keepalive, idle, userTimeout int
	require.NoError(t, rc.Control(func(fd uintptr) {
		keepalive, _ = unix.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_KEEPALIVE)
		idle, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_KEEPIDLE)
		userTimeout, _ = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT)
	}))
	require.Equal(t, 1, keepalive)
	require.Equal(t, int(keepAliveIdle/time.Second), idle)
	require.Equal(t, int(tcpUserTimeout/time.Millisecond), userTimeout)

	// The URL's connect_timeout wins.
	pc, err = pgxpool.ParseConfig("postgres://u@" + ln.Addr().String() + "/db?connect_timeout=2")
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, bounded(pc, time.Second, DefaultConnectTimeout).ConnConfig.ConnectTimeout)
	require.Nil(t, bounded(nil, 0, 0))
}
