package gateway_test

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/internal/helpers/egress"
	"github.com/stepgate/stepgate/internal/helpers/egress/egresstest"
	"github.com/stepgate/stepgate/internal/wiring/stack"
	"github.com/stepgate/stepgate/protocol"
)

// registerURL registers function name at url as c's tenant, with fastRetries.
func registerURL(t *testing.T, c *protocol.ClientWithResponses, name, url string) {
	t.Helper()
	resp, err := c.RegisterFunctionWithResponse(t.Context(), name, protocol.FunctionRegistration{URL: url, Config: fastRetries})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode(), string(resp.Body))
}

// TestPrivateFunctionFailuresShowStatusAndSize: with loopback opened as an operator
// opens a private network (no STEPGATE_PRIVATE_ERROR_DETAIL), a function there that
// answers HTTP 500 with a secret, or a manifest request answered so, shows the tenant
// the status and the size, never the body; the gateway's log has the body.
func TestPrivateFunctionFailuresShowStatusAndSize(t *testing.T) {
	t.Parallel()
	const secret = "postgres://admin:hunter2@10.0.0.5/prod"
	logs := &syncBuffer{}
	s := stack.Start(t, stack.Options{Egress: &stack.PrivateLoopback, Logs: logs})
	c := s.Client(t, s.Token)
	leaky := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, secret, http.StatusInternalServerError)
	})
	register(t, s, c, "leaky", leaky, fastRetries)
	e := mustFail(t, c, "leaky")
	require.Equal(t, "http_status", e.Type)
	require.NotContains(t, e.Message, "hunter2")
	require.NotContains(t, e.Message, "postgres")
	require.Contains(t, e.Message, "function answered HTTP 500 with "+strconv.Itoa(len(secret)+1)+" bytes (the function is not on the public internet")

	bad := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, secret) })
	register(t, s, c, "not-json", bad, fastRetries)
	e = mustFail(t, c, "not-json")
	require.NotContains(t, e.Message, "hunter2")
	require.Contains(t, e.Message, "function answered HTTP 200 with "+strconv.Itoa(len(secret))+" bytes, which failed as malformed_answer")

	sync, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: s.ServeApp(t, leaky)})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadGateway, sync.StatusCode())
	require.NotContains(t, string(sync.Body), "hunter2")
	require.Contains(t, sync.ApplicationProblemJSON502.Detail, "the app answered HTTP 500 with "+strconv.Itoa(len(secret)+1)+" bytes to the manifest request")

	require.Contains(t, logs.String(), "hunter2", "the operator's log has the whole failure")
}

// TestPrivateClosedAndOpenPortsLookAlike: to a function outside the public internet,
// a closed port, an open port that closes the connection and an open port that answers
// something that is not HTTP fail runs with the same error, so that runs do not scan
// the operator's network.
func TestPrivateClosedAndOpenPortsLookAlike(t *testing.T) {
	t.Parallel()
	s := stack.Start(t, stack.Options{Egress: &stack.PrivateLoopback})
	c := s.Client(t, s.Token)

	closed, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedURL := "http://" + closed.Addr().String() + "/"
	require.NoError(t, closed.Close())
	hangUp := listenTCP(t, func(conn net.Conn) {})
	banner := listenTCP(t, func(conn net.Conn) { _, _ = io.WriteString(conn, "SSH-2.0-OpenSSH_9.6\r\n") })

	errs := map[string]protocol.ErrorInfo{}
	for name, url := range map[string]string{"closed": closedURL, "hang-up": hangUp, "banner": banner} {
		registerURL(t, c, name, url)
		errs[name] = mustFail(t, c, name)
	}
	require.Equal(t, errs["closed"], errs["hang-up"])
	require.Equal(t, errs["closed"], errs["banner"])
	require.Equal(t, "connection", errs["closed"].Type)
	require.NotContains(t, errs["closed"].Message, "refused")
	require.NotContains(t, errs["closed"].Message, "127.0.0.1")
}

