// Package signature signs and verifies the gateway's requests to functions. Every request
// carries one header:
//
//	Stepgate-Signature: t=<unix seconds>,tenant=<percent-encoded tenant>,ed25519=<signature>[,ed25519=…][,v1=<hmac>…]
//
// The signed message binds the time, the tenant and the body: the ASCII decimal t, a
// newline (0x0A), the tenant's UTF-8 bytes, a newline, and the raw body bytes (empty for
// the manifest GET). A tenant never holds a newline, so the message is unambiguous.
//
//   - ed25519: the Ed25519 signature (RFC 8032, pure, no pre-hash) of the message by the
//     tenant's private key, which never leaves the gateway, in base64url without padding.
//     A function holds only its tenant's public keys, so it cannot sign what the gateway
//     signs. This is the strong scheme.
//   - v1: the hex HMAC-SHA256 of the message under the tenant's HMAC secret, for
//     languages whose standard library lacks Ed25519. Anyone holding the secret can sign
//     with it, so every function of the tenant that holds it can forge requests to the
//     tenant's other functions: prefer ed25519.
//
// The header carries one signature of each scheme per key the tenant signs with (two
// during a key rotation's overlap). A request is valid when t is within the window of the
// verifier's clock (5 minutes by default) and any signature verifies with any key the
// verifier holds for the tenant. A [Verifier] also refuses replays. The tenant is
// percent-encoded as RFC 3986 says: every byte but A-Z, a-z, 0-9, '-', '.', '_' and '~'
// as %XX.
//
// To verify in another language: split the header on ","; read t, tenant (percent-decode
// it), every ed25519 (base64url) and every v1 (hex); refuse when t is more than 5
// minutes from your clock; build the message; accept when one ed25519 signature verifies
// with one of your tenant's public keys (or one v1 equals, in constant time, the
// HMAC-SHA256 of the message under your secret); then remember the accepted signature
// until t + 5 minutes and refuse a request that brings it again. The README has a test
// vector.
//
// The package has no dependencies beyond the standard library, so function binaries stay
// small.
package signature

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Header is the name of the HTTP header that carries the signature.
const Header = "Stepgate-Signature"

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

// Message returns the bytes that are signed for a request of tenant at Unix second t with
// body.
func Message(t int64, tenant string, body []byte) []byte {
	ts := strconv.FormatInt(t, 10)
	m := make([]byte, 0, len(ts)+len(tenant)+len(body)+2)
	m = append(m, ts...)
	m = append(m, '\n')
	m = append(m, tenant...)
	m = append(m, '\n')
	return append(m, body...)
}

// Sign returns the header value for a request of tenant with body at t, signed with each
// key, newest first.
func Sign(t time.Time, tenant string, body []byte, keys ...SigningKey) string {
	ts := t.Unix()
	msg := Message(ts, tenant, body)
	var b strings.Builder
	b.WriteString("t=")
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
	T       int64
	Tenant  string
	Ed25519 [][]byte // Each 64 bytes.
	HMAC    [][]byte // Each 32 bytes.
}

// Parse reads a header value. Unknown schemes are ignored, so later versions can add
// their own. It returns ErrMissing for an empty header and ErrMalformed when t or the
// tenant is missing, repeated or unreadable, when there is no ed25519 or v1 signature, or
// when the header passes the bounds (MaxHeaderBytes, MaxSignatures).
func Parse(header string) (Parsed, error) {
	var p Parsed
	if header == "" {
		return p, ErrMissing
	}
	if len(header) > MaxHeaderBytes {
		return p, fmt.Errorf("%w: longer than %d bytes", ErrMalformed, MaxHeaderBytes)
	}
	seenT, seenTenant := false, false
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return Parsed{}, ErrMalformed
		}
		switch k {
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

// Verify checks header against body with keys, the keys of the tenant the header names,
// at now, allowing window of clock difference either way (DefaultWindow when zero). It
// returns the tenant, or ErrMissing, ErrMalformed, ErrExpired, ErrNoKeys or ErrMismatch.
// Callers that hold keys of one tenant only need not compare the tenant: no other
// tenant's request verifies with them.
func Verify(header string, body []byte, now time.Time, window time.Duration, keys Keys) (tenant string, err error) {
	p, err := Parse(header)
	if err != nil {
		return "", err
	}
	if _, err := check(p, body, now, window, keys); err != nil {
		return "", err
	}
	return p.Tenant, nil
}

// check verifies a parsed header and returns the message it signs.
func check(p Parsed, body []byte, now time.Time, window time.Duration, keys Keys) ([]byte, error) {
	if window <= 0 {
		window = DefaultWindow
	}
	if d := now.Sub(time.Unix(p.T, 0)); d > window || d < -window {
		return nil, ErrExpired
	}
	if keys.empty() {
		return nil, fmt.Errorf("%w %q", ErrNoKeys, p.Tenant)
	}
	msg := Message(p.T, p.Tenant, body)
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
