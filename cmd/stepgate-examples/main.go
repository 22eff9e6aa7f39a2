// Command stepgate-examples serves the example functions (package
// functions/examples) over HTTP, as a function author's own app would: the
// "functions" service of compose.yaml runs it.
//
// Environment:
//
//	ADDR                   listen address (default :9090)
//	STEPGATE_SIGNING_KEYS  comma-separated keys, newest first, that verify the
//	                       gateway's Stepgate-Signature; the same value as the
//	                       gateway's. Required.
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
	"strings"
	"syscall"
	"time"

	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/examples"
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
	var keys [][]byte
	for k := range strings.SplitSeq(getenv("STEPGATE_SIGNING_KEYS"), ",") {
		if k = strings.TrimSpace(k); k != "" {
			keys = append(keys, []byte(k))
		}
	}
	if len(keys) == 0 {
		return errors.New("STEPGATE_SIGNING_KEYS is not set (comma-separated, newest first; the gateway's value)")
	}

	app := functions.New(functions.Config{SigningKeys: keys, Logger: log})
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
