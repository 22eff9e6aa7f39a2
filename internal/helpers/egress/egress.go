// Package egress is how the gateway reaches functions: an [http.Client] that
// dials only addresses a [Policy] allows and never follows redirects, and
// [Policy.CheckURL] to refuse such URLs when a tenant registers them.
//
// Tenants choose the URLs the gateway calls, so without a policy they could make
// it reach its own network (server-side request forgery): cloud metadata at
// 169.254.169.254, the database, an admin port on loopback. By default the
// gateway dials only the public internet; operators open more with
// [Policy.AllowedNetworks] and [Policy.AllowedHosts], for every tenant, or with
// [Policy.TenantNetworks], for one tenant each. Cloud metadata and link-local
// addresses open only to a network named within their own range, never to a
// broader one such as 0.0.0.0/0 nor to an allowed host name.
//
// A function that is not on the public internet must not become a tenant's view
// of the operator's network: [Trace] tells whether a request went (or tried to
// go) anywhere but the public internet, so that what the tenant is shown of its
// failure can leave out the response body and why a connection failed.
package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"code.dny.dev/ssrf"
)

// Policy says which addresses the gateway may dial. Its zero value allows the
// public internet only: every special-purpose address (loopback, RFC 1918,
// link-local, unique local, CGNAT, NAT64, multicast, unspecified, broadcast,
// reserved, documentation, and the IPv4-mapped IPv6 form of each) is refused, and
// so are the cloud metadata addresses on the public internet (Azure's WireServer,
// 168.63.129.16).
//
// A cloud metadata or link-local address (169.254.0.0/16, fe80::/10, fd00:ec2::/32,
// fd20:ce::254, 100.100.100.200, 168.63.129.16, 192.0.0.192, or its form in the
// well-known NAT64 prefix 64:ff9b::/96) is dialed only when an allowed network lies
// within its range and contains it: 169.254.0.0/16 or 169.254.169.254/32 opens 169.254.169.254; 0.0.0.0/0,
// which merely contains it, does not.
type Policy struct {
	// AllowedNetworks are networks opened on top of the public internet, such as
	// 10.0.0.0/8, or 127.0.0.0/8 for development. IPv4 networks also allow the
	// IPv4-mapped IPv6 form of their addresses.
	AllowedNetworks []netip.Prefix
	// AllowedHosts are host names whose every address is allowed, whatever it
	// resolves to, but a cloud metadata or link-local address that AllowedNetworks
	// do not open: exact ("functions", case-insensitive) or a leading "*."
	// wildcard ("*.svc.cluster.local" matches "a.svc.cluster.local", not
	// "svc.cluster.local").
	AllowedHosts []string
	// TenantNetworks are networks opened to one tenant each, by tenant id, on top
	// of AllowedNetworks: a tenant dials its own networks and no other tenant's.
	// Use [Policy.ForTenant] for one tenant's policy, [Policy.Clients] for clients
	// that apply it.
	TenantNetworks map[string][]netip.Prefix
	// PrivateErrorDetail, when true, shows tenants the whole failure of a request
	// to an address outside the public internet (the start of the response body,
	// why the connection failed), as for the public internet; when false (the
	// default), they are told its HTTP status and size only, or that it could not
	// be reached, and the detail goes to the gateway's log. For development, where
	// the tenant is the operator.
	PrivateErrorDetail bool
	// Resolver resolves host names, for CheckURL and for the Client's dialer.
	// Defaults to net.DefaultResolver.
	Resolver *net.Resolver
}

// configHint tells whoever reads a refusal how an operator would lift it.
const configHint = "allow it with STEPGATE_ALLOWED_NETWORKS or STEPGATE_ALLOWED_FUNCTION_HOSTS"

// RefusedError is the error of a dial, or of [Policy.CheckURL], to an address
// the policy does not allow. Its message names the address and what kind of
// address it is, e.g. "127.0.0.1 is a loopback address, which this gateway
// does not dial".
type RefusedError struct {
	Addr netip.Addr // The refused address; an IPv4-mapped IPv6 address is given as IPv4.
	Kind string     // What the address is, with its article: "a loopback address".

	guarded bool // a cloud metadata or link-local address, which needs its own range named
}

// hint tells whoever reads the refusal how an operator would lift it.
func (e *RefusedError) hint() string {
	if e.guarded {
		return guardedHint
	}
	return configHint
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("%s is %s, which this gateway does not dial", e.Addr, e.Kind)
}

// IsRefused reports whether err, from a request made with [Policy.Client] or
// from [Policy.CheckURL], comes from the policy refusing an address.
func IsRefused(err error) bool {
	var re *RefusedError
	return errors.As(err, &re)
}

