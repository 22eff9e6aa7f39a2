package egress_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/helpers/egress"
)

func TestParseTenantNetworks(t *testing.T) {
	t.Parallel()
	got, err := egress.ParseTenantNetworks(" acme=10.1.0.0/16 10.2.0.0/16; globex = 192.168.5.0/24,fd00::/8 ;")
	require.NoError(t, err)
	require.Equal(t, map[string][]netip.Prefix{
		"acme":   {netip.MustParsePrefix("10.1.0.0/16"), netip.MustParsePrefix("10.2.0.0/16")},
		"globex": {netip.MustParsePrefix("192.168.5.0/24"), netip.MustParsePrefix("fd00::/8")},
	}, got)
	none, err := egress.ParseTenantNetworks("")
	require.NoError(t, err)
	require.Nil(t, none)
	for in, want := range map[string]string{
		"acme":                             `tenant networks "acme" are not tenant=networks`,
		"=10.0.0.0/8":                      `tenant networks "=10.0.0.0/8" do not start with a tenant id`,
		"acme=":                            `tenant "acme" is given no networks`,
		"acme=10.0.0.1/8":                  `tenant "acme": allowed network 10.0.0.1/8 has host bits set`,
		"acme=10.0.0.0/8;acme=10.1.0.0/16": `tenant "acme" is given networks twice`,
	} {
		_, err := egress.ParseTenantNetworks(in)
		require.ErrorContains(t, err, want, in)
	}
}

// TestClientsPerTenant: a tenant's client dials its own networks; another tenant's is
// refused there, even right after the first tenant's request left a kept-alive
// connection to the same address.
func TestClientsPerTenant(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "inside") }))
	defer srv.Close()
	p := egress.Policy{TenantNetworks: map[string][]netip.Prefix{"acme": {netip.MustParsePrefix("127.0.0.0/8")}}}
	clients := p.Clients()
	defer clients.For("acme").CloseIdleConnections()

	get := func(tenant string) error {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		resp, err := clients.For(tenant).Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	require.NoError(t, get("acme"))
	err := get("globex")
	require.True(t, egress.IsRefused(err), "%v", err)
	require.NoError(t, p.ForTenant("acme").CheckURL(t.Context(), srv.URL))
	require.True(t, egress.IsRefused(p.ForTenant("globex").CheckURL(t.Context(), srv.URL)))
	require.True(t, egress.IsRefused(p.CheckURL(t.Context(), srv.URL)), "a policy not made for a tenant opens no tenant's networks")
}

// TestTrace: a request is private when its host is an address outside the public
// internet or an allowed host, or when it connected to such an address (reused
// connections too); nothing is recorded when the policy shows private failures whole.
func TestTrace(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	p := egress.Policy{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}, AllowedHosts: []string{"functions"}}
	client := p.Client()
	defer client.CloseIdleConnections()
	for range 2 { // a new connection, then a kept-alive one
		ctx, tr := p.Trace(t.Context(), srv.URL)
		require.True(t, tr.Private())
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
		require.NoError(t, err)
		resp, err := client.Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.True(t, tr.Private())
		require.True(t, p.Hide(tr))
	}
	_, tr := p.Trace(context.Background(), "http://functions:8080/")
	require.True(t, tr.Private())
	_, tr = p.Trace(context.Background(), "http://8.8.8.8/")
	require.False(t, tr.Private())

	// A name: private once it connected to loopback.
	name := "http://localhost:" + srv.URL[len("http://127.0.0.1:"):]
	ctx, tr := p.Trace(t.Context(), name)
	require.False(t, tr.Private(), "not before it connects")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, name, nil)
	require.NoError(t, err)
	if resp, err := client.Do(req); err == nil {
		_ = resp.Body.Close()
	}
	require.True(t, tr.Private())

	detail := p
	detail.PrivateErrorDetail = true
	_, tr = detail.Trace(context.Background(), srv.URL)
	require.False(t, detail.Hide(tr))
}
