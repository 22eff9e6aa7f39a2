package auth

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/MicahParks/keyfunc/v3"
	"github.com/golang-jwt/jwt/v5"
	"golang.org/x/time/rate"
)

// maxJWKSBytes bounds a JWKS document.
const maxJWKSBytes = 1 << 20

// jwks holds an identity provider's key set: fetched at start, refreshed on an interval
// by jwkset's goroutine, and on a token with an unknown kid, rate limited.
type jwks struct {
	url     string
	cached  jwkset.Storage // the fetched keys; reading it never fetches
	kf      keyfunc.Keyfunc
	limiter *rate.Limiter
	cancel  context.CancelFunc
}

func newJWKS(cfg Config) (*jwks, error) {
	ctx, cancel := context.WithCancel(context.Background())
	client := *cfg.JWKSClient
	client.Transport = limitedTransport{cmpTransport(client.Transport)}
	log := cfg.Logger.With(slog.String("jwks_url", cfg.JWKSURL))
	cached, err := jwkset.NewStorageFromHTTP(cfg.JWKSURL, jwkset.HTTPClientStorageOptions{
		Client:                    &client,
		Ctx:                       ctx,
		HTTPTimeout:               cmp.Or(client.Timeout, 10*time.Second),
		NoErrorReturnFirstHTTPReq: true,
		RefreshErrorHandler: func(ctx context.Context, err error) {
			log.WarnContext(ctx, "jwks fetch failed; keeping the keys fetched before", slog.Any("error", err))
		},
		RefreshInterval: cfg.JWKSRefreshInterval,
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("auth: JWKS URL %q: %w", cfg.JWKSURL, err)
	}
	limiter := rate.NewLimiter(rate.Every(cfg.JWKSRefreshLimit), 1)
	storage, err := jwkset.NewHTTPClient(jwkset.HTTPClientOptions{
		HTTPURLs:          map[string]jwkset.Storage{cfg.JWKSURL: cached},
		RateLimitWaitMax:  cmp.Or(client.Timeout, 10*time.Second), // bounds the wait and the fetch
		RefreshUnknownKID: limiter,
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("auth: JWKS URL %q: %w", cfg.JWKSURL, err)
	}
	kf, err := keyfunc.New(keyfunc.Options{Ctx: ctx, Storage: storage})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("auth: JWKS URL %q: %w", cfg.JWKSURL, err)
	}
	return &jwks{url: cfg.JWKSURL, cached: cached, kf: kf, limiter: limiter, cancel: cancel}, nil
}

func (j *jwks) close() { j.cancel() }

// keys returns the JWKS keys that may have signed t: the one its kid names, fetching
// the set again when the kid is unknown and the rate limit allows (a token with an
// unknown kid is refused at once otherwise, never held), or without a kid every key
// that fits its algorithm. Symmetric keys in a JWKS are never used.
func (j *jwks) keys(ctx context.Context, t *jwt.Token) ([]jwt.VerificationKey, error) {
	alg := t.Method.Alg()
	if _, ok := t.Header["kid"]; !ok {
		set, err := j.kf.VerificationKeySet(ctx)
		if err != nil {
			return nil, errors.Join(errNoKey, err)
		}
		var keys []jwt.VerificationKey
		for _, k := range set.Keys {
			if keyFits(alg, k) {
				keys = append(keys, k)
			}
		}
		return keys, nil
	}
	kid, _ := t.Header["kid"].(string)
	if _, err := j.cached.KeyRead(ctx, kid); errors.Is(err, jwkset.ErrKeyNotFound) && j.limiter.Tokens() < 1 {
		return nil, errUnknownKID
	}
	key, err := j.kf.KeyfuncCtx(ctx)(t)
	switch {
	case errors.Is(err, jwkset.ErrKeyNotFound):
		return nil, errUnknownKID
	case err != nil:
		return nil, errors.Join(errJWKSKey, err)
	case !keyFits(alg, key):
		if _, symmetric := key.([]byte); symmetric {
			return nil, fmt.Errorf("%w: the JWKS holds a symmetric key", errJWKSKey)
		}
		return nil, errJWKSKey
	}
	return []jwt.VerificationKey{key}, nil
}

// limitedTransport bounds the JWKS responses it reads.
type limitedTransport struct{ rt http.RoundTripper }

func (l limitedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.rt.RoundTrip(r)
	if err == nil {
		resp.Body = limitedBody{io.LimitReader(resp.Body, maxJWKSBytes), resp.Body}
	}
	return resp, err
}

type limitedBody struct {
	io.Reader
	io.Closer
}

func cmpTransport(rt http.RoundTripper) http.RoundTripper {
	if rt == nil {
		return http.DefaultTransport
	}
	return rt
}
