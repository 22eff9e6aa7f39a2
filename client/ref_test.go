package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stepgate/stepgate/client"
)

// An empty Ref (the zero value, as a Ref that functions.Register has not returned yet)
// is refused by the client with what to do, and no request is sent: the gateway would
// answer a 400 "parameter 'name' is empty".
func TestEmptyRef(t *testing.T) {
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		http.Error(w, `{"detail":"parameter 'name' is empty"}`, http.StatusBadRequest)
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	var checkout client.Ref[string, string] // set by functions.Register, later
	for call, err := range map[string]error{
		"Run":   func() error { _, err := client.Run(context.Background(), c, checkout, "o1"); return err }(),
		"Start": func() error { _, err := client.Start(context.Background(), c, checkout, "o1"); return err }(),
	} {
		if err == nil {
			t.Fatalf("%s with an empty Ref: no error", call)
		}
		for _, want := range []string{"client: start: the function's Ref is empty", "functions.Register", `client.Ref[In, Out]("orders.checkout")`} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s with an empty Ref: %q does not say %q", call, err, want)
			}
		}
	}
	if n := requests.Load(); n != 0 {
		t.Errorf("%d requests sent with an empty Ref", n)
	}
}
