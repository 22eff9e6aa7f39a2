// Package signature signs and verifies the gateway's requests to functions. Every request
// carries one header:
//
//	Stepgate-Signature: v=2,t=<unix seconds>,tenant=<percent-encoded tenant>,ed25519=<signature>[,ed25519=…][,v1=<hmac>…]
//
// The signed message (version 2, the header's v) binds the time, the tenant, the
// request's method and URL path, and the body: "v2", then the ASCII decimal t, the
// tenant's UTF-8 bytes, the method ("POST" for an invocation, "GET" for the manifest) and
// the path as the gateway sends it on the request line (percent-encoded, without the
// query; "/" when the URL has none), each followed by a newline (0x0A), and then the raw
// body bytes (empty for the manifest GET). None of those fields holds a newline, so the
// message is unambiguous. Binding the path means a request signed for one function is
// refused by every other (its path differs); the body's run.function names the function
// too, and the SDKs check that it is the function the path serves.
//
//   - ed25519: the Ed25519 signature (RFC 8032, pure, no pre-hash) of the message by the
//     tenant's private key, which never leaves the gateway, in base64url without padding.
//     A function holds only its tenant's public keys, so it cannot sign what the gateway
//     signs. This is the strong scheme.
//   - v1: the hex HMAC-SHA256 of the message under the tenant's HMAC secret, for
//     languages whose standard library lacks Ed25519 ("v1" names the scheme, not the
//     message's version). Anyone holding the secret can sign with it, so every function
//     of the tenant that holds it can forge requests to the tenant's other functions:
//     prefer ed25519.
//
// The header carries one signature of each scheme per key the tenant signs with (two
// during a key rotation's overlap). A request is valid when its v is 2, t is within the
// window of the verifier's clock (5 minutes by default) and any signature verifies with
// any key the verifier holds for the tenant. A header without v (version 1, which signed
// no method and path) is refused with [ErrVersion]: gateways before version 2 signed
// that way, and accepting it would let a request for one function run another. A
// [Verifier] also refuses replays. The tenant is percent-encoded as RFC 3986 says: every
// byte but A-Z, a-z, 0-9, '-', '.', '_' and '~' as %XX.
//
// To verify in another language: split the header on ","; read v, t, tenant
// (percent-decode it), every ed25519 (base64url) and every v1 (hex); refuse unless v is
// 2; refuse when t is more than 5 minutes from your clock; build the message from t, the
// tenant, the method and path of the request you received and its raw body; accept when
// one ed25519 signature verifies with one of your tenant's public keys (or one v1
// equals, in constant time, the HMAC-SHA256 of the message under your secret); then
// remember the accepted signature until t + 5 minutes and refuse a request that brings it
// again. docs/protocol.md ("How functions verify the gateway") has a test vector.
//
// The package has no dependencies beyond the standard library, so function binaries stay
// small.
package signature

