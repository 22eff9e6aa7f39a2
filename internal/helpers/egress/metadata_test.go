package egress_test

import (
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/internal/helpers/egress"
	"github.com/stepgate/stepgate/internal/helpers/egress/egresstest"
)

func nets(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, n := range s {
		out[i] = netip.MustParsePrefix(n)
	}
	return out
}

// TestMetadataNeedsItsOwnRange: a cloud metadata address (and any link-local one) is
// dialed only when an allowed network within its own range names it; a broad network
// that merely contains it, such as 0.0.0.0/0 or fc00::/7, opens the rest but not it.
func TestMetadataNeedsItsOwnRange(t *testing.T) {
	t.Parallel()
	dns := egresstest.NewDNS(map[string][]string{"metadata.internal": {"169.254.169.254"}, "imds6.internal": {"fd00:ec2::254"}})
	tests := []struct {
		name    string
		allowed []netip.Prefix
		url     string
		wantErr string // "" means allowed
	}{
		{name: "Default", url: "http://169.254.169.254/", wantErr: `url host "169.254.169.254" is a cloud metadata address, which this gateway does not dial`},
		{name: "DefaultIPv6", url: "http://[fd00:ec2::254]/", wantErr: "is a cloud metadata address"},
		{name: "DefaultAzureWireServer", url: "http://168.63.129.16/", wantErr: "is a cloud metadata address"},
		{name: "DefaultAlibaba", url: "http://100.100.100.200/", wantErr: "is a cloud metadata address"},
		{name: "DefaultGCPIPv6", url: "http://[fd20:ce::254]/", wantErr: "is a cloud metadata address"},
		{name: "EverythingV4", allowed: nets("0.0.0.0/0"), url: "http://169.254.169.254/latest/meta-data/", wantErr: "is a cloud metadata address"},
		{name: "EverythingV4ECS", allowed: nets("0.0.0.0/0"), url: "http://169.254.170.2/", wantErr: "is a cloud metadata address"},
		{name: "EverythingV4OtherLinkLocal", allowed: nets("0.0.0.0/0"), url: "http://169.254.1.1/", wantErr: "is a link-local address"},
		{name: "EverythingV4Mapped", allowed: nets("0.0.0.0/0"), url: "http://[::ffff:169.254.169.254]/", wantErr: "maps to 169.254.169.254, a cloud metadata address"},
		{name: "EverythingV4Azure", allowed: nets("0.0.0.0/0"), url: "http://168.63.129.16/", wantErr: "is a cloud metadata address"},
		{name: "EverythingV4OpensTheRest", allowed: nets("0.0.0.0/0"), url: "http://10.1.2.3/"},
		{name: "EverythingV4OpensLoopback", allowed: nets("0.0.0.0/0"), url: "http://127.0.0.1/"},
		{name: "HalfOfV4", allowed: nets("128.0.0.0/1"), url: "http://169.254.169.254/", wantErr: "is a cloud metadata address"},
		{name: "EverythingV6", allowed: nets("::/0"), url: "http://[fd00:ec2::254]/", wantErr: "is a cloud metadata address"},
		{name: "EverythingV6LinkLocal", allowed: nets("::/0"), url: "http://[fe80::1]/", wantErr: "is a link-local address"},
		{name: "EverythingV6NAT64OfMetadata", allowed: nets("::/0"), url: "http://[64:ff9b::a9fe:a9fe]/", wantErr: "the NAT64 form of a cloud metadata address"},
		{name: "EverythingV6OpensTheRest", allowed: nets("::/0"), url: "http://[fd12::1]/"},
		{name: "AllULAs", allowed: nets("fc00::/7"), url: "http://[fd00:ec2::254]/", wantErr: "is a cloud metadata address"},
		{name: "AllOfFD", allowed: nets("fd00::/8"), url: "http://[fd00:ec2::23]/", wantErr: "is a cloud metadata address"},
		{name: "AllCGNAT", allowed: nets("100.64.0.0/10"), url: "http://100.100.100.200/", wantErr: "is a cloud metadata address"},
		{name: "NamedLinkLocal", allowed: nets("169.254.0.0/16"), url: "http://169.254.169.254/"},
		{name: "NamedNarrower", allowed: nets("169.254.169.0/24"), url: "http://169.254.169.254/"},
		{name: "NamedAddress", allowed: nets("169.254.169.254/32"), url: "http://169.254.169.254/"},
		{name: "NamedBesideBroad", allowed: nets("0.0.0.0/0", "169.254.0.0/16"), url: "http://169.254.169.254/"},
		{name: "NamedOtherLinkLocal", allowed: nets("169.254.1.0/24"), url: "http://169.254.169.254/", wantErr: "is a cloud metadata address"},
		{name: "NamedIPv6", allowed: nets("fd00:ec2::/32"), url: "http://[fd00:ec2::254]/"},
		{name: "NamedIPv6LinkLocal", allowed: nets("fe80::/10"), url: "http://[fe80::1]/"},
		{name: "NamedAzure", allowed: nets("168.63.129.16/32"), url: "http://168.63.129.16/"},
		// A name: the refusal says what kind of address, never which.
		{name: "NameEverythingV4", allowed: nets("0.0.0.0/0"), url: "http://metadata.internal/", wantErr: `url host "metadata.internal" resolves to a cloud metadata address, which this gateway does not dial`},
		{name: "NameEverythingV6", allowed: nets("::/0"), url: "http://imds6.internal/", wantErr: `url host "imds6.internal" resolves to a cloud metadata address`},
		{name: "NameNamed", allowed: nets("169.254.0.0/16"), url: "http://metadata.internal/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := egress.Policy{AllowedNetworks: tt.allowed, Resolver: dns.Resolver()}
			err := p.CheckURL(t.Context(), tt.url)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
			require.True(t, egress.IsRefused(err))
			if strings.HasSuffix(tt.url, ".internal/") {
				require.NotContains(t, err.Error(), "169.254")
				require.NotContains(t, err.Error(), "fd00")
			}
			// The same through a tenant's networks.
			q := egress.Policy{TenantNetworks: map[string][]netip.Prefix{"acme": tt.allowed}, Resolver: dns.Resolver()}
			require.ErrorContains(t, q.ForTenant("acme").CheckURL(t.Context(), tt.url), tt.wantErr)
		})
	}
}

