package egress

import (
	"context"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"slices"
	"sync/atomic"
)

// ForTenant returns the policy of tenant's requests: p with tenant's
// TenantNetworks added to AllowedNetworks, and no TenantNetworks left (so no
// other tenant's networks).
func (p Policy) ForTenant(tenant string) Policy {
	q := p
	q.TenantNetworks = nil
	if nets := p.TenantNetworks[tenant]; len(nets) > 0 {
		q.AllowedNetworks = append(slices.Clip(p.AllowedNetworks), nets...)
	}
	return q
}

// Clients are the HTTP clients of a policy, one per tenant's policy
// ([Policy.ForTenant]): one shared by every tenant with no TenantNetworks, and
// one of its own for each tenant with some, so that no connection dialed for one
// tenant ever carries a request of another (a kept-alive connection is not
// dialed again, hence not checked again).
type Clients struct {
	shared  *http.Client
	tenants map[string]*http.Client
}

// Clients returns the clients of p, each as [Policy.Client] makes it. There are
// as many as tenants in TenantNetworks, plus one.
func (p Policy) Clients() *Clients {
	c := &Clients{shared: p.ForTenant("").Client(), tenants: make(map[string]*http.Client, len(p.TenantNetworks))}
	for tenant := range p.TenantNetworks {
		c.tenants[tenant] = p.ForTenant(tenant).Client()
	}
	return c
}

// For returns the client of tenant's requests.
func (c *Clients) For(tenant string) *http.Client {
	if hc, ok := c.tenants[tenant]; ok {
		return hc
	}
	return c.shared
}

// publicOnly checks addresses against the zero policy: the public internet.
var publicOnly = Policy{}.guard()

// IsPublic reports whether addr is on the public internet: whether the zero
// Policy dials it.
func IsPublic(addr netip.Addr) bool { return publicOnly.check(addr) == nil }

// A Trace records whether a request went anywhere but the public internet: its
// URL's host is one of AllowedHosts (names the operator opened, whatever they
// resolve to) or an address outside the public internet, or it dialed, tried to
// dial or reused a connection to such an address.
type Trace struct{ private atomic.Bool }

// Trace returns ctx with a Trace of the request to rawURL that will be made with
// it. Read it once the request is done. When p's PrivateErrorDetail is true, or p
// opens nothing beyond the public internet, the Trace records nothing and reports
// false: no address outside it is ever connected to, or nothing is hidden.
func (p Policy) Trace(ctx context.Context, rawURL string) (context.Context, *Trace) {
	t := &Trace{}
	if p.PrivateErrorDetail || len(p.AllowedNetworks)+len(p.AllowedHosts)+len(p.TenantNetworks) == 0 {
		// Nothing to hide, or nothing outside the public internet is ever dialed: no
		// work on the hot path.
		return ctx, t
	}
	u, err := url.Parse(rawURL)
	switch {
	case err != nil:
		t.private.Store(true)
	case p.hostAllowed(u.Hostname()):
		t.private.Store(true)
	default:
		if addr, err := netip.ParseAddr(u.Hostname()); err == nil && !IsPublic(addr) {
			t.private.Store(true)
		}
	}
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		ConnectStart: func(_, addr string) { t.saw(addr) },
		GotConn: func(info httptrace.GotConnInfo) {
			if info.Conn != nil {
				t.saw(info.Conn.RemoteAddr().String())
			}
		},
	}), t
}

func (t *Trace) saw(hostPort string) {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		host = hostPort
	}
	if addr, err := netip.ParseAddr(host); err != nil || !IsPublic(addr) {
		t.private.Store(true)
	}
}

// Private reports whether the request went, or tried to go, anywhere but the
// public internet (see [Trace]).
func (t *Trace) Private() bool { return t.private.Load() }

// Hide reports whether what a tenant is told of the failure of the request that
// t traced leaves out its detail: it went outside the public internet and p's
// PrivateErrorDetail is false.
func (p Policy) Hide(t *Trace) bool { return !p.PrivateErrorDetail && t.Private() }