import (
	"cmp"
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Header is the name of the HTTP header that carries the signature.
const Header = "Stepgate-Signature"

// Version is the version of the signed message this package makes and the only one it
// accepts (the header's v).
const Version = 2

// DefaultWindow is how far a signature's timestamp may be from the verifier's clock.
const DefaultWindow = 5 * time.Minute

// Bounds on what a verifier reads, so a forged header costs little to refuse.
const (
	// MaxHeaderBytes bounds the header.
	MaxHeaderBytes = 8 << 10
	// MaxSignatures bounds the signatures of each scheme in one header.
	MaxSignatures = 8
)

// Errors returned by [Verify], [Parse] and [Verifier.Verify]; each says which check
// failed.
var (
	ErrMissing   = errors.New("signature: missing " + Header + " header")
	ErrMalformed = errors.New("signature: malformed " + Header + " header")
	ErrExpired   = errors.New("signature: timestamp outside the allowed window")
	ErrNoKeys    = errors.New("signature: no key to verify the tenant's requests")
	ErrMismatch  = errors.New("signature: no signature matches")
	ErrReplayed  = errors.New("signature: already accepted once; a replayed request is refused")
	ErrVersion   = errors.New("signature: not a version 2 signature, which binds the request's method and path")
)

// SigningKey is one generation of a tenant's keys: the gateway signs each request with
// every generation it holds (two during a rotation's overlap).
type SigningKey struct {
	Ed25519 ed25519.PrivateKey // Required.
	HMAC    []byte             // Signs v1; nil signs none.
}

// Keys are what a function verifies one tenant's requests with.
type Keys struct {
	Public []ed25519.PublicKey // The tenant's public keys: ed25519 signatures.
	HMAC   [][]byte            // The tenant's HMAC secrets: v1 signatures.
}

func (k Keys) empty() bool { return len(k.Public) == 0 && len(k.HMAC) == 0 }

// Request is what a signature binds besides its time and tenant: the request the gateway
// sends, as the function receives it.
type Request struct {
	// Method is the HTTP method: "POST" for an invocation, "GET" for the manifest.
	Method string
	// Path is the URL path as sent on the request line: percent-encoded, without the
	// query, "/" when the URL has none ([PathOf] on the gateway's side, [RequestPath] on
	// the function's).
	Path string
	// Body is the raw body; nil for the manifest.
	Body []byte
}

// ClaimMethod is the method of a duplex invocation's claim proof (ClaimRequest): no HTTP
// request has it, so no invocation's signature is a proof, nor the reverse.
const ClaimMethod = "CLAIM"

// ClaimRequest is what the gateway signs to acknowledge the claim of attempt (the
// invocation request's run.attempt) of run runID by nonce, in the duplex mode: method
// ClaimMethod, path /runs/<run id>/<attempt>, body the nonce. The function verifies it
// as it verifies an invocation, with its tenant's keys; a copy of the invocation request
// answered by anyone but the gateway holding its lease has no valid one, since each
// process makes its own nonce.
func ClaimRequest(runID string, attempt int, nonce string) Request {
	return Request{Method: ClaimMethod, Path: "/runs/" + runID + "/" + strconv.Itoa(attempt), Body: []byte(nonce)}
}

// Message returns the bytes that are signed for r, a request of tenant at Unix second t.
func Message(t int64, tenant string, r Request) []byte {
	ts := strconv.FormatInt(t, 10)
	m := make([]byte, 0, 3+len(ts)+len(tenant)+len(r.Method)+len(r.Path)+len(r.Body)+4)
	m = append(m, "v2\n"...)
	m = append(m, ts...)
	m = append(m, '\n')
	m = append(m, tenant...)
	m = append(m, '\n')
	m = append(m, r.Method...)
	m = append(m, '\n')
	m = append(m, r.Path...)
	m = append(m, '\n')
	return append(m, r.Body...)
}

// PathOf returns the path of u as the gateway signs it: what Go's HTTP client sends on
// the request line, without the query.
func PathOf(u *url.URL) string {
	return cmp.Or(u.EscapedPath(), "/")
}

// RequestPath returns the path of r as a function verifies it: the path of the request
// line as received (r.RequestURI without the query), so that a handler mounted under
// [net/http.StripPrefix] verifies the path the gateway signed. A request made in the
// process, with no RequestURI, gives r.URL's path.
func RequestPath(r *http.Request) string {
	uri := r.RequestURI
	if !strings.HasPrefix(uri, "/") {
		u := r.URL
		if uri != "" && uri != "*" {
			if parsed, err := url.ParseRequestURI(uri); err == nil {
				u = parsed // the absolute form a proxy is sent
			}
		}
		return PathOf(u)
	}
	if i := strings.IndexByte(uri, '?'); i >= 0 {
		uri = uri[:i]
	}
	return uri
}

// Sign returns the header value for r, a request of tenant at t, signed with each key,
// newest first.
func Sign(t time.Time, tenant string, r Request, keys ...SigningKey) string {
	ts := t.Unix()
	msg := Message(ts, tenant, r)
	var b strings.Builder
	b.WriteString("v=2,t=")
	b.WriteString(strconv.FormatInt(ts, 10))
	b.WriteString(",tenant=")
	b.WriteString(EscapeTenant(tenant))
	for _, k := range keys {
		b.WriteString(",ed25519=")
		b.WriteString(base64.RawURLEncoding.EncodeToString(ed25519.Sign(k.Ed25519, msg)))
	}
	for _, k := range keys {
		if k.HMAC != nil {
			b.WriteString(",v1=")
			b.WriteString(hex.EncodeToString(mac(k.HMAC, msg)))
		}
	}
	return b.String()
}

// EscapeTenant percent-encodes tenant as the header carries it.
func EscapeTenant(tenant string) string {
	// QueryEscape keeps exactly the unreserved characters, but writes a space as "+".
	return strings.ReplaceAll(url.QueryEscape(tenant), "+", "%20")
}

// Parsed is a header's content.
type Parsed struct {
	Version int // 1 when the header has no v
	T       int64
	Tenant  string
	Ed25519 [][]byte // Each 64 bytes.
	HMAC    [][]byte // Each 32 bytes.
}

// Parse reads a header value. Unknown schemes are ignored, so later versions can add
// their own. It returns ErrMissing for an empty header and ErrMalformed when v, t or the
// tenant is repeated or unreadable, t or the tenant is missing, there is no ed25519 or
// v1 signature, or the header passes the bounds (MaxHeaderBytes, MaxSignatures). It
// reads any version; [Verify] accepts only [Version].
func Parse(header string) (Parsed, error) {
	var p Parsed
	if header == "" {
		return p, ErrMissing
	}
	if len(header) > MaxHeaderBytes {
		return p, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, MaxHeaderBytes)
	}
	seenV, seenT, seenTenant := false, false, false
	p.Version = 1
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return Parsed{}, ErrMalformed
		}
		switch k {
		case "v":
			n, err := strconv.Atoi(v)
			if seenV || err != nil || n < 1 {
				return Parsed{}, ErrMalformed
			}
			p.Version, seenV = n, true
		case "t":
			t, err := strconv.ParseInt(v, 10, 64)
			if seenT || err != nil || t <= 0 {
				return Parsed{}, ErrMalformed
			}
			p.T, seenT = t, true
		case "tenant":
			tenant, err := url.PathUnescape(v)
			if seenTenant || err != nil || tenant == "" || strings.ContainsAny(tenant, "\n\x00") {
				return Parsed{}, ErrMalformed
			}
			p.Tenant, seenTenant = tenant, true
		case "ed25519":
			s, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(v, "="))
			if err != nil || len(s) != ed25519.SignatureSize || len(p.Ed25519) == MaxSignatures {
				return Parsed{}, ErrMalformed
			}
			p.Ed25519 = append(p.Ed25519, s)
		case "v1":
			s, err := hex.DecodeString(v)
			if err != nil || len(s) != sha256.Size || len(p.HMAC) == MaxSignatures {
				return Parsed{}, ErrMalformed
			}
			p.HMAC = append(p.HMAC, s)
		}
	}
	if !seenT || !seenTenant || len(p.Ed25519)+len(p.HMAC) == 0 {
		return Parsed{}, ErrMalformed
	}
	return p, nil
}