// TestClientRefusesMetadataOfAllowedHosts: a host name the operator allowed is dialed
// whatever it resolves to, except a cloud metadata address its networks do not name.
func TestClientRefusesMetadataOfAllowedHosts(t *testing.T) {
	t.Parallel()
	dns := egresstest.NewDNS(map[string][]string{"functions": {"169.254.169.254"}})
	for _, p := range []egress.Policy{
		{AllowedHosts: []string{"functions"}, Resolver: dns.Resolver()},
		{AllowedHosts: []string{"functions"}, AllowedNetworks: nets("0.0.0.0/0"), Resolver: dns.Resolver()},
	} {
		require.NoError(t, p.CheckURL(t.Context(), "http://functions/"), "an allowed host passes without resolving")
		c := p.Client()
		_, err := c.Get("http://functions/")
		require.ErrorContains(t, err, "169.254.169.254 is a cloud metadata address, which this gateway does not dial")
		require.True(t, egress.IsRefused(err))
		c.CloseIdleConnections()
	}
}

// TestHideAddresses: the error of a request made with a policy's client, said without
// any address the host resolved to.
func TestHideAddresses(t *testing.T) {
	t.Parallel()
	dns := egresstest.NewDNS(map[string][]string{"rebind.example": {"10.0.0.7"}})
	p := egress.Policy{Resolver: dns.Resolver()}
	c := p.Client()
	t.Cleanup(c.CloseIdleConnections)
	_, err := c.Get("http://rebind.example:81/app")
	require.ErrorContains(t, err, "10.0.0.7", "the dialer's own error names the address")
	hidden := egress.HideAddresses(err)
	require.NotContains(t, hidden.Error(), "10.0.0.7")
	require.Contains(t, hidden.Error(), "the host resolves to a private (RFC 1918) address, which this gateway does not dial")
	require.True(t, egress.IsRefused(hidden))
	require.ErrorIs(t, hidden, err)

	closed := &url.Error{Op: "Get", URL: "http://x/", Err: &netOpError}
	require.Equal(t, "dial tcp: connect: connection refused", egress.HideAddresses(closed).Error())
	require.NoError(t, egress.HideAddresses(nil))
	require.Equal(t, http.ErrHandlerTimeout, egress.HideAddresses(http.ErrHandlerTimeout))
}

// TestWarnings: a network that opens loopback or a cloud metadata range is told to the
// operator at start, naming the ranges; one that opens neither is not.
func TestWarnings(t *testing.T) {
	t.Parallel()
	require.Empty(t, egress.Policy{}.Warnings())
	require.Empty(t, egress.Policy{AllowedNetworks: nets("10.0.0.0/8", "fd12::/16"), AllowedHosts: []string{"functions"}}.Warnings())

	all := egress.Policy{AllowedNetworks: nets("0.0.0.0/0")}.Warnings()
	require.Len(t, all, 1)
	require.Contains(t, all[0], "allowed network 0.0.0.0/0 opens loopback (127.0.0.0/8)")
	require.Contains(t, all[0], "169.254.0.0/16")
	require.Contains(t, all[0], "cloud metadata")
	require.Contains(t, all[0], "stay refused")

	named := egress.Policy{AllowedNetworks: nets("169.254.0.0/16")}.Warnings()
	require.Len(t, named, 1)
	require.Contains(t, named[0], "allowed network 169.254.0.0/16 opens the cloud metadata or link-local range 169.254.0.0/16")

	v6 := egress.Policy{AllowedNetworks: nets("::/0")}.Warnings()
	require.Len(t, v6, 1)
	require.Contains(t, v6[0], "opens loopback (::1/128)")
	require.Contains(t, v6[0], "fd00:ec2::/32")

	tenant := egress.Policy{TenantNetworks: map[string][]netip.Prefix{"acme": nets("127.0.0.0/8")}}.Warnings()
	require.Len(t, tenant, 1)
	require.Contains(t, tenant[0], `tenant "acme"'s network 127.0.0.0/8 opens loopback (127.0.0.0/8)`)
}

var netOpError = net.OpError{Op: "dial", Net: "tcp4", Addr: &net.TCPAddr{IP: net.IPv4(10, 0, 0, 7), Port: 80}, Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
