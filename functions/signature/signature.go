// Package signature signs and verifies the gateway's requests to functions:
//
//	Stepgate-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(key, t + "." + body)>
//
// The header may carry several v1 values (one per active key during a rotation); a
// request is valid when any of them matches any key the verifier holds and t is within
// the window of the verifier's clock. A [Verifier] also refuses replays: a signature
// it accepted once is refused until it leaves the window. It has no dependencies, so
// function binaries stay small and a function in another language can follow it from
// this comment alone.
//
// To verify in another language: split the header on ","; take t (decimal Unix
// seconds) and every v1 (64 hex digits); refuse when t is more than 5 minutes from your
// clock; compute HMAC-SHA256(key, t + "." + raw body bytes) with each of your keys and
// accept when one equals one v1 (compare in constant time); then remember the matching
// v1 until t + 5 minutes and refuse a request that brings it again.
package signature

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Header is the name of the HTTP header that carries the signature.
const Header = "Stepgate-Signature"

// DefaultWindow is how far a signature's timestamp may be from the verifier's clock.
const DefaultWindow = 5 * time.Minute

// Errors returned by [Verify] and [Parse]; each says which check failed.
var (
	ErrMissing   = errors.New("signature: missing " + Header + " header")
	ErrMalformed = errors.New("signature: malformed " + Header + " header")
	ErrExpired   = errors.New("signature: timestamp outside the allowed window")
	ErrMismatch  = errors.New("signature: no signature matches")
	ErrReplayed  = errors.New("signature: already accepted once; a replayed request is refused")
)

// Sign returns the header value for body signed at t with each key, newest key first.
func Sign(t time.Time, body []byte, keys ...[]byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(ts)
	for _, k := range keys {
		b.WriteString(",v1=")
		b.WriteString(hex.EncodeToString(mac(k, ts, body)))
	}
	return b.String()
}

// Parse splits a header value into its timestamp and v1 signatures. Unknown schemes are
// ignored, so later versions can add their own; it returns ErrMalformed when t or every
// v1 is missing or unreadable.
func Parse(header string) (t int64, sigs [][]byte, err error) {
	if header == "" {
		return 0, nil, ErrMissing
	}
	seenT := false
	for part := range strings.SplitSeq(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return 0, nil, ErrMalformed
		}
		switch k {
		case "t":
			if seenT {
				return 0, nil, ErrMalformed
			}
			t, err = strconv.ParseInt(v, 10, 64)
			if err != nil || t <= 0 {
				return 0, nil, ErrMalformed
			}
			seenT = true
		case "v1":
			s, err := hex.DecodeString(v)
			if err != nil || len(s) != sha256.Size {
				return 0, nil, ErrMalformed
			}
			sigs = append(sigs, s)
		}
	}
	if !seenT || len(sigs) == 0 {
		return 0, nil, ErrMalformed
	}
	return t, sigs, nil
}

// Verify checks header against body with any of keys, at now, allowing window of clock
// difference either way (DefaultWindow when zero). It returns ErrMissing, ErrMalformed,
// ErrExpired or ErrMismatch.
func Verify(header string, body []byte, now time.Time, window time.Duration, keys ...[]byte) error {
	_, _, err := verify(header, body, now, window, keys)
	return err
}

// verify is Verify, returning the timestamp and the signature that matched.
func verify(header string, body []byte, now time.Time, window time.Duration, keys [][]byte) (int64, []byte, error) {
	t, sigs, err := Parse(header)
	if err != nil {
		return 0, nil, err
	}
	if window <= 0 {
		window = DefaultWindow
	}
	if d := now.Sub(time.Unix(t, 0)); d > window || d < -window {
		return 0, nil, ErrExpired
	}
	ts := strconv.FormatInt(t, 10)
	for _, k := range keys {
		want := mac(k, ts, body)
		for _, s := range sigs {
			if hmac.Equal(s, want) {
				return t, s, nil
			}
		}
	}
	return 0, nil, ErrMismatch
}

func mac(key []byte, ts string, body []byte) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(ts))
	h.Write([]byte{'.'})
	h.Write(body)
	return h.Sum(nil)
}
