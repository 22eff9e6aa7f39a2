package protocol_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/protocol"
)

func TestParseVersion(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in   string
		want protocol.Semver
	}{
		{"1.0.0", protocol.Semver{1, 0, 0}},
		{"0.0.0", protocol.Semver{0, 0, 0}},
		{"1.22.333", protocol.Semver{1, 22, 333}},
		{"2147483647.0.10", protocol.Semver{2147483647, 0, 10}},
	} {
		got, err := protocol.ParseVersion(tt.in)
		require.NoError(t, err, tt.in)
		require.Equal(t, tt.want, got)
		require.Equal(t, tt.in, got.String())
	}
	for _, in := range []string{
		"", "1", "1.0", "1.0.0.0", "01.0.0", "1.00.0", "1.0.01", "v1.0.0", "1.0.0-rc.1", "1.0.0+build",
		" 1.0.0", "1.0.0 ", "1..0", ".1.0", "1.0.", "-1.0.0", "+1.0.0", "1.a.0", "2147483648.0.0", "99999999999999999999.0.0",
		"1.0.0\x00", strings.Repeat("1", 40),
	} {
		_, err := protocol.ParseVersion(in)
		require.Error(t, err, "%q", in)
	}
	_, err := protocol.ParseVersion("1.0")
	require.EqualError(t, err, `"1.0" is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0)`)
	_, err = protocol.ParseVersion(strings.Repeat("7", 100))
	require.EqualError(t, err, `"`+strings.Repeat("7", protocol.MaxVersionLen)+`"… is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0)`)
}

// TestVersionRule: a gateway serves an SDK of its major and a minor no greater than
// its own; an SDK serves a gateway of its major.
func TestVersionRule(t *testing.T) {
	t.Parallel()
	require.Equal(t, "1.0.0", protocol.Version, "the messages below are those of protocol 1.0.0")
	require.Equal(t, protocol.Semver{1, 0, 0}, protocol.CurrentVersion())
	gw := protocol.Semver{1, 3, 0}
	require.True(t, gw.Serves(protocol.Semver{1, 0, 0}))
	require.True(t, gw.Serves(protocol.Semver{1, 3, 9}))
	require.False(t, gw.Serves(protocol.Semver{1, 4, 0}))
	require.False(t, gw.Serves(protocol.Semver{2, 0, 0}))
	require.False(t, gw.Serves(protocol.Semver{0, 3, 0}))

	const serves = "this gateway speaks 1.0.0 (it serves SDKs of protocol 1.0 up to 1.0.x)"
	for v, want := range map[string]string{
		"1.0.0":  "",
		"1.0.12": "",
		"1.1.0":  "the app's SDK speaks function protocol 1.1.0; " + serves,
		"2.0.0":  "the app's SDK speaks function protocol 2.0.0; " + serves,
		"0.0.1":  "the app's SDK speaks function protocol 0.0.1; " + serves,
		"":       `the app's SDK says it speaks function protocol "", which is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0); ` + serves,
		"1.x":    `the app's SDK says it speaks function protocol "1.x", which is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0); ` + serves,
	} {
		err := protocol.CheckSDKVersion("the app's SDK", v)
		if want == "" {
			require.NoError(t, err, v)
		} else {
			require.EqualError(t, err, want, v)
		}
	}
	for v, want := range map[string]string{
		"1.0.0": "",
		"1.7.2": "",
		"2.0.0": "the gateway speaks function protocol 2.0.0; this SDK (stepgate-x/9) speaks 1.0.0 and serves gateways of protocol 1.x only",
		"0.1.0": "the gateway speaks function protocol 0.1.0; this SDK (stepgate-x/9) speaks 1.0.0 and serves gateways of protocol 1.x only",
		"1":     `the gateway's Stepgate-Protocol header "1" is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0); this SDK (stepgate-x/9) speaks 1.0.0`,
	} {
		err := protocol.CheckGatewayVersion("stepgate-x/9", v)
		if want == "" {
			require.NoError(t, err, v)
		} else {
			require.EqualError(t, err, want, v)
		}
	}
}

// TestVersionCheckAllocatesNothing: the check made on every invocation's answer (and
// by an SDK on every invocation request) allocates nothing when it passes.
func TestVersionCheckAllocatesNothing(t *testing.T) {
	for _, v := range []string{protocol.Version, "1.0.9"} {
		require.Zero(t, testing.AllocsPerRun(100, func() {
			if protocol.CheckSDKVersion("the function's SDK", v) != nil || protocol.CheckGatewayVersion("sdk", v) != nil {
				t.Fatal(v)
			}
		}), v)
	}
}

func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"1.0.0", "10.20.30", "1.0", "01.0.0", "", "2147483647.2147483647.2147483647"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := protocol.ParseVersion(s)
		if err != nil {
			require.Contains(t, err.Error(), "is not a protocol version")
			require.LessOrEqual(t, len(err.Error()), 4*protocol.MaxVersionLen+100, "the error is bounded")
			return
		}
		require.Equal(t, s, v.String(), "a version reads back as itself")
		require.GreaterOrEqual(t, min(v.Major, v.Minor, v.Patch), 0)
	})
}

func BenchmarkCheckSDKVersion(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if protocol.CheckSDKVersion("the function's SDK", "1.0.3") != nil {
			b.Fatal("refused")
		}
	}
}
