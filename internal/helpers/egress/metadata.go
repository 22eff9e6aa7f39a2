package egress

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// guarded are the ranges where cloud metadata services answer (instance credentials,
// user data, the host's agent). An address in one is dialed only when an allowed
// network lies within that range and contains the address: the operator named it. A
// broader network that merely contains it (0.0.0.0/0, fc00::/7, 100.64.0.0/10) opens
// the rest of what it holds, not this. Link-local ranges are guarded whole, as
// providers put their services anywhere in them.
var guarded = []netip.Prefix{
	// AWS, GCP, Azure, Oracle, DigitalOcean, OpenStack (169.254.169.254), ECS task and
	// EKS Pod Identity credentials (169.254.170.2, 169.254.170.23), Tencent (169.254.0.23).
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("fe80::/10"),
	// AWS's IPv6 instance metadata (fd00:ec2::254), EKS Pod Identity (fd00:ec2::23),
	// its DNS and time servers.
	netip.MustParsePrefix("fd00:ec2::/32"),
	netip.MustParsePrefix("fd20:ce::254/128"),   // GCP's IPv6 metadata server
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba Cloud's metadata
	netip.MustParsePrefix("168.63.129.16/32"),   // Azure's WireServer, a public address
	netip.MustParsePrefix("192.0.0.192/32"),     // Oracle Cloud's older metadata
}

// metadataKind names the addresses of the metadata services themselves.
const metadataKind = "a cloud metadata address"

// metadataAddrs are refused as metadataKind; they lie in guarded ranges.
var metadataAddrs = []netip.Prefix{
	netip.MustParsePrefix("169.254.169.254/32"),
	netip.MustParsePrefix("169.254.170.2/32"),
	netip.MustParsePrefix("169.254.170.23/32"),
	netip.MustParsePrefix("169.254.0.23/32"),
	netip.MustParsePrefix("fd00:ec2::/32"),
	netip.MustParsePrefix("fd20:ce::254/128"),
	netip.MustParsePrefix("100.100.100.200/32"),
	netip.MustParsePrefix("168.63.129.16/32"),
	netip.MustParsePrefix("192.0.0.192/32"),
}

// guardedHint tells whoever reads the refusal of a guarded address how an operator
// would lift it; it names no address.
const guardedHint = "a cloud metadata or link-local address is dialed only when STEPGATE_ALLOWED_NETWORKS or " +
	"STEPGATE_TENANT_NETWORKS names a network within its own range; a broader one, such as 0.0.0.0/0, does not open it"

// nat64 is the well-known NAT64 prefix (RFC 6052), whose addresses end in the IPv4
// address a NAT64 gateway translates them to.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// guardedRange returns the guarded range holding addr (unmapped, no zone), if any.
func guardedRange(addr netip.Addr) (netip.Prefix, bool) {
	for _, g := range guarded {
		if g.Contains(addr) {
			return g, true
		}
	}
	return netip.Prefix{}, false
}

// opens reports whether one of allowed opens addr, in the guarded range g: a network
// within g that contains addr.
func opens(allowed []netip.Prefix, g netip.Prefix, addr netip.Addr) bool {
	for _, n := range allowed {
		if n.Bits() >= g.Bits() && g.Contains(n.Addr()) && n.Contains(addr) {
			return true
		}
	}
	return false
}

// checkGuarded returns why addr (unmapped, no zone) may not be dialed when it, or the
// IPv4 address its NAT64 form ends in, lies in a guarded range that allowed does not
// open; nil otherwise.
func checkGuarded(allowed []netip.Prefix, addr netip.Addr) *RefusedError {
	if g, ok := guardedRange(addr); ok && !opens(allowed, g, addr) {
		return &RefusedError{Addr: addr, Kind: kind(addr), guarded: true}
	}
	if nat64.Contains(addr) {
		b := addr.As16()
		v4 := netip.AddrFrom4([4]byte(b[12:]))
		if g, ok := guardedRange(v4); ok && !opens(allowed, g, v4) {
			return &RefusedError{Addr: addr, Kind: "the NAT64 form of " + kind(v4), guarded: true}
		}
	}
	return nil
}

// loopback are the loopback ranges, for Warnings.
var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}

// Warnings returns what an operator should be told at start of the networks p opens,
// one sentence for each network of AllowedNetworks and then of TenantNetworks (by
// tenant) that opens loopback (tenants' functions would reach the gateway's own host)
// or a guarded range: a cloud metadata or link-local range that the network lies
// within. A network that warrants a sentence and also contains guarded ranges without
// opening them (0.0.0.0/0) names those as staying refused. A network that opens
// neither warrants none.
func (p Policy) Warnings() []string {
	var out []string
	for _, n := range p.AllowedNetworks {
		if w := warning(n); w != "" {
			out = append(out, fmt.Sprintf("allowed network %s %s", n, w))
		}
	}
	for _, tenant := range slices.Sorted(maps.Keys(p.TenantNetworks)) {
		for _, n := range p.TenantNetworks[tenant] {
			if w := warning(n); w != "" {
				out = append(out, fmt.Sprintf("tenant %q's network %s %s", tenant, n, w))
			}
		}
	}
	return out
}

// warning says what n opens of loopback and the guarded ranges, or "" when nothing.
func warning(n netip.Prefix) string {
	var loop, open, closed []string
	for _, l := range loopback {
		if n.Overlaps(l) {
			loop = append(loop, narrower(n, l).String())
		}
	}
	for _, g := range guarded {
		switch {
		case !n.Overlaps(g):
		case n.Bits() >= g.Bits():
			open = append(open, n.String())
		default:
			closed = append(closed, g.String())
		}
	}
	var parts []string
	if len(loop) > 0 {
		parts = append(parts, fmt.Sprintf("opens loopback (%s): tenants' functions can reach the gateway's own host, "+
			"its ports and whatever else listens there", strings.Join(loop, ", ")))
	}
	if len(open) > 0 {
		parts = append(parts, fmt.Sprintf("opens the cloud metadata or link-local range %s: tenants' functions can reach "+
			"the cloud's metadata service and its credentials where one answers there", strings.Join(open, ", ")))
	}
	if len(parts) == 0 {
		return ""
	}
	if len(closed) > 0 {
		parts = append(parts, fmt.Sprintf("the cloud metadata and link-local ranges it contains (%s) stay refused "+
			"unless a network within them is named", strings.Join(closed, ", ")))
	}
	return strings.Join(parts, "; ")
}

// narrower returns the narrower of two overlapping prefixes.
func narrower(a, b netip.Prefix) netip.Prefix {
	if a.Bits() >= b.Bits() {
		return a
	}
	return b
}