// HideAddresses returns err, an error of a request made with [Policy.Client], as an
// error whose message names no address: not the *url.Error's method and URL, and,
// from a *net.OpError, neither its addresses, nor the address a refusal names (it
// says what kind of address the host resolved to), nor a DNS server. What a host name
// resolved to is the gateway's view of DNS, not the tenant's to read. The result
// wraps err, so [IsRefused] and errors.Is see through it. An err that holds no
// *net.OpError is returned as it is, nil included.
func HideAddresses(err error) error {
	var op *net.OpError
	if !errors.As(err, &op) {
		return err
	}
	msg := op.Op
	if op.Net != "" {
		msg += " " + strings.TrimRight(op.Net, "46") // tcp4 says which family the address was
	}
	var re *RefusedError
	var dnsErr *net.DNSError
	switch {
	case errors.As(op.Err, &re):
		msg += fmt.Sprintf(": the host resolves to %s, which this gateway does not dial (%s)", re.Kind, re.hint())
	case errors.As(op.Err, &dnsErr):
		msg += fmt.Sprintf(": lookup %s: %s", dnsErr.Name, dnsErr.Err)
	case op.Err != nil:
		msg += ": " + op.Err.Error()
	}
	return &hiddenError{msg: msg, err: err}
}

// hiddenError is HideAddresses' error: its own message, err's chain.
type hiddenError struct {
	msg string
	err error
}

func (e *hiddenError) Error() string { return e.msg }
func (e *hiddenError) Unwrap() error { return e.err }

// Client returns an http.Client for requests to functions. Its dialer refuses,
// at connect time, every resolved address the policy does not allow, because
// DNS answers can change after [Policy.CheckURL] passed; a URL whose host is one
// of AllowedHosts is dialed whatever it resolves to but a cloud metadata or
// link-local address AllowedNetworks do not open. Any port is allowed; only
// TCP is dialed. It never follows a redirect: a 3xx comes back as the response.
// It uses no proxy, since a proxy would dial on the gateway's behalf unchecked.
// It has no overall timeout: bound requests with their context.
//
// Client assumes p is valid (see [Policy.Validate]); an invalid network allows
// nothing.
func (p Policy) Client() *http.Client {
	g := p.guard()
	base := net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second, Resolver: p.Resolver}
	checked, open := base, base
	checked.Control = g.control
	open.Control = g.controlGuarded
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.MaxIdleConns = 1024
	t.MaxIdleConnsPerHost = 256
	t.IdleConnTimeout = 90 * time.Second
	t.DisableCompression = true
	t.DialContext = func(ctx context.Context, network, address string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(address)
		if err == nil && p.hostAllowed(host) {
			return open.DialContext(ctx, network, address)
		}
		return checked.DialContext(ctx, network, address)
	}
	return &http.Client{
		Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// CheckURL checks a URL a tenant registers: it must be an absolute http or https
// URL with a host, and that host must be one of AllowedHosts (which passes
// without resolving) or resolve, now, only to addresses the policy allows. An IP
// literal is checked as it is; a host that is an IPv4 address in a non-standard
// form (2130706433, 0x7f.1, 127.1) is refused. ctx bounds the DNS lookup.
//
// Every error it returns says in words fit for an API client what is wrong,
// naming the host and, when an address is refused, what kind of address it is;
// [IsRefused] reports true for the latter. It names an address only when the
// URL's host is one: never what a host name resolved to, which is the
// gateway's view of DNS. User information in the URL is not checked.
func (p Policy) CheckURL(ctx context.Context, rawURL string) error {
	u, err := url.Parse(rawURL)
	if err != nil {
		return fmt.Errorf("invalid url: %w", err)
	}
	if u.Scheme == "" {
		return errors.New("url must be absolute, starting with http:// or https://")
	}
	if s := strings.ToLower(u.Scheme); s != "http" && s != "https" {
		return fmt.Errorf("url scheme %q is not supported; use http or https", u.Scheme)
	}
	host := u.Hostname()
	if host == "" {
		return errors.New("url has no host")
	}
	if p.hostAllowed(host) {
		return nil
	}
	g := p.guard()
	if addr, err := netip.ParseAddr(host); err == nil {
		if re := g.check(addr); re != nil {
			verb := "is"
			if addr.Is4In6() {
				verb = "maps to " + re.Addr.String() + ","
			}
			return &urlRefusedError{host: host, verb: verb, err: re}
		}
		return nil
	}
	if endsInNumber(host) {
		if addr, ok := parseLooseIPv4(host); ok {
			return fmt.Errorf("url host %q is the IPv4 address %s written in a non-standard form, which this gateway does not accept", host, addr)
		}
		return fmt.Errorf("url host %q is not a valid host name", host)
	}
	addrs, err := p.resolver().LookupNetIP(ctx, "ip", host)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("resolve url host %q: %w", host, ctx.Err())
		}
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && !dnsErr.IsNotFound {
			// DNSError's own text names the gateway's DNS server; keep that private.
			return fmt.Errorf("url host %q could not be resolved: %s", host, dnsErr.Err)
		}
		return fmt.Errorf("url host %q does not resolve", host)
	}
	if len(addrs) == 0 {
		return fmt.Errorf("url host %q does not resolve", host)
	}
	for _, addr := range addrs {
		if re := g.check(addr); re != nil {
			return &urlRefusedError{host: host, verb: "resolves to", err: re}
		}
	}
	return nil
}

