package functions_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/protocol"
)

// TestSignatureBeforeVersion: the app checks the signature before the request's
// Stepgate-Protocol header, as docs/protocol.md says: a request of another major
// version that is not signed (or signed for another path) is a 401 signature, and
// only a signed one learns the versions the app serves (400 protocol_version).
func TestSignatureBeforeVersion(t *testing.T) {
	t.Parallel()
	g, url := serve(t, func(app *functions.App) {
		functions.Register(app, "f", func(ctx context.Context, _ struct{}) (int, error) { return 1, nil })
	})
	for _, c := range []struct {
		name, signature string
		want            int
		typ             string
	}{
		{"Unsigned", "", http.StatusUnauthorized, "signature"},
		{"SignedForAnotherPath", "other", http.StatusUnauthorized, "signature"},
		{"Signed", "f", http.StatusBadRequest, "protocol_version"},
	} {
		t.Run(c.name, func(t *testing.T) {
			body, err := json.Marshal(g.Request("run-order-"+c.name, "f", `{}`))
			require.NoError(t, err)
			req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+"/f", bytes.NewReader(body))
			require.NoError(t, err)
			if c.signature != "" {
				req.Header.Set("Stepgate-Signature", g.Sign(http.MethodPost, url+"/"+c.signature, body))
			}
			req.Header.Set(protocol.VersionHeader, "2.0.0")
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			var e protocol.ErrorInfo
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&e))
			require.Equal(t, c.want, resp.StatusCode, "%+v", e)
			require.Equal(t, c.typ, e.Type, e.Message)
		})
	}
}