// listenTCP serves raw TCP on loopback until the test ends: each connection is passed
// to serve, then closed. It returns the listener's URL.
func listenTCP(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer conn.Close()
				serve(conn)
			})
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return "http://" + ln.Addr().String() + "/"
}

// TestTenantNetworks: a network opened to one tenant (STEPGATE_TENANT_NETWORKS) is
// that tenant's: its functions and apps there are registered and called; another
// tenant's are refused at registration, naming the address.
func TestTenantNetworks(t *testing.T) {
	t.Parallel()
	policy := egress.Policy{TenantNetworks: map[string][]netip.Prefix{"granted": {netip.MustParsePrefix("127.0.0.0/8")}}}
	s := stack.Start(t, stack.Options{Egress: &policy})
	granted := s.Client(t, s.NewToken(t, auth.Identity{Subject: "ann", Tenant: "granted", Roles: []string{"admin"}}))
	other := s.Client(t, s.NewToken(t, auth.Identity{Subject: "eve", Tenant: "other", Roles: []string{"admin"}}))
	var calls atomic.Int32
	url := s.ServeApp(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		_, _ = io.WriteString(w, `{"status":"completed","output":"inside"}`)
	}))

	registerURL(t, granted, "inside", url)
	res := startWaiting(t, granted, "inside", `{}`)
	require.Equal(t, protocol.RunStatusCompleted, res.Status)

	reg, err := other.RegisterFunctionWithResponse(t.Context(), "inside", protocol.FunctionRegistration{URL: url})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, reg.StatusCode(), string(reg.Body))
	require.Contains(t, reg.ApplicationProblemJSON400.Detail, "is a loopback address, which this gateway does not dial")
	sync, err := other.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: url})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, sync.StatusCode(), string(sync.Body))
	require.EqualValues(t, 1, calls.Load(), "only the granted tenant's run reached the network")
	require.False(t, strings.Contains(string(reg.Body), "inside\""), "nothing of the function leaks")
}

// TestRegistrationNamesNoResolvedAddress: registering a function or syncing an app
// whose host name resolves to an address the gateway does not dial is refused saying
// what kind of address, never which: at registration (the check of the URL) and when
// the dial itself is refused (an allowed host that resolves to cloud metadata).
func TestRegistrationNamesNoResolvedAddress(t *testing.T) {
	t.Parallel()
	dns := egresstest.NewDNS(map[string][]string{
		"private.example": {"fd00:ec2::254"},
		"meta.example":    {"169.254.169.254"},
	})
	policy := egress.Policy{AllowedHosts: []string{"meta.example"}, AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0")}, Resolver: dns.Resolver()}
	s := stack.Start(t, stack.Options{Egress: &policy})
	c := s.Client(t, s.Token)

	reg, err := c.RegisterFunctionWithResponse(t.Context(), "inside", protocol.FunctionRegistration{URL: "http://private.example:8080/fn"})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, reg.StatusCode(), string(reg.Body))
	require.Contains(t, reg.ApplicationProblemJSON400.Detail, `url host "private.example" resolves to a cloud metadata address, which this gateway does not dial`)
	require.NotContains(t, string(reg.Body), "fd00")

	sync, err := c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: "http://private.example/"})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadRequest, sync.StatusCode(), string(sync.Body))
	require.NotContains(t, string(sync.Body), "fd00")

	// An allowed host passes the URL check unresolved; its dial is refused.
	sync, err = c.SyncAppWithResponse(t.Context(), nil, protocol.AppSync{URL: "http://meta.example/latest/"})
	require.NoError(t, err)
	require.Equal(t, http.StatusBadGateway, sync.StatusCode(), string(sync.Body))
	require.Contains(t, sync.ApplicationProblemJSON502.Detail, "the host resolves to a cloud metadata address, which this gateway does not dial")
	require.NotContains(t, string(sync.Body), "169.254")
}
