package signature_test

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/protocol/signature"
)

// seq returns n bytes counting up from first: the test vector's key material.
func seq(first byte, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = first + byte(i)
	}
	return b
}

var (
	// The test vector of docs/protocol.md: the seed 00 01 … 1f, the HMAC secret 20 21 … 3f.
	vectorKey = signature.SigningKey{Ed25519: ed25519.NewKeyFromSeed(seq(0, 32)), HMAC: seq(0x20, 32)}
	otherKey  = signature.SigningKey{Ed25519: ed25519.NewKeyFromSeed(seq(0x40, 32)), HMAC: seq(0x60, 32)}
	body      = []byte(`{"protocol":1}`)
	now       = time.Unix(1_800_000_000, 0)
	tenant    = "acme corp"
)

// path is the test vector's path: the invocation of orders.checkout.
const path = "/orders.checkout"

// reqOf is an invocation POSTed to path with b.
func reqOf(b []byte) signature.Request {
	return signature.Request{Method: "POST", Path: path, Body: b}
}

func public(k signature.SigningKey) ed25519.PublicKey { return k.Ed25519.Public().(ed25519.PublicKey) }

func keysOf(ks ...signature.SigningKey) signature.Keys {
	var out signature.Keys
	for _, k := range ks {
		out.Public = append(out.Public, public(k))
		out.HMAC = append(out.HMAC, k.HMAC)
	}
	return out
}

func publicOnly(ks ...signature.SigningKey) signature.Keys {
	return signature.Keys{Public: keysOf(ks...).Public}
}

func hmacOnly(ks ...signature.SigningKey) signature.Keys {
	return signature.Keys{HMAC: keysOf(ks...).HMAC}
}

func TestSignTestVector(t *testing.T) {
	t.Parallel()
	// Checked against Python's cryptography (Ed25519PrivateKey.from_private_bytes(seed)
	// .sign(message)) and hmac modules; docs/protocol.md shows the same vector.
	require.Equal(t, "A6EHv_POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg", signature.FormatKey(public(vectorKey)))
	require.Equal(t, "v2\n1800000000\nacme corp\nPOST\n/orders.checkout\n{\"protocol\":1}", string(signature.Message(now.Unix(), tenant, reqOf(body))))
	h := signature.Sign(now, tenant, reqOf(body), vectorKey)
	require.Equal(t, "v=2,t=1800000000,tenant=acme%20corp,"+
		"ed25519=evnoDiEslI2RfcREEsJq2yEcntaPhhFYBKL0fnCCU6hMpTFCn-GaJLFw1CutvPsFSrogIxfSgE_OaHKvn6RnBg,"+
		"v1=25d454568c11a777ee015247e48e93d416090a3bdfccf4226c160ace0b1f30d9", h)
	require.Equal(t, h, signature.Sign(now, tenant, reqOf(body), vectorKey), "deterministic")

	two := signature.Sign(now, tenant, reqOf(body), otherKey, vectorKey)
	p, err := signature.Parse(two)
	require.NoError(t, err)
	require.Len(t, p.Ed25519, 2, "one signature per key and scheme")
	require.Len(t, p.HMAC, 2)

	noHMAC := signature.Sign(now, tenant, reqOf(body), signature.SigningKey{Ed25519: vectorKey.Ed25519})
	require.NotContains(t, noHMAC, "v1=")
}

func TestEscapeTenant(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"acme":          "acme",
		"a-b.c_d~e":     "a-b.c_d~e",
		"acme corp":     "acme%20corp",
		"a,b=c":         "a%2Cb%3Dc",
		"a+b%":          "a%2Bb%25",
		"café":          "caf%C3%A9",
		"tenant/1?x#&;": "tenant%2F1%3Fx%23%26%3B",
	} {
		require.Equal(t, want, signature.EscapeTenant(in), in)
		p, err := signature.Parse("t=1,tenant=" + signature.EscapeTenant(in) + ",v1=" + strings.Repeat("ab", 32))
		require.NoError(t, err)
		require.Equal(t, in, p.Tenant, "round trip")
	}
}

