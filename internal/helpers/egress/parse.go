package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ParseNetworks parses networks such as "10.0.0.0/8" and "fd00::/8" for
// [Policy.AllowedNetworks]. A bare address means that address alone (/32 or
// /128). Entries are trimmed, and empty ones skipped. Its error names the first bad entry; a network with host bits set
// (10.0.0.1/8), an IPv4-mapped IPv6 network and an address with a zone are bad.
func ParseNetworks(entries []string) ([]netip.Prefix, error) {
	var nets []netip.Prefix
	for _, s := range trimmed(entries) {
		var n netip.Prefix
		if strings.Contains(s, "/") {
			var err error
			if n, err = netip.ParsePrefix(s); err != nil {
				return nil, fmt.Errorf("allowed network %q is not a network (like 10.0.0.0/8) or an address", s)
			}
		} else {
			a, err := netip.ParseAddr(s)
			if err != nil {
				return nil, fmt.Errorf("allowed network %q is not a network (like 10.0.0.0/8) or an address", s)
			}
			if a.Zone() != "" {
				return nil, fmt.Errorf("allowed network %q has a zone, which networks cannot have", s)
			}
			n = netip.PrefixFrom(a, a.BitLen())
		}
		if err := validateNetwork(n); err != nil {
			return nil, err
		}
		nets = append(nets, n)
	}
	return nets, nil
}

// ParseHosts parses host names such as "functions" and "*.svc.cluster.local" for
// [Policy.AllowedHosts], lowercased and without a trailing dot. Entries are
// trimmed, and empty ones skipped. Its
// error names the first bad entry: not a host name, an IP address (allow those
// with networks), or a "*" other than a leading "*.".
func ParseHosts(entries []string) ([]string, error) {
	var hosts []string
	for _, s := range trimmed(entries) {
		h := strings.ToLower(strings.TrimSuffix(s, "."))
		if err := validateHost(h); err != nil {
			return nil, err
		}
		hosts = append(hosts, h)
	}
	return hosts, nil
}

// ParseTenantNetworks parses the networks opened to single tenants, for
// [Policy.TenantNetworks]: "acme=10.1.0.0/16 10.2.0.0/16; globex=192.168.5.0/24",
// tenants separated by ";", each a tenant id, "=", and its networks as
// [ParseNetworks] reads them, separated by spaces or commas. Empty entries are
// skipped. Its error names the first bad entry: no "=", an empty or repeated
// tenant, or a bad network.
func ParseTenantNetworks(v string) (map[string][]netip.Prefix, error) {
	var out map[string][]netip.Prefix
	for entry := range strings.SplitSeq(v, ";") {
		if entry = strings.TrimSpace(entry); entry == "" {
			continue
		}
		tenant, nets, ok := strings.Cut(entry, "=")
		tenant = strings.TrimSpace(tenant)
		switch {
		case !ok:
			return nil, fmt.Errorf("tenant networks %q are not tenant=networks", entry)
		case tenant == "" || strings.ContainsAny(tenant, " \t,"):
			return nil, fmt.Errorf("tenant networks %q do not start with a tenant id", entry)
		case out[tenant] != nil:
			return nil, fmt.Errorf("tenant %q is given networks twice", tenant)
		}
		parsed, err := ParseNetworks(strings.FieldsFunc(nets, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }))
		if err != nil {
			return nil, fmt.Errorf("tenant %q: %w", tenant, err)
		}
		if len(parsed) == 0 {
			return nil, fmt.Errorf("tenant %q is given no networks", tenant)
		}
		if out == nil {
			out = map[string][]netip.Prefix{}
		}
		out[tenant] = parsed
	}
	return out, nil
}