// urlRefusedError is CheckURL's refusal: the dial refusal, said of the URL's host.
type urlRefusedError struct {
	host string
	verb string // "is", "maps to 127.0.0.1,", or "resolves to" (never followed by the address)
	err  *RefusedError
}

func (e *urlRefusedError) Error() string {
	return fmt.Sprintf("url host %q %s %s, which this gateway does not dial (%s)", e.host, e.verb, e.err.Kind, e.err.hint())
}

func (e *urlRefusedError) Unwrap() error { return e.err }

func (p Policy) resolver() *net.Resolver {
	if p.Resolver != nil {
		return p.Resolver
	}
	return net.DefaultResolver
}

// hostAllowed reports whether host matches one of p.AllowedHosts.
func (p Policy) hostAllowed(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, h := range p.AllowedHosts {
		h = strings.ToLower(strings.TrimSuffix(h, "."))
		if suffix, ok := strings.CutPrefix(h, "*"); ok {
			if strings.HasSuffix(host, suffix) && len(host) > len(suffix) {
				return true
			}
		} else if host == h {
			return true
		}
	}
	return false
}

// guard checks addresses against a policy's networks.
type guard struct {
	g       *ssrf.Guardian
	allowed []netip.Prefix // for the guarded ranges (checkGuarded)
}

// guard returns p's address check. The library's built-in deny lists already
// refuse every range the package documents (IPv6 outside 2000::/3 is refused
// wholesale), so only the allowed networks are passed on; the guarded ranges are
// checked before it.
func (p Policy) guard() guard {
	var v4, v6 []netip.Prefix
	for _, n := range p.AllowedNetworks {
		if n.Addr().Is4() {
			v4 = append(v4, n)
		} else {
			v6 = append(v6, n)
		}
	}
	return guard{g: ssrf.New(
		ssrf.WithAnyPort(),
		ssrf.WithAllowedV4Prefixes(v4...),
		ssrf.WithAllowedV6Prefixes(v6...),
	), allowed: p.AllowedNetworks}
}

// check returns why addr may not be dialed, or nil if it may. IPv4-mapped IPv6
// addresses are checked as the IPv4 address they map to, which is what the
// dialer connects to.
func (g guard) check(addr netip.Addr) *RefusedError {
	addr = addr.Unmap().WithZone("")
	if re := checkGuarded(g.allowed, addr); re != nil {
		return re
	}
	if err := g.g.SafeAddr(addr); err != nil {
		return &RefusedError{Addr: addr, Kind: kind(addr)}
	}
	return nil
}

// control is the checked dialer's net.Dialer.Control: it sees every address
// the dialer connects to, after resolution.
func (g guard) control(network, address string, c syscall.RawConn) error {
	if err := tcpOnly(network, address, c); err != nil {
		return err
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("parse dialed address %q: %w", address, err)
	}
	if re := g.check(ap.Addr()); re != nil {
		return re
	}
	return nil
}

// controlGuarded is the Control of the dialer of AllowedHosts: whatever their names
// resolve to is dialed, but a guarded address the allowed networks do not open.
func (g guard) controlGuarded(network, address string, c syscall.RawConn) error {
	if err := tcpOnly(network, address, c); err != nil {
		return err
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("parse dialed address %q: %w", address, err)
	}
	if re := checkGuarded(g.allowed, ap.Addr().Unmap().WithZone("")); re != nil {
		return re
	}
	return nil
}

func tcpOnly(network, _ string, _ syscall.RawConn) error {
	if network != "tcp4" && network != "tcp6" {
		return fmt.Errorf("network %s is not dialed by this gateway", network)
	}
	return nil
}

// kinds names special-purpose ranges, most specific first; an address refused
// outside them is "reserved".
var kinds = []struct {
	prefix netip.Prefix
	kind   string
}{
	{netip.MustParsePrefix("255.255.255.255/32"), "the broadcast address"},
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified address"},
	{netip.MustParsePrefix("::/128"), "an unspecified address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private (RFC 1918) address"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private (RFC 1918) address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private (RFC 1918) address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fc00::/7"), "a unique local (ULA) address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a shared (CGNAT) address"},
	{netip.MustParsePrefix("64:ff9b::/96"), "a NAT64 address"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "a NAT64 address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

// kind says in words what special-purpose address addr is, with its article.
func kind(addr netip.Addr) string {
	addr = addr.Unmap().WithZone("")
	for _, m := range metadataAddrs {
		if m.Contains(addr) {
			return metadataKind
		}
	}
	for _, k := range kinds {
		if k.prefix.Contains(addr) {
			return k.kind
		}
	}
	return "a reserved address"
}
