package functions_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/signature"
)

// BenchmarkInvoke measures one invocation of a function with ten steps, each
// checkpointed to a local server: the SDK's overhead per step plus ten loopback calls.
func BenchmarkInvoke(b *testing.B) {
	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte(`{"seq":1}`))
	}))
	defer gateway.Close()
	app := functions.New(functions.Config{PublicKeys: []ed25519.PublicKey{pub(newKey)}})
	functions.Register(app, "ten", func(ctx context.Context, in struct{ N int }) (int, error) {
		sum := 0
		for i := range 10 {
			n, err := step.Run(ctx, "step-"+strconv.Itoa(i), func(ctx context.Context) (int, error) { return in.N + i, nil })
			if err != nil {
				return 0, err
			}
			sum += n
		}
		return sum, nil
	})
	req := protocol.InvocationRequest{
		Protocol:   protocol.InvocationRequestProtocolN1,
		Run:        protocol.InvocationRun{Function: "ten", Attempt: 1, Input: protocol.AnyJSON(`{"N":1}`), CreatedAt: time.Now()},
		Identity:   protocol.Identity{Subject: "bench", Tenant: "acme", Roles: []string{}},
		Journal:    []protocol.JournalEntry{},
		Checkpoint: protocol.Checkpoint{URL: gateway.URL, Token: "t"},
	}

	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		// Each invocation is a new run: the app refuses a replayed signature.
		b.StopTimer()
		req.Run.ID = "run-" + strconv.Itoa(i)
		body, err := json.Marshal(req)
		if err != nil {
			b.Fatal(err)
		}
		sig := signature.Sign(time.Now(), "acme", signature.Request{Method: http.MethodPost, Path: "/ten", Body: body}, *newKey)
		b.StartTimer()
		r := httptest.NewRequest(http.MethodPost, "/ten", bytes.NewReader(body))
		r.Header.Set(signature.Header, sig)
		w := httptest.NewRecorder()
		app.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			b.Fatal(w.Code, w.Body.String())
		}
	}
}
