package examples_test

import (
	"crypto/ed25519"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/examples"
	"github.com/stepgate/stepgate/functions/internal/gatewaytest"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/signature"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func serve(t *testing.T) (*gatewaytest.Gateway, string) {
	t.Helper()
	key := &signature.SigningKey{Ed25519: ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))}
	app := functions.New(functions.Config{
		PublicKeys: []ed25519.PublicKey{key.Ed25519.Public().(ed25519.PublicKey)},
		Logger:     slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	examples.Register(app)
	srv := httptest.NewServer(app)
	t.Cleanup(srv.Close)
	return gatewaytest.New(t, key), srv.URL
}

func TestExamples(t *testing.T) {
	t.Parallel()

	t.Run("Manifest", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t)
		r := g.Get(url + "/")
		require.JSONEq(t, `{"protocol":1,"protocol_version":"`+protocol.Version+`","sdk":"`+gatewaytest.SDK+`","replay_only":true,"functions":[
			{"name":"chain","path":"chain","config":{"modes":["request","duplex"]}},
			{"name":"flaky","path":"flaky","config":{"modes":["request","duplex"]}},
			{"name":"hello","path":"hello","config":{"modes":["request","duplex"]}},
			{"name":"hello.keyed","path":"hello.keyed","config":{"modes":["request","duplex"],"concurrency":[{"limit":1,"key":"input.key"}]}},
			{"name":"hello.limited","path":"hello.limited","config":{"modes":["request","duplex"],"concurrency":[{"limit":1000}]}},
			{"name":"nap","path":"nap","config":{"modes":["request","duplex"]}},
			{"name":"orders.approval","path":"orders.approval","config":{"modes":["request","duplex"]}},
			{"name":"orders.await_payment","path":"orders.await_payment","config":{"modes":["request","duplex"]}},
			{"name":"orders.checkout","path":"orders.checkout","config":{"modes":["request","duplex"],"timeout":"30s","retries":{"max_attempts":5}}},
			{"name":"orders.checkout_inline","path":"orders.checkout_inline","config":{"modes":["request","duplex"]}},
			{"name":"orders.fulfil","path":"orders.fulfil","config":{"modes":["request","duplex"],"concurrency":[{"limit":1,"key":"input.customer_id"}]}},
			{"name":"orders.fulfil_all","path":"orders.fulfil_all","config":{"modes":["request","duplex"]}},
			{"name":"orders.notify","path":"orders.notify","config":{"modes":["request","duplex"],"throttle":{"limit":2,"period":"1s","burst":1,"key":"input.customer_id"}}},
			{"name":"orders.quote","path":"orders.quote","config":{"modes":["request","duplex"]}},
			{"name":"sleep","path":"sleep","config":{"modes":["request","duplex"]}}
		]}`, string(r.Body))
	})

	for _, tt := range []struct {
		name, function, input string
		invocations           int
		status                protocol.AnswerStatus
		output                string
		journal               []string
	}{
		{"Hello", "hello", `{"name":"Ada"}`, 1, protocol.AnswerStatusCompleted, `{"greeting":"Hello, Ada!"}`, nil},
		{"HelloWorld", "hello", `{}`, 1, protocol.AnswerStatusCompleted, `{"greeting":"Hello, World!"}`, nil},
		{"Checkout", "orders.checkout", `{"order_id":"o1","amount":500}`, 1, protocol.AnswerStatusCompleted,
			`{"reservation":{"order_id":"o1","reserved":true},"charge":{"charge_id":"ch_o1","amount":500},"shipment":{"tracking":"trk_o1"}}`,
			[]string{"step reserve", "step charge", "step ship"}},
		{"CheckoutWithSleep", "orders.checkout", `{"sleep_ms":1500}`, 2, protocol.AnswerStatusCompleted,
			`{"reservation":{"order_id":"run-1","reserved":true},"charge":{"charge_id":"ch_run-1","amount":0},"shipment":{"tracking":"trk_run-1"}}`,
			[]string{"step reserve", "step charge", "sleep cool-off", "step ship"}},
		{"CheckoutShipFailsAndIsUndone", "orders.checkout", `{"order_id":"o1","amount":500,"fail_ship":true}`, 1, protocol.AnswerStatusFailed, "",
			[]string{"step reserve", "step charge", "step ship", "step compensate refund", "step compensate release"}},
		{"Fulfil", "orders.fulfil", `{"order_id":"o1","amount":500}`, 2, protocol.AnswerStatusCompleted,
			`{"tracking":"trk_o1"}`, []string{"invoke checkout"}},
		{"AwaitPaymentTimesOut", "orders.await_payment", `{"order_id":"o1"}`, 2, protocol.AnswerStatusCompleted,
			`{"paid":false}`, []string{"wait_event payment"}},
		{"Nap", "nap", `{"until":"2026-01-01T00:00:00Z"}`, 2, protocol.AnswerStatusCompleted, `{"woke":true}`,
			[]string{"sleep nap", "step woke"}},
		{"Flaky", "flaky", `{}`, 3, protocol.AnswerStatusCompleted, `{"attempts":3}`, []string{"step attempt"}},
		{"FlakyOnce", "flaky", `{"fail_times":0}`, 1, protocol.AnswerStatusCompleted, `{"attempts":1}`, []string{"step attempt"}},
		{"Sleep", "sleep", `{"ms":1500}`, 2, protocol.AnswerStatusCompleted, `{"slept_ms":1500}`, []string{"sleep sleep"}},
		{"FlakyFails", "flaky", `{"fail_times":3}`, 3, protocol.AnswerStatusFailed, "", []string{"step attempt"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			g, url := serve(t)

			r, n := g.Run(url+"/"+tt.function, "run-1", tt.function, tt.input, 1)
			require.Equal(t, http.StatusOK, r.Code, string(r.Body))
			require.Equal(t, tt.status, r.Answer.Status, string(r.Body))
			require.Equal(t, tt.invocations, n)
			if tt.output != "" {
				require.JSONEq(t, tt.output, string(*r.Answer.Output))
			}
			var journal []string
			for _, e := range g.Journal("run-1") {
				journal = append(journal, string(e.Kind)+" "+e.Name)
			}
			require.Equal(t, tt.journal, journal)
		})
	}

	t.Run("AwaitPaymentIsPaid", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t)
		var awaited protocol.Await
		g.OnWaitEvent(func(_ string, aw protocol.Await) json.RawMessage {
			awaited = aw
			return json.RawMessage(`{"event":{"id":"pay-1","name":"orders.paid","data":{"order_id":"o1","amount":12.5},
				"identity":{"subject":"psp","tenant":"acme","roles":["invoker"]},"created_at":"2026-12-01T00:00:00Z"}}`)
		})
		r, _ := g.Run(url+"/orders.await_payment", "run-1", "orders.await_payment", `{"order_id":"o1","timeout":"5m"}`, 1)
		require.JSONEq(t, `{"paid":true,"amount":12.5,"event_id":"pay-1","paid_by":"psp"}`, string(*r.Answer.Output))
		require.Equal(t, "orders.paid", *awaited.Event)
		require.Equal(t, "5m0s", *awaited.Timeout)
		require.JSONEq(t, `{"data.order_id":"o1"}`, string(must(json.Marshal(awaited.Match))))
	})

	t.Run("FlakyFailureIsJournaled", func(t *testing.T) {
		t.Parallel()
		g, url := serve(t)

		r, _ := g.Run(url+"/flaky", "run-1", "flaky", `{"fail_times":5}`, 1)
		want := protocol.ErrorInfo{Type: "step_failed", Message: "attempt 3 of 5 planned failures: flaky by design", Retryable: new(false)}
		require.Equal(t, want, *r.Answer.Error)
		e := g.Journal("run-1")[0]
		require.Equal(t, 3, *e.Attempt)
		require.Equal(t, want, *e.Error)
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