// Validate returns an error naming the first entry of AllowedNetworks,
// TenantNetworks or AllowedHosts that [ParseNetworks] or [ParseHosts] would
// refuse.
func (p Policy) Validate() error {
	for _, n := range p.AllowedNetworks {
		if err := validateNetwork(n); err != nil {
			return err
		}
	}
	for tenant, nets := range p.TenantNetworks {
		for _, n := range nets {
			if err := validateNetwork(n); err != nil {
				return fmt.Errorf("tenant %q: %w", tenant, err)
			}
		}
	}
	for _, h := range p.AllowedHosts {
		if err := validateHost(strings.ToLower(strings.TrimSuffix(h, "."))); err != nil {
			return err
		}
	}
	return nil
}

// trimmed returns the entries without surrounding space, the empty ones left out.
func trimmed(entries []string) []string {
	var out []string
	for _, s := range entries {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func validateNetwork(n netip.Prefix) error {
	switch {
	case !n.IsValid():
		return fmt.Errorf("allowed network %s is not valid", n)
	case n != n.Masked():
		return fmt.Errorf("allowed network %s has host bits set; did you mean %s?", n, n.Masked())
	case n.Addr().Is4In6():
		return fmt.Errorf("allowed network %s is IPv4-mapped IPv6; write it as an IPv4 network", n)
	}
	return nil
}

func validateHost(h string) error {
	name, _ := strings.CutPrefix(h, "*.")
	switch {
	case name == "" || strings.Contains(name, "*"):
		return fmt.Errorf("allowed host %q is not a host name or a leading \"*.\" wildcard", h)
	case netipAddr(name):
		return fmt.Errorf("allowed host %q is an IP address; allow it as a network instead", h)
	case len(name) > 253 || endsInNumber(name):
		return fmt.Errorf("allowed host %q is not a valid host name", h)
	}
	for label := range strings.SplitSeq(name, ".") {
		if err := validateLabel(label); err != nil {
			return fmt.Errorf("allowed host %q is not a valid host name: %w", h, err)
		}
	}
	return nil
}

func netipAddr(s string) bool {
	_, err := netip.ParseAddr(s)
	return err == nil
}

func validateLabel(label string) error {
	if label == "" || len(label) > 63 {
		return errors.New("each dot-separated label must have 1 to 63 characters")
	}
	for _, c := range label {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return fmt.Errorf("%q is not allowed in a host name", c)
		}
	}
	return nil
}

// endsInNumber reports whether host's last label is a number, as the WHATWG URL
// standard defines it. Such a host is an IPv4 address in some form (2130706433,
// 0x7f.1, 127.1) that browsers and C resolvers accept, never a DNS name: no
// top-level domain is numeric.
func endsInNumber(host string) bool {
	host = strings.TrimSuffix(host, ".")
	last := host[strings.LastIndexByte(host, '.')+1:]
	if last == "" {
		return false
	}
	if hex, ok := strings.CutPrefix(strings.ToLower(last), "0x"); ok {
		return strings.Trim(hex, "0123456789abcdef") == ""
	}
	return strings.Trim(last, "0123456789") == ""
}

// parseLooseIPv4 parses host as the WHATWG URL standard's IPv4 parser does:
// one to four dot-separated decimal, 0x-hex or 0-octal numbers, the last
// filling the remaining bytes.
func parseLooseIPv4(host string) (netip.Addr, bool) {
	parts := strings.Split(strings.TrimSuffix(host, "."), ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var ip uint64
	for i, part := range parts {
		base := 10
		switch {
		case len(part) >= 2 && (part[:2] == "0x" || part[:2] == "0X"):
			base, part = 16, part[2:]
			if part == "" {
				part = "0"
			}
		case len(part) >= 2 && part[0] == '0':
			base, part = 8, part[1:]
		}
		n, err := strconv.ParseUint(part, base, 32)
		if err != nil {
			return netip.Addr{}, false
		}
		if i < len(parts)-1 {
			if n > 255 {
				return netip.Addr{}, false
			}
			ip |= n << (8 * (3 - i))
			continue
		}
		if n >= 1<<(8*(4-i)) {
			return netip.Addr{}, false
		}
		ip |= n
	}
	return netip.AddrFrom4([4]byte{byte(ip >> 24), byte(ip >> 16), byte(ip >> 8), byte(ip)}), true
}
