package egress_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stepgate/stepgate/internal/helpers/egress"
	"github.com/stepgate/stepgate/internal/helpers/egress/egresstest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestCheckURL(t *testing.T) {
	t.Parallel()

	dns := egresstest.NewDNS(map[string][]string{
		"metadata.internal": {"169.254.169.254"},
		"public.example":    {"8.8.8.8", "2606:4700:4700::1111"},
		"mixed.example":     {"8.8.8.8", "10.0.0.7"},
	})
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

	tests := []struct {
		name     string
		policy   egress.Policy
		url      string
		wantErr  string // substring; "" means allowed
		refused  bool   // whether egress.IsRefused(err)
		resolver bool   // use the fake DNS (otherwise no lookup may happen)
	}{
		// Public addresses: CheckURL makes no connection.
		{name: "PublicIPv4", url: "http://8.8.8.8/"},
		{name: "PublicIPv4HTTPSAnyPort", url: "https://8.8.8.8:8443/fn?x=1"},
		{name: "PublicIPv6", url: "http://[2606:4700:4700::1111]:8080/"},
		{name: "PublicIPv4Mapped", url: "http://[::ffff:8.8.8.8]/"},
		{name: "UserinfoIsLeftAlone", url: "http://user:pass@8.8.8.8/"},
		{name: "PublicName", url: "https://public.example/fn", resolver: true},

		{name: "Loopback", url: "http://127.0.0.1:8080/", wantErr: `url host "127.0.0.1" is a loopback address, which this gateway does not dial`, refused: true},
		{name: "LoopbackRange", url: "http://127.1.2.3/", wantErr: "is a loopback address", refused: true},
		{name: "LoopbackIPv6", url: "http://[::1]:8080/", wantErr: `url host "::1" is a loopback address`, refused: true},
		{name: "Private10", url: "http://10.1.2.3/", wantErr: "is a private (RFC 1918) address", refused: true},
		{name: "Private172", url: "http://172.31.255.255/", wantErr: "is a private (RFC 1918) address", refused: true},
		{name: "Private192", url: "http://192.168.1.1/", wantErr: "is a private (RFC 1918) address", refused: true},
		{name: "LinkLocal", url: "http://169.254.1.1/", wantErr: "is a link-local address", refused: true},
		{name: "LinkLocalMetadata", url: "http://169.254.169.254/latest/meta-data/", wantErr: "is a cloud metadata address", refused: true},
		{name: "LinkLocalIPv6", url: "http://[fe80::1]/", wantErr: "is a link-local address", refused: true},
		{name: "LinkLocalIPv6Zone", url: "http://[fe80::1%25eth0]/", wantErr: "is a link-local address", refused: true},
		{name: "UniqueLocal", url: "http://[fd00::1]/", wantErr: "is a unique local (ULA) address", refused: true},
		{name: "UniqueLocalFC", url: "http://[fc00::1]/", wantErr: "is a unique local (ULA) address", refused: true},
		{name: "CGNAT", url: "http://100.64.0.1/", wantErr: "is a shared (CGNAT) address", refused: true},
		{name: "CGNATEnd", url: "http://100.127.255.255/", wantErr: "is a shared (CGNAT) address", refused: true},
		{name: "NAT64", url: "http://[64:ff9b::7f00:1]/", wantErr: "is a NAT64 address", refused: true},
		{name: "NAT64Local", url: "http://[64:ff9b:1::a9fe:a9fe]/", wantErr: "is a NAT64 address", refused: true},
		{name: "Multicast", url: "http://224.0.0.1/", wantErr: "is a multicast address", refused: true},
		{name: "MulticastSSDP", url: "http://239.255.255.250/", wantErr: "is a multicast address", refused: true},
		{name: "MulticastIPv6", url: "http://[ff02::1]/", wantErr: "is a multicast address", refused: true},
		{name: "Unspecified", url: "http://0.0.0.0:8080/", wantErr: "is an unspecified address", refused: true},
		{name: "ThisNetwork", url: "http://0.1.2.3/", wantErr: "is an unspecified address", refused: true},
		{name: "UnspecifiedIPv6", url: "http://[::]/", wantErr: "is an unspecified address", refused: true},
		{name: "Broadcast", url: "http://255.255.255.255/", wantErr: "is the broadcast address", refused: true},
		{name: "Reserved", url: "http://240.0.0.1/", wantErr: "is a reserved address", refused: true},
		{name: "Documentation", url: "http://192.0.2.1/", wantErr: "is a reserved address", refused: true},
		{name: "DocumentationIPv6", url: "http://[2001:db8::1]/", wantErr: "is a reserved address", refused: true},

		// IPv4-mapped IPv6 is checked as the IPv4 address it maps to.
		{name: "MappedLoopback", url: "http://[::ffff:127.0.0.1]/", wantErr: `url host "::ffff:127.0.0.1" maps to 127.0.0.1, a loopback address`, refused: true},
		{name: "MappedPrivate10", url: "http://[::ffff:10.0.0.1]/", wantErr: "a private (RFC 1918) address", refused: true},
		{name: "MappedPrivate172", url: "http://[::ffff:172.16.0.1]/", wantErr: "a private (RFC 1918) address", refused: true},
		{name: "MappedPrivate192", url: "http://[::ffff:192.168.0.1]/", wantErr: "a private (RFC 1918) address", refused: true},
		{name: "MappedLinkLocal", url: "http://[::ffff:a9fe:a9fe]/", wantErr: "maps to 169.254.169.254, a cloud metadata address", refused: true},
		{name: "MappedCGNAT", url: "http://[::ffff:100.64.0.1]/", wantErr: "a shared (CGNAT) address", refused: true},
		{name: "MappedMulticast", url: "http://[::ffff:224.0.0.1]/", wantErr: "a multicast address", refused: true},
		{name: "MappedUnspecified", url: "http://[::ffff:0.0.0.0]/", wantErr: "an unspecified address", refused: true},
		{name: "MappedBroadcast", url: "http://[::ffff:255.255.255.255]/", wantErr: "the broadcast address", refused: true},

		// Names are resolved and every address checked.
		{
			name: "NameResolvesToLinkLocal", url: "http://metadata.internal/", resolver: true, refused: true,
			wantErr: `url host "metadata.internal" resolves to a cloud metadata address, which this gateway does not dial (`,
		},
		{
			name: "NameWithOnePrivateAddress", url: "http://mixed.example/", resolver: true, refused: true,
			wantErr: `url host "mixed.example" resolves to a private (RFC 1918) address, which this gateway does not dial (allow it with STEPGATE_ALLOWED_NETWORKS or STEPGATE_ALLOWED_FUNCTION_HOSTS)`,
		},
		{name: "Localhost", url: "http://localhost:8080/", resolver: true, wantErr: `url host "localhost" resolves to`, refused: true},
		{name: "DoesNotResolve", url: "http://nowhere.example/", resolver: true, wantErr: `url host "nowhere.example" does not resolve`},

		// IPv4 addresses in forms Go treats as names but C resolvers and browsers do not.
		{name: "DecimalIPv4", url: "http://2130706433/", wantErr: `url host "2130706433" is the IPv4 address 127.0.0.1 written in a non-standard form`},
		{name: "HexIPv4", url: "http://0x7f.1/", wantErr: `url host "0x7f.1" is the IPv4 address 127.0.0.1 written in a non-standard form`},
		{name: "OctalIPv4", url: "http://0177.0.0.1/", wantErr: "is the IPv4 address 127.0.0.1 written in a non-standard form"},
		{name: "ShortIPv4", url: "http://127.1/", wantErr: "is the IPv4 address 127.0.0.1 written in a non-standard form"},
		{name: "TrailingDotIPv4", url: "http://169.254.169.254./", wantErr: "is the IPv4 address 169.254.169.254 written in a non-standard form"},
		{name: "NumericTLD", url: "http://example.999999999999/", wantErr: `url host "example.999999999999" is not a valid host name`},

		// Malformed URLs.
		{name: "Relative", url: "/fn", wantErr: "url must be absolute"},
		{name: "SchemeFTP", url: "ftp://8.8.8.8/", wantErr: `url scheme "ftp" is not supported`},
		{name: "SchemeFile", url: "file:///etc/passwd", wantErr: `url scheme "file" is not supported`},
		{name: "NoHost", url: "http:///fn", wantErr: "url has no host"},
		{name: "Opaque", url: "http:8.8.8.8", wantErr: "url has no host"},
		{name: "Unparsable", url: "http://[::1/", wantErr: "invalid url"},

		// Opened by the policy.
		{name: "AllowedNetworkLoopback", policy: egress.Policy{AllowedNetworks: loopback}, url: "http://127.0.0.1:8080/"},
		{name: "AllowedNetworkMapped", policy: egress.Policy{AllowedNetworks: loopback}, url: "http://[::ffff:127.0.0.1]:8080/"},
		{name: "AllowedNetworkIsNotIPv6Loopback", policy: egress.Policy{AllowedNetworks: loopback}, url: "http://[::1]/", wantErr: "is a loopback address", refused: true},
		{name: "AllowedNetworkIPv6", policy: egress.Policy{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("fd00::/8")}}, url: "http://[fd12::1]/"},
		{name: "AllowedNetworkByName", policy: egress.Policy{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("169.254.169.254/32")}}, url: "http://metadata.internal/", resolver: true},
		{name: "AllowedHostExact", policy: egress.Policy{AllowedHosts: []string{"functions"}}, url: "http://FUNCTIONS:8080/run"},
		{name: "AllowedHostTrailingDot", policy: egress.Policy{AllowedHosts: []string{"functions"}}, url: "http://functions.:8080/run"},
		{name: "AllowedHostLocalhost", policy: egress.Policy{AllowedHosts: []string{"localhost"}}, url: "http://localhost:8080/"},
		{name: "AllowedHostWildcard", policy: egress.Policy{AllowedHosts: []string{"*.svc.cluster.local"}}, url: "http://fn.ns.svc.cluster.local/"},
		{name: "AllowedHostWildcardNotApex", policy: egress.Policy{AllowedHosts: []string{"*.svc.cluster.local"}}, url: "http://svc.cluster.local/", resolver: true, wantErr: "does not resolve"},
		{name: "AllowedHostWildcardNotSuffix", policy: egress.Policy{AllowedHosts: []string{"*.svc.cluster.local"}}, url: "http://evilsvc.cluster.local/", resolver: true, wantErr: "does not resolve"},
		{name: "AllowedHostIsNotAnAddress", policy: egress.Policy{AllowedHosts: []string{"functions"}}, url: "http://10.0.0.1/", wantErr: "is a private (RFC 1918) address", refused: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := tt.policy
			if tt.resolver {
				p.Resolver = dns.Resolver()
			} else {
				p.Resolver = noLookups(t)
			}
			err := p.CheckURL(t.Context(), tt.url)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
			require.Equal(t, tt.refused, egress.IsRefused(err))
			if tt.resolver {
				for _, addr := range []string{"169.254.169.254", "10.0.0.7", "127.0.0.1", "::1"} {
					require.NotContains(t, err.Error(), addr, "what a name resolved to is never said")
				}
			}
		})
	}
}