// Verify checks header against r, the request received, with keys, the keys of the
// tenant the header names, at now, allowing window of clock difference either way
// (DefaultWindow when zero). It returns the tenant, or ErrMissing, ErrMalformed,
// ErrVersion, ErrExpired, ErrNoKeys or ErrMismatch (a request signed for another method
// or path, such as another function's, is ErrMismatch). Callers that hold keys of one
// tenant only need not compare the tenant: no other tenant's request verifies with them.
func Verify(header string, r Request, now time.Time, window time.Duration, keys Keys) (tenant string, err error) {
	p, err := Parse(header)
	if err != nil {
		return "", err
	}
	if _, err := check(p, r, now, window, keys); err != nil {
		return "", err
	}
	return p.Tenant, nil
}

// check verifies a parsed header and returns the message it signs.
func check(p Parsed, r Request, now time.Time, window time.Duration, keys Keys) ([]byte, error) {
	if err := checkVersion(p); err != nil {
		return nil, err
	}
	if window <= 0 {
		window = DefaultWindow
	}
	if d := now.Sub(time.Unix(p.T, 0)); d > window || d < -window {
		return nil, ErrExpired
	}
	if keys.empty() {
		return nil, fmt.Errorf("%w %q", ErrNoKeys, p.Tenant)
	}
	msg := Message(p.T, p.Tenant, r)
	for _, pub := range keys.Public {
		if len(pub) != ed25519.PublicKeySize {
			continue
		}
		for _, s := range p.Ed25519 {
			if ed25519.Verify(pub, msg, s) {
				return msg, nil
			}
		}
	}
	for _, secret := range keys.HMAC {
		want := mac(secret, msg)
		for _, s := range p.HMAC {
			if hmac.Equal(s, want) {
				return msg, nil
			}
		}
	}
	return nil, ErrMismatch
}

