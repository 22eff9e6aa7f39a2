package functions

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/signature"
)

// GatewayKeys returns a [signature.KeyFunc] that fetches your tenant's public keys from
// the gateway at gatewayURL (GET /v1/signing-keys) with token, a bearer token of your
// tenant with the functions:read permission, so the app follows key rotations by itself.
// Use it as [Config].Keys. The keys are fetched at the first request, again after
// refresh (5 minutes when zero), and at once when a request matches none of them (at
// most once a second, since forged requests do too). A failed fetch keeps the keys
// fetched before. Requests for another tenant than the token's are refused.
//
// Fetch the keys over HTTPS: they are what the app trusts, and the token is a secret.
func GatewayKeys(gatewayURL, token string, refresh time.Duration, client *http.Client) (signature.KeyFunc, error) {
	if refresh <= 0 {
		refresh = 5 * time.Minute
	}
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	c, err := protocol.NewClientWithResponses(strings.TrimRight(gatewayURL, "/"), protocol.WithHTTPClient(client),
		protocol.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
			r.Header.Set("Authorization", "Bearer "+token)
			return nil
		}))
	if err != nil {
		return nil, fmt.Errorf("functions: gateway URL %q: %w", gatewayURL, err)
	}
	g := &gatewayKeys{client: c, refresh: refresh}
	return g.lookup, nil
}

type gatewayKeys struct {
	client  *protocol.ClientWithResponses
	refresh time.Duration

	mu      sync.Mutex
	tenant  string
	keys    signature.Keys
	fetched time.Time // of the keys held
	tried   time.Time // the last fetch, successful or not
	lastErr error
}

func (g *gatewayKeys) lookup(ctx context.Context, tenant string, refresh bool) (signature.Keys, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	// Fetching under the lock makes concurrent requests wait for one fetch.
	if (refresh || time.Since(g.fetched) > g.refresh) && time.Since(g.tried) > time.Second {
		g.tried = time.Now()
		g.lastErr = g.fetch(ctx)
	}
	if g.fetched.IsZero() {
		return signature.Keys{}, fmt.Errorf("signature: the gateway's keys could not be fetched: %w", g.lastErr)
	}
	if tenant != g.tenant {
		return signature.Keys{}, fmt.Errorf("%w %q: this app's token is of tenant %q", signature.ErrNoKeys, tenant, g.tenant)
	}
	return g.keys, nil
}

func (g *gatewayKeys) fetch(ctx context.Context) error {
	resp, err := g.client.ListSigningKeysWithResponse(ctx)
	if err != nil {
		return err
	}
	if resp.JSON200 == nil {
		return fmt.Errorf("GET /v1/signing-keys answered HTTP %d: %s", resp.StatusCode(), snippet(resp.Body))
	}
	var keys signature.Keys
	for _, k := range resp.JSON200.Keys {
		pub, err := signature.ParsePublicKeys(k.X)
		if err != nil {
			return err
		}
		keys.Public = append(keys.Public, pub...)
	}
	if len(keys.Public) == 0 {
		return errors.New("the gateway has no keys for the token's tenant")
	}
	g.tenant, g.keys, g.fetched = resp.JSON200.Tenant, keys, time.Now()
	return nil
}

func snippet(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}