func TestParse(t *testing.T) {
	t.Parallel()
	ed := base64.RawURLEncoding.EncodeToString(seq(1, 64))
	hx := strings.Repeat("ab", sha256.Size)
	for _, tt := range []struct {
		name, header, tenant string
		eds, hmacs           int
		err                  error
	}{
		{"Both", "t=5,tenant=acme,ed25519=" + ed + ",v1=" + hx, "acme", 1, 1, nil},
		{"Ed25519Only", "t=5,tenant=acme,ed25519=" + ed, "acme", 1, 0, nil},
		{"HMACOnly", "t=5,tenant=acme,v1=" + hx, "acme", 0, 1, nil},
		{"Padded", "t=5,tenant=acme,ed25519=" + ed + "==", "acme", 1, 0, nil},
		{"Spaces", " t=5 , tenant=acme , ed25519=" + ed + " ", "acme", 1, 0, nil},
		{"AnyOrderAndUnknownSchemes", "v2=x,ed25519=" + ed + ",tenant=a%2Cb,t=5", "a,b", 1, 0, nil},
		{"Empty", "", "", 0, 0, signature.ErrMissing},
		{"NoT", "tenant=acme,ed25519=" + ed, "", 0, 0, signature.ErrMalformed},
		{"NoTenant", "t=5,ed25519=" + ed, "", 0, 0, signature.ErrMalformed},
		{"EmptyTenant", "t=5,tenant=,ed25519=" + ed, "", 0, 0, signature.ErrMalformed},
		{"TenantWithNewline", "t=5,tenant=a%0Ab,ed25519=" + ed, "", 0, 0, signature.ErrMalformed},
		{"BadPercent", "t=5,tenant=a%zz,ed25519=" + ed, "", 0, 0, signature.ErrMalformed},
		{"TwoTenants", "t=5,tenant=a,tenant=b,ed25519=" + ed, "", 0, 0, signature.ErrMalformed},
		{"NoSignature", "t=5,tenant=acme", "", 0, 0, signature.ErrMalformed},
		{"OnlyUnknown", "t=5,tenant=acme,v2=" + hx, "", 0, 0, signature.ErrMalformed},
		{"TwoT", "t=5,t=6,tenant=acme,v1=" + hx, "", 0, 0, signature.ErrMalformed},
		{"TNotANumber", "t=now,tenant=acme,v1=" + hx, "", 0, 0, signature.ErrMalformed},
		{"TZero", "t=0,tenant=acme,v1=" + hx, "", 0, 0, signature.ErrMalformed},
		{"ShortEd25519", "t=5,tenant=acme,ed25519=" + ed[:20], "", 0, 0, signature.ErrMalformed},
		{"ShortV1", "t=5,tenant=acme,v1=abcd", "", 0, 0, signature.ErrMalformed},
		{"NoEquals", "t=5,tenant=acme,v1", "", 0, 0, signature.ErrMalformed},
		{"TrailingComma", "t=5,tenant=acme,v1=" + hx + ",", "", 0, 0, signature.ErrMalformed},
		{"TooManySignatures", "t=5,tenant=acme" + strings.Repeat(",ed25519="+ed, signature.MaxSignatures+1), "", 0, 0, signature.ErrMalformed},
		{"TooLong", "t=5,tenant=acme,v1=" + hx + ",x=" + strings.Repeat("y", signature.MaxHeaderBytes), "", 0, 0, signature.ErrMalformed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p, err := signature.Parse(tt.header)
			require.ErrorIs(t, err, tt.err)
			require.Equal(t, tt.tenant, p.Tenant)
			require.Len(t, p.Ed25519, tt.eds)
			require.Len(t, p.HMAC, tt.hmacs)
		})
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	sign := func(at time.Time, k ...signature.SigningKey) string {
		return signature.Sign(at, tenant, reqOf(body), k...)
	}
	for _, tt := range []struct {
		name   string
		header string
		body   []byte
		window time.Duration
		keys   signature.Keys
		err    error
	}{
		{"Ed25519", sign(now, vectorKey), body, 0, publicOnly(vectorKey), nil},
		{"HMAC", sign(now, vectorKey), body, 0, hmacOnly(vectorKey), nil},
		{"RotationOldKeyHeld", sign(now, otherKey, vectorKey), body, 0, publicOnly(vectorKey), nil},
		{"RotationNewKeyHeld", sign(now, otherKey, vectorKey), body, 0, publicOnly(otherKey), nil},
		{"BothKeysHeld", sign(now, vectorKey), body, 0, publicOnly(otherKey, vectorKey), nil},
		{"EmptyBody", signature.Sign(now, tenant, reqOf(nil), vectorKey), nil, 0, publicOnly(vectorKey), nil},
		{"AnotherTenantsKey", sign(now, otherKey), body, 0, keysOf(vectorKey), signature.ErrMismatch},
		{"NoKeys", sign(now, vectorKey), body, 0, signature.Keys{}, signature.ErrNoKeys},
		{"OtherBody", sign(now, vectorKey), []byte(`{}`), 0, keysOf(vectorKey), signature.ErrMismatch},
		// The method and the path are signed: another function's request (another path),
		// or the manifest's signature on a POST, verifies nowhere else.
		{"OtherPath", signature.Sign(now, tenant, signature.Request{Method: "POST", Path: "/orders.refund", Body: body}, vectorKey), body, 0, keysOf(vectorKey), signature.ErrMismatch},
		{"OtherMethod", signature.Sign(now, tenant, signature.Request{Method: "GET", Path: path, Body: body}, vectorKey), body, 0, keysOf(vectorKey), signature.ErrMismatch},
		// Version 1 (no v) signed neither: refused whatever its signatures, as is a
		// version this package does not know.
		{"Version1", strings.TrimPrefix(sign(now, vectorKey), "v=2,"), body, 0, keysOf(vectorKey), signature.ErrVersion},
		{"Version3", strings.Replace(sign(now, vectorKey), "v=2,", "v=3,", 1), body, 0, keysOf(vectorKey), signature.ErrVersion},
		{"Missing", "", body, 0, keysOf(vectorKey), signature.ErrMissing},
		{"Malformed", "t=1", body, 0, keysOf(vectorKey), signature.ErrMalformed},
		{"OldWithinWindow", sign(now.Add(-4*time.Minute), vectorKey), body, 0, keysOf(vectorKey), nil},
		{"Old", sign(now.Add(-6*time.Minute), vectorKey), body, 0, keysOf(vectorKey), signature.ErrExpired},
		{"Future", sign(now.Add(6*time.Minute), vectorKey), body, 0, keysOf(vectorKey), signature.ErrExpired},
		{"NarrowWindow", sign(now.Add(-2*time.Second), vectorKey), body, time.Second, keysOf(vectorKey), signature.ErrExpired},
		// The timestamp and the tenant are signed: changing either breaks every signature.
		{"MovedTimestamp", strings.Replace(sign(now, vectorKey), "t=1800000000", "t=1800000001", 1), body, 0, keysOf(vectorKey), signature.ErrMismatch},
		{"OtherTenant", strings.Replace(sign(now, vectorKey), "tenant=acme%20corp", "tenant=globex", 1), body, 0, keysOf(vectorKey), signature.ErrMismatch},
		// A function author holding the HMAC secret signs v1 only; a function that
		// verifies Ed25519 alone is not fooled.
		{"HMACForgeryAgainstEd25519", "v=2,t=1800000000,tenant=acme%20corp,v1=" + strings.Split(sign(now, vectorKey), "v1=")[1], body, 0, publicOnly(vectorKey), signature.ErrMismatch},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := signature.Verify(tt.header, reqOf(tt.body), now, tt.window, tt.keys)
			require.ErrorIs(t, err, tt.err)
			if tt.err == nil {
				require.Equal(t, tenant, got)
			}
		})
	}
}

