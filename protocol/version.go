package protocol

import (
	"fmt"
	"math"
	"strconv"
)

// Version is the function protocol's version that this gateway speaks, a semantic
// version: a gateway serves every SDK whose protocol version has the same major
// version and a minor version no greater than this one's.
const Version = "1.0.0"

// VersionHeader is the HTTP header in which each side of the function protocol says the
// protocol version it speaks: the gateway on every invocation request and manifest
// request, an SDK on every answer to an invocation request. Its value is a version as
// [ParseVersion] reads it. A side that sends none is read as speaking 1.0.0.
const VersionHeader = "Stepgate-Protocol"

// MaxVersionLen bounds a protocol version, in bytes: a longer one is not a version.
const MaxVersionLen = 32

// Semver is a function protocol version: MAJOR.MINOR.PATCH. A minor version adds to
// the protocol what an older peer of the same major may ignore; a major version changes
// what a peer of another major cannot read.
type Semver struct {
	Major, Minor, Patch int
}

// String returns v as MAJOR.MINOR.PATCH.
func (v Semver) String() string {
	return strconv.Itoa(v.Major) + "." + strconv.Itoa(v.Minor) + "." + strconv.Itoa(v.Patch)
}

// Serves reports whether a gateway of protocol version v serves an SDK of protocol
// version sdk: the same major, and a minor no greater than v's.
func (v Semver) Serves(sdk Semver) bool {
	return sdk.Major == v.Major && sdk.Minor <= v.Minor
}

// current is Version, parsed.
var current = mustParse(Version)

// CurrentVersion returns [Version], parsed.
func CurrentVersion() Semver { return current }

func mustParse(s string) Semver {
	v, ok := parseVersion(s)
	if !ok {
		panic("protocol: bad version " + s)
	}
	return v
}

// ParseVersion reads a protocol version: three decimal numbers joined by dots,
// MAJOR.MINOR.PATCH, without leading zeros, sign, spaces, pre-release or build part
// (semantic versioning's core), at most [MaxVersionLen] bytes. It allocates nothing
// unless it fails, and returns an error naming the value (cut at MaxVersionLen bytes)
// when s is not such a version.
func ParseVersion(s string) (Semver, error) {
	if v, ok := parseVersion(s); ok {
		return v, nil
	}
	return Semver{}, fmt.Errorf("%s is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0)", quoteVersion(s))
}

func parseVersion(s string) (Semver, bool) {
	if len(s) > MaxVersionLen {
		return Semver{}, false
	}
	var n [3]int
	part, digits := 0, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			if digits == 1 && n[part] == 0 {
				return Semver{}, false // a leading zero
			}
			if n[part] > (math.MaxInt32-int(c-'0'))/10 {
				return Semver{}, false // past an int32: no version is
			}
			n[part] = n[part]*10 + int(c-'0')
			digits++
		case c == '.' && digits > 0 && part < 2:
			part, digits = part+1, 0
		default:
			return Semver{}, false
		}
	}
	if part != 2 || digits == 0 {
		return Semver{}, false
	}
	return Semver{n[0], n[1], n[2]}, true
}

// quoteVersion quotes s for a message, cut at MaxVersionLen bytes.
func quoteVersion(s string) string {
	if len(s) > MaxVersionLen {
		return strconv.Quote(s[:MaxVersionLen]) + "…"
	}
	return strconv.Quote(s)
}

// CheckSDKVersion returns nil when a gateway of protocol [Version] serves an SDK that
// says it speaks protocol version v (an SDK that says nothing speaks 1.0.0: check
// nothing then; v "" is not a version). Otherwise its error begins with who (e.g. "the
// app's SDK") and names both versions:
//
//	<who> speaks function protocol 2.0.0; this gateway speaks 1.0.0 (it serves SDKs of protocol 1.0 up to 1.0.x)
//	<who> says it speaks function protocol "x", which is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0); this gateway speaks 1.0.0 (it serves SDKs of protocol 1.0 up to 1.0.x)
//
// It allocates nothing unless it fails.
func CheckSDKVersion(who, v string) error {
	if v == Version {
		return nil
	}
	sdk, ok := parseVersion(v)
	if !ok {
		return fmt.Errorf("%s says it speaks function protocol %s, which is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0); this gateway speaks %s (it serves SDKs of protocol %d.0 up to %d.%d.x)",
			who, quoteVersion(v), Version, current.Major, current.Major, current.Minor)
	}
	if current.Serves(sdk) {
		return nil
	}
	return fmt.Errorf("%s speaks function protocol %s; this gateway speaks %s (it serves SDKs of protocol %d.0 up to %d.%d.x)",
		who, sdk, Version, current.Major, current.Major, current.Minor)
}

// CheckGatewayVersion returns nil when an SDK of protocol [Version], named sdk (e.g.
// "stepgate-go/0.1.0"), serves a gateway that says it speaks protocol version v (its
// [VersionHeader]; a gateway that says nothing, older than the header, speaks 1.0.0:
// check nothing then; v "" is not a version): a gateway of the same major. Otherwise its
// error names both versions:
//
//	the gateway speaks function protocol 2.0.0; this SDK (stepgate-go/0.1.0) speaks 1.0.0 and serves gateways of protocol 1.x only
//	the gateway's Stepgate-Protocol header "x" is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0); this SDK (stepgate-go/0.1.0) speaks 1.0.0
//
// It allocates nothing unless it fails.
func CheckGatewayVersion(sdk, v string) error {
	if v == Version {
		return nil
	}
	gw, ok := parseVersion(v)
	if !ok {
		return fmt.Errorf("the gateway's %s header %s is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0); this SDK (%s) speaks %s",
			VersionHeader, quoteVersion(v), sdk, Version)
	}
	if gw.Major == current.Major {
		return nil
	}
	return fmt.Errorf("the gateway speaks function protocol %s; this SDK (%s) speaks %s and serves gateways of protocol %d.x only",
		gw, sdk, Version, current.Major)
}