// checkVersion refuses a header of another version than [Version], saying which side is
// older.
func checkVersion(p Parsed) error {
	switch {
	case p.Version < Version:
		return fmt.Errorf("%w: the request is signed as version %d (no v in the header), by a gateway older than this SDK; upgrade the gateway", ErrVersion, p.Version)
	case p.Version > Version:
		return fmt.Errorf("%w: the request is signed as version %d, newer than this SDK's %d; upgrade the SDK", ErrVersion, p.Version, Version)
	}
	return nil
}

func mac(key, msg []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write(msg)
	return h.Sum(nil)
}

// KeyFunc returns the keys that verify the requests of tenant. It returns keys with
// none in them (or ErrNoKeys) for a tenant it does not serve; its other errors are
// passed on. It must not create keys: a forged header may name any tenant.
//
// A [Verifier] asks again with refresh set when a request's signatures match none of
// the keys it got: a KeyFunc that fetches keys from elsewhere then fetches them anew (the
// gateway may have rotated them), bounding how often, since forged requests ask too.
type KeyFunc func(ctx context.Context, tenant string, refresh bool) (Keys, error)

// StaticKeys returns a KeyFunc that answers keys for every tenant: a function that holds
// one tenant's keys needs no more, since no other tenant's request verifies with them.
func StaticKeys(keys Keys) KeyFunc {
	return func(context.Context, string, bool) (Keys, error) { return keys, nil }
}

// The text form of keys, as `stepgate keys` prints them and functions read them from
// their configuration: base64url without padding (a JWK's "x"); base64 with padding, and
// the standard alphabet, are read too.

// FormatKey returns the text form of a public key or an HMAC secret.
func FormatKey(k []byte) string { return base64.RawURLEncoding.EncodeToString(k) }

func decodeKey(s string) ([]byte, error) {
	s = strings.TrimRight(strings.TrimSpace(s), "=")
	if b, err := base64.RawURLEncoding.DecodeString(s); err == nil {
		return b, nil
	}
	return base64.RawStdEncoding.DecodeString(s)
}

// ParsePublicKeys reads comma-separated Ed25519 public keys in their text form. Its
// errors say which key is wrong and what is expected.
func ParsePublicKeys(csv string) ([]ed25519.PublicKey, error) {
	var keys []ed25519.PublicKey
	for i, s := range splitList(csv) {
		b, err := decodeKey(s)
		if err != nil || len(b) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("signature: public key %d is not an Ed25519 public key: want %d bytes in base64url, as `stepgate keys` prints them", i+1, ed25519.PublicKeySize)
		}
		keys = append(keys, ed25519.PublicKey(b))
	}
	if len(keys) == 0 {
		return nil, errors.New("signature: no public key given")
	}
	return keys, nil
}

// MinSecretBytes is the shortest HMAC secret a verifier accepts.
const MinSecretBytes = 32

// ParseSecrets reads comma-separated HMAC secrets in their text form, each at least
// MinSecretBytes long.
func ParseSecrets(csv string) ([][]byte, error) {
	var secrets [][]byte
	for i, s := range splitList(csv) {
		b, err := decodeKey(s)
		if err != nil || len(b) < MinSecretBytes {
			return nil, fmt.Errorf("signature: HMAC secret %d is not a secret: want at least %d bytes in base64url, as `stepgate keys secrets` prints them", i+1, MinSecretBytes)
		}
		secrets = append(secrets, b)
	}
	if len(secrets) == 0 {
		return nil, errors.New("signature: no HMAC secret given")
	}
	return secrets, nil
}

func splitList(csv string) []string {
	var out []string
	for s := range strings.SplitSeq(csv, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