func TestCheckURLContextBoundsLookup(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	p := egress.Policy{Resolver: egresstest.NewDNS(nil).Resolver()}
	err := p.CheckURL(ctx, "http://somewhere.example/")
	require.ErrorIs(t, err, context.Canceled)
}

func TestClient(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name        string
		policy      egress.Policy
		host        string // replaces 127.0.0.1 in the server's URL
		wantRefused string // "" means the request reaches the server
	}{
		{name: "DefaultPolicyRefusesLoopback", host: "127.0.0.1", wantRefused: "127.0.0.1 is a loopback address, which this gateway does not dial"},
		// No CheckURL happened: the dialer checks what the name resolves to.
		{name: "DefaultPolicyRefusesLocalhost", host: "localhost", wantRefused: "127.0.0.1 is a loopback address, which this gateway does not dial"},
		{name: "DefaultPolicyRefusesMappedLoopback", host: "[::ffff:127.0.0.1]", wantRefused: "127.0.0.1 is a loopback address"},
		{name: "OtherAllowedHostRefusesLocalhost", policy: egress.Policy{AllowedHosts: []string{"functions"}}, host: "localhost", wantRefused: "127.0.0.1 is a loopback address"},
		{name: "AllowedNetworkReaches", policy: egress.Policy{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}, host: "127.0.0.1"},
		{name: "AllowedHostReaches", policy: egress.Policy{AllowedHosts: []string{"localhost"}}, host: "localhost"},
		{name: "AllowedWildcardDoesNotCoverApex", policy: egress.Policy{AllowedHosts: []string{"*.localhost"}}, host: "localhost", wantRefused: "127.0.0.1 is a loopback address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var hits atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				hits.Add(1)
				_, _ = io.WriteString(w, "ok")
			}))
			t.Cleanup(srv.Close)
			target := strings.Replace(srv.URL, "127.0.0.1", tt.host, 1)

			c := tt.policy.Client()
			t.Cleanup(c.CloseIdleConnections)
			resp, err := c.Get(target)
			if tt.wantRefused != "" {
				require.ErrorContains(t, err, tt.wantRefused)
				require.True(t, egress.IsRefused(err))
				require.Zero(t, hits.Load())
				return
			}
			require.NoError(t, err)
			body, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, "ok", string(body))
			require.EqualValues(t, 1, hits.Load())
		})
	}
}

func TestClientDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()

	var targetHits atomic.Int32
	target := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { targetHits.Add(1) }))
	t.Cleanup(target.Close)

	tests := []struct {
		name     string
		location string
	}{
		{name: "ToMetadata", location: "http://169.254.169.254/latest/meta-data/"},
		{name: "ToAllowedServer", location: target.URL}, // would succeed if followed
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Redirect(w, r, tt.location, http.StatusFound)
			}))
			t.Cleanup(srv.Close)
			p := egress.Policy{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}
			c := p.Client()
			t.Cleanup(c.CloseIdleConnections)

			resp, err := c.Get(srv.URL)
			require.NoError(t, err)
			require.NoError(t, resp.Body.Close())
			require.Equal(t, http.StatusFound, resp.StatusCode)
			require.Equal(t, tt.location, resp.Header.Get("Location"))
			require.Equal(t, srv.URL, "http://"+resp.Request.URL.Host)
			require.Zero(t, targetHits.Load())
		})
	}
}

// TestClientChecksAtConnectTime shows that a name which passed CheckURL and then
// resolves to a refused address (DNS rebinding) is refused when dialed.
func TestClientChecksAtConnectTime(t *testing.T) {
	t.Parallel()

	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	target := "http://rebind.example:" + u.Port() + "/"

	dns := egresstest.NewDNS(map[string][]string{"rebind.example": {"8.8.8.8"}})
	p := egress.Policy{Resolver: dns.Resolver()}
	require.NoError(t, p.CheckURL(t.Context(), target))

	dns.Set("rebind.example", "127.0.0.1")
	c := p.Client()
	t.Cleanup(c.CloseIdleConnections)
	_, err = c.Get(target)
	require.ErrorContains(t, err, "127.0.0.1 is a loopback address, which this gateway does not dial")
	require.True(t, egress.IsRefused(err))
	require.Zero(t, hits.Load())

	// The same resolver, with loopback allowed, does reach the server.
	p.AllowedNetworks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	c = p.Client()
	t.Cleanup(c.CloseIdleConnections)
	resp, err := c.Get(target)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.EqualValues(t, 1, hits.Load())
}