func TestRequestPath(t *testing.T) {
	t.Parallel()
	u, err := url.Parse("https://fn.example/api/stepgate/orders.checkout?key=s3cret")
	require.NoError(t, err)
	require.Equal(t, "/api/stepgate/orders.checkout", signature.PathOf(u), "the query is not signed")
	u, err = url.Parse("https://fn.example")
	require.NoError(t, err)
	require.Equal(t, "/", signature.PathOf(u), "an empty path is sent as /")
	u, err = url.Parse("https://fn.example/a%2Fb/caf%C3%A9")
	require.NoError(t, err)
	require.Equal(t, "/a%2Fb/caf%C3%A9", signature.PathOf(u), "as sent, percent-encoded")

	// Behind http.StripPrefix the handler sees a shorter r.URL.Path; the request line is
	// what the gateway signed.
	var got string
	h := http.StripPrefix("/api/stepgate", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = signature.RequestPath(r)
	}))
	r := httptest.NewRequest("POST", "/api/stepgate/a%2Fb?x=1", nil)
	h.ServeHTTP(httptest.NewRecorder(), r)
	require.Equal(t, "/api/stepgate/a%2Fb", got)
	r = httptest.NewRequest("POST", "http://fn.example/api/stepgate/x", nil) // the absolute form
	require.Equal(t, "/api/stepgate/x", signature.RequestPath(r))
}

