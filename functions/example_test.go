package functions_test

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/functionstest"
	"github.com/stepgate/stepgate/functions/step"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/signature"
)

type Order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

type Receipt struct {
	ChargeID string `json:"charge_id"`
	Tracking string `json:"tracking"`
}

// checkout is a durable function: each step runs until it succeeds once, and a replay
// returns its journaled output instead of running it again.
func checkout(ctx context.Context, o Order) (Receipt, error) {
	chargeID, err := step.Run(ctx, "charge", func(ctx context.Context) (string, error) {
		return "ch_" + o.ID, nil // call the payment provider here
	}, step.MaxAttempts(5), step.Backoff(time.Second, time.Minute))
	if err != nil {
		return Receipt{}, err // the charge failed for good: the run fails
	}
	if err := step.Sleep(ctx, "cool-off", 10*time.Minute); err != nil {
		return Receipt{}, err
	}
	tracking, err := step.Run(ctx, "ship", func(ctx context.Context) (string, error) {
		return "trk_" + o.ID, nil
	})
	return Receipt{ChargeID: chargeID, Tracking: tracking}, err
}

// Serve an app of functions, then register it with the gateway:
//
//	stepgate apps sync http://127.0.0.1:9090/
func Example() {
	// Your tenant's public keys, as `stepgate keys` prints them.
	keys, err := signature.ParsePublicKeys(os.Getenv("STEPGATE_PUBLIC_KEYS"))
	if err != nil {
		log.Fatal(err)
	}
	app := functions.New(functions.Config{PublicKeys: keys})
	functions.Register(app, "orders.checkout", checkout, functions.InvocationTimeout(30*time.Second))
	log.Fatal(http.ListenAndServe("127.0.0.1:9090", app))
}

// The gateway's side of one invocation, played by hand: the first invocation journals
// the charge with a checkpoint, then suspends the run for the sleep.
func ExampleRegister() {
	// The gateway holds a private key per tenant; the app holds the tenant's public key.
	key := signature.SigningKey{Ed25519: ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))}
	app := functions.New(functions.Config{PublicKeys: []ed25519.PublicKey{key.Ed25519.Public().(ed25519.PublicKey)}})
	functions.Register(app, "orders.checkout", checkout)
	fns := httptest.NewServer(app)
	defer fns.Close()

	gateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/current") {
			// Before its first step that the journal does not hold, the invocation asks
			// whether it still owns the run: a captured request sent again does not.
			fmt.Printf("owns the run? yes (%s)\n", r.Header.Get("Authorization"))
			fmt.Fprint(w, `{"run_id":"run-1"}`)
			return
		}
		var e protocol.JournalEntry
		_ = json.NewDecoder(r.Body).Decode(&e)
		fmt.Printf("checkpoint %d %s %q: %s (%s)\n", e.Seq, e.Kind, e.Name, *e.Output, r.Header.Get("Authorization"))
		fmt.Fprintf(w, `{"seq":%d}`, e.Seq)
	}))
	defer gateway.Close()

	body, _ := json.Marshal(map[string]any{
		"protocol":   1,
		"run":        map[string]any{"id": "run-1", "function": "orders.checkout", "revision": 1, "attempt": 1, "input": Order{ID: "42", Amount: 1000}, "created_at": time.Now()},
		"identity":   map[string]any{"subject": "ada", "tenant": "acme", "roles": []string{}},
		"journal":    []any{},
		"checkpoint": map[string]any{"url": gateway.URL + "/v1/runs/run-1/checkpoint", "token": "invocation-token"},
	})
	req, _ := http.NewRequest(http.MethodPost, fns.URL+"/orders.checkout", strings.NewReader(string(body)))
	req.Header.Set(signature.Header, signature.Sign(time.Now(), "acme", signature.Request{Method: http.MethodPost, Path: "/orders.checkout", Body: body}, key))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	// The charge was journaled by its checkpoint before step.Run returned; the answer
	// suspends the run for the sleep.
	var answer protocol.InvocationAnswer
	_ = json.NewDecoder(resp.Body).Decode(&answer)
	fmt.Printf("%d %s: %s %d %q for %s\n", resp.StatusCode, answer.Status, answer.Await.Type, answer.Await.Seq, answer.Await.Name, *answer.Await.Duration)
	// Output:
	// owns the run? yes (Bearer invocation-token)
	// checkpoint 1 step "charge": "ch_42" (Bearer invocation-token)
	// 200 suspended: sleep 2 "cool-off" for 10m0s
}

// TestCheckout is the package doc's test of checkout: in functionstest, on a virtual
// clock, with no gateway.
func TestCheckout(t *testing.T) {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	functions.Register(app, "orders.checkout", checkout)
	h := functionstest.New(t, app)

	run := h.Start("orders.checkout", Order{ID: "42", Amount: 1000})
	if res := run.Result(); res.Status != functionstest.Suspended {
		t.Fatalf("want the run asleep in its cool-off, got %+v", res)
	}
	res := run.Advance(10 * time.Minute) // the virtual clock: no real wait
	var got Receipt
	if err := res.Decode(&got); err != nil || got.Tracking != "trk_42" {
		t.Fatalf("got %+v, %v", got, err)
	}
}

// TestCheckoutCrash: an invocation lost right after the charge is journaled is retried,
// and the retry replays the charge instead of charging again.
func TestCheckoutCrash(t *testing.T) {
	app := functions.New(functions.Config{InsecureSkipVerify: true})
	functions.Register(app, "orders.checkout", checkout)
	h := functionstest.New(t, app)

	crashed := h.StartCrashing("orders.checkout", Order{ID: "43"}, 1) // lost after the charge
	crashed.Advance(10 * time.Minute)
	if res := crashed.Result(); res.Status != functionstest.Completed || res.Invocations != 3 {
		t.Fatalf("want the run completed in 3 invocations (the crash, the sleep, the rest), got %+v", res)
	}
	charges := 0
	for _, e := range crashed.Journal() {
		if e.Name == "charge" {
			charges++
		}
	}
	if charges != 1 {
		t.Errorf("the journal holds %d charges, want 1", charges)
	}
}