func TestIsRefused(t *testing.T) {
	t.Parallel()
	require.False(t, egress.IsRefused(nil))
	require.False(t, egress.IsRefused(io.EOF))
	require.True(t, egress.IsRefused(&url.Error{Op: "Get", URL: "http://x", Err: &egress.RefusedError{}}))
}

func TestParseNetworks(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		csv     string
		want    []string
		wantErr string
	}{
		{name: "Empty", csv: ""},
		{name: "OnlySeparators", csv: " , ,"},
		{name: "List", csv: "10.0.0.0/8, fd00::/8", want: []string{"10.0.0.0/8", "fd00::/8"}},
		{name: "BareAddresses", csv: "127.0.0.1,::1", want: []string{"127.0.0.1/32", "::1/128"}},
		{name: "SkipsEmptyEntries", csv: " 10.0.0.0/8 ,, ", want: []string{"10.0.0.0/8"}},
		{name: "HostBitsSet", csv: "10.0.0.1/8", wantErr: "allowed network 10.0.0.1/8 has host bits set; did you mean 10.0.0.0/8?"},
		{name: "BadBits", csv: "10.0.0.0/33", wantErr: `allowed network "10.0.0.0/33" is not a network`},
		{name: "Name", csv: "10.0.0.0/8, example.com", wantErr: `allowed network "example.com" is not a network`},
		{name: "Mapped", csv: "::ffff:10.0.0.0/104", wantErr: "write it as an IPv4 network"},
		{name: "Zone", csv: "fe80::1%eth0", wantErr: `allowed network "fe80::1%eth0" has a zone`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := egress.ParseNetworks(strings.Split(tt.csv, ","))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			var strs []string
			for _, n := range got {
				strs = append(strs, n.String())
			}
			require.Equal(t, tt.want, strs)
			require.NoError(t, egress.Policy{AllowedNetworks: got}.Validate())
		})
	}
}

