// Command stepgate-examples serves the example functions (package
// functions/examples) over HTTP, as a function author's own app would: the
// "functions" service of compose.yaml runs it.
//
// Environment (one of the ways to verify the gateway is required):
//
//	ADDR                   listen address (default :9090)
//	STEPGATE_PUBLIC_KEYS   the tenant's Ed25519 public keys, comma-separated, as
//	                       `stepgate keys` prints them
//	STEPGATE_URL and       or: fetch the tenant's public keys from the gateway
//	STEPGATE_TOKEN         (GET /v1/signing-keys) with a token of the tenant, and
//	                       follow its key rotations
//	STEPGATE_HMAC_SECRETS  or: the tenant's HMAC secrets (`stepgate keys secrets`);
//	                       weaker, see docs/auth.md
//
// Register the functions with a running gateway with
// "stepgate apps sync http://HOST:9090/". SIGTERM or an interrupt shuts it down
// gracefully, letting invocations in flight finish for up to 30 seconds.
package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/examples"
	"github.com/stepgate/stepgate/protocol/signature"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(ctx, os.Getenv, log); err != nil {
		fmt.Fprintf(os.Stderr, "stepgate-examples: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, getenv func(string) string, log *slog.Logger) error {
	addr := cmp.Or(getenv("ADDR"), ":9090")
	cfg, err := verification(getenv)
	if err != nil {
		return err
	}
	cfg.Logger = log
	app := functions.New(cfg)
	examples.Register(app)

	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: app, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("example functions serving", slog.String("addr", ln.Addr().String()))

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	return nil
}

// verification reads how the app verifies the gateway's requests.
func verification(getenv func(string) string) (functions.Config, error) {
	var cfg functions.Config
	var err error
	switch {
	case getenv("STEPGATE_PUBLIC_KEYS") != "":
		cfg.PublicKeys, err = signature.ParsePublicKeys(getenv("STEPGATE_PUBLIC_KEYS"))
	case getenv("STEPGATE_URL") != "" && getenv("STEPGATE_TOKEN") != "":
		cfg.Keys, err = functions.GatewayKeys(getenv("STEPGATE_URL"), getenv("STEPGATE_TOKEN"), 0, nil)
	case getenv("STEPGATE_HMAC_SECRETS") != "":
		cfg.HMACSecrets, err = signature.ParseSecrets(getenv("STEPGATE_HMAC_SECRETS"))
	default:
		err = errors.New("set STEPGATE_PUBLIC_KEYS (your tenant's public keys: stepgate keys), or STEPGATE_URL and STEPGATE_TOKEN " +
			"(fetch them from the gateway), or STEPGATE_HMAC_SECRETS, to verify the gateway's requests")
	}
	return cfg, err
}
