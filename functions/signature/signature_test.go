package signature_test

import (
	"crypto/sha256"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions/signature"
)

var (
	key   = []byte("key")
	other = []byte("other")
	body  = []byte(`{"protocol":1}`)
	now   = time.Unix(1_800_000_000, 0)
	hex64 = strings.Repeat("ab", sha256.Size)
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		header string
		t      int64
		sigs   int
		err    error
	}{
		{"One", "t=1800000000,v1=" + hex64, 1_800_000_000, 1, nil},
		{"Two", "t=1,v1=" + hex64 + ",v1=" + hex64, 1, 2, nil},
		{"Spaces", " t=1 , v1=" + hex64 + " ", 1, 1, nil},
		{"UnknownSchemeIgnored", "t=1,v0=zz,v2=whatever,v1=" + hex64, 1, 1, nil},
		{"SignatureFirst", "v1=" + hex64 + ",t=1", 1, 1, nil},
		{"Empty", "", 0, 0, signature.ErrMissing},
		{"NoT", "v1=" + hex64, 0, 0, signature.ErrMalformed},
		{"NoV1", "t=1", 0, 0, signature.ErrMalformed},
		{"OnlyUnknown", "t=1,v2=" + hex64, 0, 0, signature.ErrMalformed},
		{"TwoT", "t=1,t=2,v1=" + hex64, 0, 0, signature.ErrMalformed},
		{"TNotANumber", "t=now,v1=" + hex64, 0, 0, signature.ErrMalformed},
		{"TZero", "t=0,v1=" + hex64, 0, 0, signature.ErrMalformed},
		{"TNegative", "t=-5,v1=" + hex64, 0, 0, signature.ErrMalformed},
		{"NotHex", "t=1,v1=" + strings.Repeat("zz", sha256.Size), 0, 0, signature.ErrMalformed},
		{"Short", "t=1,v1=abcd", 0, 0, signature.ErrMalformed},
		{"NoEquals", "t=1,v1", 0, 0, signature.ErrMalformed},
		{"TrailingComma", "t=1,v1=" + hex64 + ",", 0, 0, signature.ErrMalformed},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ts, sigs, err := signature.Parse(tt.header)
			require.ErrorIs(t, err, tt.err)
			require.Equal(t, tt.t, ts)
			require.Len(t, sigs, tt.sigs)
		})
	}
}

func TestVerify(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		header string
		body   []byte
		window time.Duration
		keys   [][]byte
		err    error
	}{
		{"Valid", signature.Sign(now, body, key), body, 0, [][]byte{key}, nil},
		{"RotationOldKey", signature.Sign(now, body, key), body, 0, [][]byte{other, key}, nil},
		{"RotationTwoSignatures", signature.Sign(now, body, other, key), body, 0, [][]byte{key}, nil},
		{"EmptyBody", signature.Sign(now, nil, key), nil, 0, [][]byte{key}, nil},
		{"WrongKey", signature.Sign(now, body, other), body, 0, [][]byte{key}, signature.ErrMismatch},
		{"NoKeys", signature.Sign(now, body, key), body, 0, nil, signature.ErrMismatch},
		{"OtherBody", signature.Sign(now, body, key), []byte(`{}`), 0, [][]byte{key}, signature.ErrMismatch},
		{"Missing", "", body, 0, [][]byte{key}, signature.ErrMissing},
		{"Malformed", "t=1", body, 0, [][]byte{key}, signature.ErrMalformed},
		{"OldWithinWindow", signature.Sign(now.Add(-4*time.Minute), body, key), body, 0, [][]byte{key}, nil},
		{"Old", signature.Sign(now.Add(-6*time.Minute), body, key), body, 0, [][]byte{key}, signature.ErrExpired},
		{"Future", signature.Sign(now.Add(6*time.Minute), body, key), body, 0, [][]byte{key}, signature.ErrExpired},
		{"NarrowWindow", signature.Sign(now.Add(-2*time.Second), body, key), body, time.Second, [][]byte{key}, signature.ErrExpired},
		// The timestamp is signed: moving it breaks the signature.
		{"MovedTimestamp", strings.Replace(signature.Sign(now, body, key), "t=1800000000", "t=1800000001", 1), body, 0, [][]byte{key}, signature.ErrMismatch},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.ErrorIs(t, signature.Verify(tt.header, tt.body, now, tt.window, tt.keys...), tt.err)
		})
	}
}

func TestSign(t *testing.T) {
	t.Parallel()
	// A test vector for SDKs in other languages, computed with Python's hmac module:
	// HMAC-SHA256("key", `1800000000.{"protocol":1}`).
	h := signature.Sign(now, body, key)
	require.Equal(t, "t=1800000000,v1=24b70ab8000f267f7cf6b607a81bd5edc7f12bb5e5edc2da4349b1030a4f09b2", h)
	require.Equal(t, h, signature.Sign(now, body, key), "deterministic")
	require.NotEqual(t, h, signature.Sign(now, body, other))
	require.Equal(t, "t=1800000000", signature.Sign(now, body), "no keys, no signatures")
}