func TestParseHosts(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		csv     string
		want    []string
		wantErr string
	}{
		{name: "Empty", csv: ""},
		{name: "List", csv: "functions, *.svc.cluster.local, Fn_1.Example.", want: []string{"functions", "*.svc.cluster.local", "fn_1.example"}},
		{name: "StarAlone", csv: "*", wantErr: `allowed host "*" is not a host name or a leading "*." wildcard`},
		{name: "StarInside", csv: "a.*.b", wantErr: `allowed host "a.*.b" is not a host name`},
		{name: "StarDotAlone", csv: "*.", wantErr: `allowed host "*" is not a host name`},
		{name: "IPv4", csv: "functions,10.0.0.1", wantErr: `allowed host "10.0.0.1" is an IP address; allow it as a network instead`},
		{name: "IPv6", csv: "::1", wantErr: `allowed host "::1" is an IP address`},
		{name: "NonStandardIPv4", csv: "0x7f.1", wantErr: `allowed host "0x7f.1" is not a valid host name`},
		{name: "Space", csv: "exa mple", wantErr: `allowed host "exa mple" is not a valid host name: ' ' is not allowed`},
		{name: "EmptyLabel", csv: "a..b", wantErr: `allowed host "a..b" is not a valid host name`},
		{name: "Port", csv: "functions:8080", wantErr: `':' is not allowed`},
		{name: "LongLabel", csv: strings.Repeat("a", 64) + ".example", wantErr: "1 to 63 characters"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := egress.ParseHosts(strings.Split(tt.csv, ","))
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			require.NoError(t, egress.Policy{AllowedHosts: got}.Validate())
		})
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		policy  egress.Policy
		wantErr string
	}{
		{name: "Zero"},
		{name: "Valid", policy: egress.Policy{
			AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
			AllowedHosts:    []string{"Functions", "*.svc.cluster.local"},
		}},
		{name: "InvalidNetwork", policy: egress.Policy{AllowedNetworks: []netip.Prefix{{}}}, wantErr: "is not valid"},
		{name: "HostBitsSet", policy: egress.Policy{AllowedNetworks: []netip.Prefix{netip.MustParsePrefix("10.0.0.1/8")}}, wantErr: "has host bits set"},
		{name: "BadHost", policy: egress.Policy{AllowedHosts: []string{"http://functions"}}, wantErr: `allowed host "http://functions"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := tt.policy.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

// noLookups returns a resolver that fails the test if it is asked anything:
// CheckURL must decide literal addresses and allowed hosts without DNS.
func noLookups(t *testing.T) *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		t.Error("unexpected DNS lookup")
		return nil, net.ErrClosed
	}}
}
