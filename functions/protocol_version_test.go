package functions_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/internal/gatewaytest"
	"github.com/stepgate/stepgate/protocol"
)

// TestProtocolVersion: the app says the protocol version it speaks in its manifest and
// on every answer, serves a gateway that says nothing or one of its major, and refuses
// one of another major, or a header that is not a version, before its function runs,
// with an error naming both versions.
func TestProtocolVersion(t *testing.T) {
	t.Parallel()
	var served, refused atomic.Int64
	g, url := serve(t, func(app *functions.App) {
		functions.Register(app, "served", func(ctx context.Context, _ struct{}) (int64, error) {
			return served.Add(1), nil
		})
		functions.Register(app, "refused", func(ctx context.Context, _ struct{}) (int64, error) {
			return refused.Add(1), nil
		})
	})
	const sdk = gatewaytest.SDK
	// send sends a signed request with the protocol header v (none when empty).
	send := func(t *testing.T, method, target string, body []byte, v string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, target, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Stepgate-Signature", g.Sign(method, target, body))
		if v != "" {
			req.Header.Set("Stepgate-Protocol", v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, b
	}
	var runs atomic.Int64
	invoke := func(t *testing.T, function, v string) (*http.Response, protocol.ErrorInfo) {
		t.Helper()
		// A new run each time: a signed body sent twice is a replay.
		body, err := json.Marshal(g.Request(fmt.Sprintf("run-%d", runs.Add(1)), function, `{}`))
		require.NoError(t, err)
		resp, b := send(t, http.MethodPost, url+"/"+function, body, v)
		var e protocol.ErrorInfo
		if resp.StatusCode != http.StatusOK {
			require.NoError(t, json.Unmarshal(b, &e), string(b))
		}
		return resp, e
	}

	t.Run("ManifestSaysTheVersions", func(t *testing.T) {
		t.Parallel()
		resp, b := send(t, http.MethodGet, url+"/", nil, protocol.Version)
		require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
		require.Equal(t, protocol.Version, resp.Header.Get("Stepgate-Protocol"))
		var m struct {
			Protocol        int    `json:"protocol"`
			ProtocolVersion string `json:"protocol_version"`
			SDK             string `json:"sdk"`
		}
		require.NoError(t, json.Unmarshal(b, &m))
		require.Equal(t, 1, m.Protocol)
		require.Equal(t, protocol.Version, m.ProtocolVersion)
		require.Equal(t, sdk, m.SDK)
	})

	t.Run("ServesItsMajor", func(t *testing.T) {
		t.Parallel()
		for i, v := range []string{"", protocol.Version, "1.9.3"} {
			resp, e := invoke(t, "served", v)
			require.Equal(t, http.StatusOK, resp.StatusCode, "gateway %q: %+v", v, e)
			require.Equal(t, protocol.Version, resp.Header.Get("Stepgate-Protocol"), "gateway %q", v)
			require.Equal(t, int64(i+1), served.Load())
		}
	})

	t.Run("RefusesAnotherMajor", func(t *testing.T) {
		t.Parallel()
		for v, want := range map[string]string{
			"2.0.0": "the gateway speaks function protocol 2.0.0; this SDK (" + sdk + ") speaks 1.0.0 and serves gateways of protocol 1.x only",
			"0.9.0": "the gateway speaks function protocol 0.9.0; this SDK (" + sdk + ") speaks 1.0.0 and serves gateways of protocol 1.x only",
			"2":     `the gateway's Stepgate-Protocol header "2" is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0); this SDK (` + sdk + `) speaks 1.0.0`,
			"1.0.0.0": `the gateway's Stepgate-Protocol header "1.0.0.0" is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0); this SDK (` +
				sdk + `) speaks 1.0.0`,
			strings.Repeat("9", 4000): `the gateway's Stepgate-Protocol header "` + strings.Repeat("9", protocol.MaxVersionLen) +
				`"… is not a protocol version (MAJOR.MINOR.PATCH, e.g. 1.0.0); this SDK (` + sdk + `) speaks 1.0.0`,
		} {
			resp, e := invoke(t, "refused", v)
			require.Equal(t, http.StatusBadRequest, resp.StatusCode, "gateway %q", v)
			require.Equal(t, protocol.ErrorInfo{Type: "protocol_version", Message: want}, e)
			require.Equal(t, protocol.Version, resp.Header.Get("Stepgate-Protocol"))
		}
		require.Zero(t, refused.Load(), "a refused invocation runs nothing")
	})
}