func FuzzParse(f *testing.F) {
	f.Add("t=1800000000,v1=" + hex64)
	f.Add("t=1,v1=" + hex64 + ",v1=" + hex64)
	f.Add(" t=1 , v2=x, v1=" + hex64)
	f.Add("t=,v1=")
	f.Add("t=1,t=1")
	f.Add("")
	f.Fuzz(func(t *testing.T, header string) {
		ts, sigs, err := signature.Parse(header)
		if err != nil {
			require.True(t, err == signature.ErrMissing || err == signature.ErrMalformed, "unexpected error %v", err)
			require.Zero(t, ts)
			require.Nil(t, sigs)
			return
		}
		require.Positive(t, ts)
		require.NotEmpty(t, sigs)
		for _, s := range sigs {
			require.Len(t, s, sha256.Size)
		}
		// A header that parses verifies or is refused, never panics.
		err = signature.Verify(header, []byte(header), time.Unix(ts, 0), 0, []byte(header))
		require.True(t, err == nil || err == signature.ErrMismatch, "unexpected error %v", err)
	})
}

func FuzzSignVerify(f *testing.F) {
	f.Add([]byte("key"), []byte(`{"protocol":1}`), int64(1_800_000_000))
	f.Fuzz(func(t *testing.T, k, b []byte, unix int64) {
		if unix <= 0 || unix > 1<<40 {
			t.Skip()
		}
		at := time.Unix(unix, 0)
		require.NoError(t, signature.Verify(signature.Sign(at, b, k), b, at, 0, k))
		if len(b) > 0 {
			require.ErrorIs(t, signature.Verify(signature.Sign(at, b, k), b[1:], at, 0, k), signature.ErrMismatch)
		}
	})
}

func TestVerifierRefusesReplays(t *testing.T) {
	t.Parallel()

	t.Run("OncePerSignature", func(t *testing.T) {
		t.Parallel()
		v := signature.NewVerifier(0, 0, key, other)
		h := signature.Sign(now, body, key)
		require.NoError(t, v.Verify(h, body, now))
		require.ErrorIs(t, v.Verify(h, body, now), signature.ErrReplayed)
		require.ErrorIs(t, v.Verify(h, body, now.Add(time.Minute)), signature.ErrReplayed)
		// Another key's signature of the same request, or another second, is another request.
		require.NoError(t, v.Verify(signature.Sign(now, body, other), body, now))
		require.NoError(t, v.Verify(signature.Sign(now.Add(time.Second), body, key), body, now))
		// A header that adds a junk v1 still carries the accepted signature.
		require.ErrorIs(t, v.Verify(h+",v1="+hex64, body, now), signature.ErrReplayed)
		// Refusals for other reasons come first, and remember nothing.
		require.ErrorIs(t, v.Verify(signature.Sign(now, body, []byte("forged")), body, now), signature.ErrMismatch)
		require.ErrorIs(t, v.Verify(h, body, now.Add(time.Hour)), signature.ErrExpired)
	})

	t.Run("ForgetsWhatLeftTheWindow", func(t *testing.T) {
		t.Parallel()
		v := signature.NewVerifier(time.Minute, 0, key)
		h := signature.Sign(now, body, key)
		require.NoError(t, v.Verify(h, body, now))
		require.ErrorIs(t, v.Verify(h, body, now.Add(time.Minute)), signature.ErrReplayed)
		require.ErrorIs(t, v.Verify(h, body, now.Add(time.Minute+time.Second)), signature.ErrExpired)
		// Later requests push the expired entries out; the cache stays bounded by the window.
		for i := 2; i < 12; i++ {
			at := now.Add(time.Duration(i) * time.Minute)
			require.NoError(t, v.Verify(signature.Sign(at, body, key), body, at))
		}
	})

	t.Run("BoundedWhenFull", func(t *testing.T) {
		t.Parallel()
		v := signature.NewVerifier(0, 3, key)
		var hs []string
		for i := range 4 {
			b := []byte{byte(i)}
			hs = append(hs, signature.Sign(now.Add(time.Duration(i)*time.Second), b, key))
			require.NoError(t, v.Verify(hs[i], b, now))
		}
		// The first (closest to expiry) was forgotten to make room; the others are kept.
		require.NoError(t, v.Verify(hs[0], []byte{0}, now))
		require.ErrorIs(t, v.Verify(hs[3], []byte{3}, now), signature.ErrReplayed)
	})

	t.Run("ConcurrentRepeatsAcceptOne", func(t *testing.T) {
		t.Parallel()
		v := signature.NewVerifier(0, 0, key)
		h := signature.Sign(now, body, key)
		var accepted atomic.Int32
		var wg sync.WaitGroup
		for range 16 {
			wg.Go(func() {
				if v.Verify(h, body, now) == nil {
					accepted.Add(1)
				}
			})
		}
		wg.Wait()
		require.EqualValues(t, 1, accepted.Load())
	})
}