func TestParseKeys(t *testing.T) {
	t.Parallel()
	pub := signature.FormatKey(public(vectorKey))
	std := base64.StdEncoding.EncodeToString(public(otherKey))
	keys, err := signature.ParsePublicKeys(" " + pub + " ," + std)
	require.NoError(t, err)
	require.Equal(t, []ed25519.PublicKey{public(vectorKey), public(otherKey)}, keys)
	_, err = signature.ParsePublicKeys(pub + ",AAAA")
	require.ErrorContains(t, err, "public key 2 is not an Ed25519 public key")
	_, err = signature.ParsePublicKeys(" , ")
	require.ErrorContains(t, err, "no public key")

	secrets, err := signature.ParseSecrets(signature.FormatKey(vectorKey.HMAC))
	require.NoError(t, err)
	require.Equal(t, [][]byte{vectorKey.HMAC}, secrets)
	_, err = signature.ParseSecrets(signature.FormatKey([]byte("short")))
	require.ErrorContains(t, err, "at least 32 bytes")
}

func FuzzParse(f *testing.F) {
	f.Add(signature.Sign(now, tenant, reqOf(body), vectorKey))
	f.Add(signature.Sign(now, "t", reqOf(nil), vectorKey, otherKey))
	f.Add(" t=1 , tenant=a%2C, v2=x, v1=" + strings.Repeat("ab", 32))
	f.Add("t=,tenant=,v1=")
	f.Add("t=1,t=1")
	f.Add("")
	f.Fuzz(func(t *testing.T, header string) {
		p, err := signature.Parse(header)
		if err != nil {
			require.True(t, errors.Is(err, signature.ErrMissing) || errors.Is(err, signature.ErrMalformed), "unexpected error %v", err)
			require.Zero(t, p.T)
			return
		}
		require.Positive(t, p.T)
		require.NotEmpty(t, p.Tenant)
		require.NotEmpty(t, append(p.Ed25519, p.HMAC...))
		// A header that parses verifies or is refused, never panics.
		_, err = signature.Verify(header, reqOf([]byte(header)), time.Unix(p.T, 0), 0, keysOf(vectorKey))
		require.True(t, err == nil || errors.Is(err, signature.ErrMismatch) || errors.Is(err, signature.ErrVersion), "unexpected error %v", err)
	})
}

func FuzzSignVerify(f *testing.F) {
	f.Add("acme", []byte(`{"protocol":1}`), int64(1_800_000_000))
	f.Fuzz(func(t *testing.T, tenant string, b []byte, unix int64) {
		if unix <= 0 || unix > 1<<40 || tenant == "" || strings.ContainsAny(tenant, "\n\x00") {
			t.Skip()
		}
		at := time.Unix(unix, 0)
		h := signature.Sign(at, tenant, reqOf(b), vectorKey)
		got, err := signature.Verify(h, reqOf(b), at, 0, publicOnly(vectorKey))
		require.NoError(t, err)
		require.Equal(t, tenant, got)
		if len(b) > 0 {
			_, err := signature.Verify(h, reqOf(b[1:]), at, 0, keysOf(vectorKey))
			require.ErrorIs(t, err, signature.ErrMismatch)
		}
	})
}

func TestVerifier(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	static := signature.StaticKeys(keysOf(vectorKey, otherKey))

	t.Run("RefusesReplaysWhateverSignatureTheyKeep", func(t *testing.T) {
		t.Parallel()
		v := signature.NewVerifier(0, 0, static)
		h := signature.Sign(now, tenant, reqOf(body), vectorKey, otherKey)
		got, err := v.Verify(ctx, h, reqOf(body), now)
		require.NoError(t, err)
		require.Equal(t, tenant, got)
		_, err = v.Verify(ctx, h, reqOf(body), now.Add(time.Minute))
		require.ErrorIs(t, err, signature.ErrReplayed)
		// The same request with only one of its signatures, or with junk added, is a replay.
		p, err := signature.Parse(h)
		require.NoError(t, err)
		only := "v=2,t=1800000000,tenant=acme%20corp,ed25519=" + base64.RawURLEncoding.EncodeToString(p.Ed25519[1])
		_, err = v.Verify(ctx, only, reqOf(body), now)
		require.ErrorIs(t, err, signature.ErrReplayed)
		_, err = v.Verify(ctx, h+",v1="+strings.Repeat("ab", 32), reqOf(body), now)
		require.ErrorIs(t, err, signature.ErrReplayed)
		// Another second, or another body, is another request.
		_, err = v.Verify(ctx, signature.Sign(now.Add(time.Second), tenant, reqOf(body), vectorKey), reqOf(body), now)
		require.NoError(t, err)
		// Refusals for other reasons come first, and remember nothing.
		forged := signature.SigningKey{Ed25519: ed25519.NewKeyFromSeed(seq(0x80, 32))}
		_, err = v.Verify(ctx, signature.Sign(now, tenant, reqOf(body), forged), reqOf(body), now)
		require.ErrorIs(t, err, signature.ErrMismatch)
		_, err = v.Verify(ctx, h, reqOf(body), now.Add(time.Hour))
		require.ErrorIs(t, err, signature.ErrExpired)
	})

	t.Run("ChecksWithoutRemembering", func(t *testing.T) {
		t.Parallel()
		v := signature.NewVerifier(0, 0, static)
		h := signature.Sign(now, tenant, reqOf(nil), vectorKey)
		for range 2 {
			_, err := v.Check(ctx, h, reqOf(nil), now)
			require.NoError(t, err)
		}
	})

	t.Run("KeysPerTenant", func(t *testing.T) {
		t.Parallel()
		var asked []string
		var mu sync.Mutex
		v := signature.NewVerifier(0, 0, func(_ context.Context, tn string, refresh bool) (signature.Keys, error) {
			mu.Lock()
			if refresh {
				asked = append(asked, "refresh "+tn)
			} else {
				asked = append(asked, tn)
			}
			mu.Unlock()
			switch tn {
			case "acme":
				return publicOnly(vectorKey), nil
			case "globex":
				return publicOnly(otherKey), nil
			case "down":
				return signature.Keys{}, errors.New("key store down")
			}
			return signature.Keys{}, nil
		})
		got, err := v.Verify(ctx, signature.Sign(now, "globex", reqOf(body), otherKey), reqOf(body), now)
		require.NoError(t, err)
		require.Equal(t, "globex", got)
		// acme's key signing a request that names globex: refused with globex's keys.
		_, err = v.Verify(ctx, signature.Sign(now, "globex", reqOf(body), vectorKey), reqOf(body), now)
		require.ErrorIs(t, err, signature.ErrMismatch)
		_, err = v.Verify(ctx, signature.Sign(now, "nobody", reqOf(body), vectorKey), reqOf(body), now)
		require.ErrorIs(t, err, signature.ErrNoKeys)
		_, err = v.Verify(ctx, signature.Sign(now, "down", reqOf(body), vectorKey), reqOf(body), now)
		require.ErrorContains(t, err, "key store down")
		// An expired request costs no key lookup.
		_, err = v.Verify(ctx, signature.Sign(now.Add(-time.Hour), "acme", reqOf(body), vectorKey), reqOf(body), now)
		require.ErrorIs(t, err, signature.ErrExpired)
		require.Equal(t, []string{"globex", "globex", "refresh globex", "nobody", "refresh nobody", "down"}, asked,
			"a mismatch asks for fresh keys once")
	})

	t.Run("RemembersWhatStaysAfterABurstExpires", func(t *testing.T) {
		t.Parallel()
		v := signature.NewVerifier(time.Minute, 0, static)
		sign := func(at time.Time, i int) (string, []byte) {
			b := []byte(fmt.Sprintf(`{"i":%d}`, i))
			return signature.Sign(at, tenant, reqOf(b), vectorKey), b
		}
		for i := range 5000 { // a burst, which leaves the window
			h, b := sign(now, i)
			_, err := v.Verify(ctx, h, reqOf(b), now)
			require.NoError(t, err)
		}
		later := now.Add(30 * time.Second)
		for i := range 10 {
			h, b := sign(later, i)
			_, err := v.Verify(ctx, h, reqOf(b), later)
			require.NoError(t, err)
		}
		// The burst has expired: the memory it held is given back, and the ten
		// signatures still in the window are still refused.
		after := now.Add(time.Minute + 2*time.Second)
		h, b := sign(after, -1)
		_, err := v.Verify(ctx, h, reqOf(b), after)
		require.NoError(t, err)
		for i := range 10 {
			h, b := sign(later, i)
			_, err := v.Verify(ctx, h, reqOf(b), after)
			require.ErrorIs(t, err, signature.ErrReplayed, "signature %d", i)
		}
	})

	t.Run("ForgetsWhatLeftTheWindow", func(t *testing.T) {
		t.Parallel()
		v := signature.NewVerifier(time.Minute, 0, static)
		h := signature.Sign(now, tenant, reqOf(body), vectorKey)
		_, err := v.Verify(ctx, h, reqOf(body), now)
		require.NoError(t, err)
		_, err = v.Verify(ctx, h, reqOf(body), now.Add(time.Minute))
		require.ErrorIs(t, err, signature.ErrReplayed)
		_, err = v.Verify(ctx, h, reqOf(body), now.Add(time.Minute+time.Second))
		require.ErrorIs(t, err, signature.ErrExpired)
		for i := 2; i < 12; i++ {
			at := now.Add(time.Duration(i) * time.Minute)
			_, err := v.Verify(ctx, signature.Sign(at, tenant, reqOf(body), vectorKey), reqOf(body), at)
			require.NoError(t, err)
		}
	})

	t.Run("BoundedWhenFull", func(t *testing.T) {
		t.Parallel()
		v := signature.NewVerifier(0, 3, static)
		var hs []string
		for i := range 4 {
			b := []byte{byte(i)}
			hs = append(hs, signature.Sign(now.Add(time.Duration(i)*time.Second), tenant, reqOf(b), vectorKey))
			_, err := v.Verify(ctx, hs[i], reqOf(b), now)
			require.NoError(t, err)
		}
		// The first (closest to expiry) was forgotten to make room; the others are kept.
		_, err := v.Verify(ctx, hs[0], reqOf([]byte{0}), now)
		require.NoError(t, err)
		_, err = v.Verify(ctx, hs[3], reqOf([]byte{3}), now)
		require.ErrorIs(t, err, signature.ErrReplayed)
	})

	t.Run("ConcurrentRepeatsAcceptOne", func(t *testing.T) {
		t.Parallel()
		v := signature.NewVerifier(0, 0, static)
		h := signature.Sign(now, tenant, reqOf(body), vectorKey)
		var accepted atomic.Int32
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				if _, err := v.Verify(ctx, h, reqOf(body), now); err == nil {
					accepted.Add(1)
				}
			})
		}
		wg.Wait()
		require.EqualValues(t, 1, accepted.Load())
	})
}

// BenchmarkSign and BenchmarkVerify measure what signing costs the gateway and verifying
// costs a function, per invocation of a 2 KB body.
func BenchmarkSign(b *testing.B) {
	req := []byte(strings.Repeat("x", 2048))
	b.ReportAllocs()
	for b.Loop() {
		_ = signature.Sign(now, tenant, reqOf(req), vectorKey)
	}
}

func BenchmarkVerify(b *testing.B) {
	req := []byte(strings.Repeat("x", 2048))
	h := signature.Sign(now, tenant, reqOf(req), vectorKey)
	keys := publicOnly(vectorKey)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := signature.Verify(h, reqOf(req), now, 0, keys); err != nil {
			b.Fatal(err)
		}
	}
}
