package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/auth"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/examples"
	"github.com/stepgate/stepgate/internal/wiring/gatewayproc"
	"github.com/stepgate/stepgate/internal/wiring/pgserver"
	"github.com/stepgate/stepgate/protocol"
	"github.com/stepgate/stepgate/protocol/signature"
)

// devState is what `stepgate dev` keeps in .stepgate/dev.json across restarts, so its
// tokens stay valid and `stepgate token create` can sign with the same key.
type devState struct {
	JWTSecret string `json:"jwt_secret"`
}

func loadDevState(dir string) (devState, error) {
	path := filepath.Join(dir, "dev.json")
	st, err := loadDevStateFile(path)
	if !errors.Is(err, os.ErrNotExist) {
		return st, err
	}
	st = devState{JWTSecret: randomKey()}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return st, err
	}
	b, _ := json.MarshalIndent(st, "", "  ")
	return st, os.WriteFile(path, b, 0o600)
}

func loadDevStateFile(path string) (devState, error) {
	var st devState
	b, err := os.ReadFile(path)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, fmt.Errorf("%s: %w (delete it to start afresh)", path, err)
	}
	return st, nil
}

func randomKey() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// devTokenTTL is how long the token `stepgate dev` prints lasts; devOperatorRole is the
// operator role of a dev instance (its token carries it).
const (
	devTokenTTL     = 30 * 24 * time.Hour
	devOperatorRole = "stepgate-operator"
)

// localPoolSize is the gateway's connections (STEPGATE_DB_MAX_CONNS) to a Postgres on
// its own machine of cpus cores: 4 per core, at least 8. Postgres backends beyond a few
// per core only queue for the cores the gateway and its functions need too; measured on
// 2 cores, 8 connections instead of 40 took hello@16's p99 to 0.65–0.78× at the same
// runs/s (docs/benchmarks-history.md, "A pool sized to the cores").
func localPoolSize(cpus int) int32 {
	return int32(max(8, 4*cpus))
}

// dev runs the gateway, the dashboard and the example functions on a private Postgres
// in ./.stepgate (or DATABASE_URL), with generated keys and a printed dev token.
func (c *cli) dev(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	addr := fs.String("addr", "127.0.0.1:8080", "gateway listen address")
	fnAddr := fs.String("functions-addr", "127.0.0.1:0", "listen address of the example functions")
	dir := fs.String("dir", ".stepgate", "where dev keeps its Postgres data and keys")
	if err := fs.Parse(args); err != nil {
		return errFlagsReported
	}
	sc, err := readServerConfig(c.getenv)
	if err != nil {
		return err
	}
	sc.addr = *addr
	log := newLogger(c.stderr, sc.logLevel, false)
	if !loopbackAddr(sc.addr) {
		log.Warn(fmt.Sprintf("stepgate dev listens on %s, beyond this machine: whoever reaches it with the admin token it prints "+
			"(tenant %q, with the operator role, valid for %d days) holds the whole instance, and a token without a tenant claim "+
			"counts as the tenant %[2]q's; listen on 127.0.0.1, or run stepgate serve with keys of your own",
			sc.addr, auth.DefaultTenant, int(devTokenTTL.Hours()/24)), slog.String("addr", sc.addr))
	}
	st, err := loadDevState(*dir)
	if err != nil {
		return err
	}
	if len(sc.jwt.secrets) == 0 {
		sc.jwt.secrets = [][]byte{[]byte(st.JWTSecret)}
	}
	// On a dev instance one developer is the tenant and the operator, with a token
	// that lasts the session.
	sc.jwt.defaultTenant = cmp.Or(sc.jwt.defaultTenant, auth.DefaultTenant)
	sc.jwt.maxLifetime = cmp.Or(sc.jwt.maxLifetime, devTokenTTL+time.Hour)
	sc.operatorRole = cmp.Or(sc.operatorRole, devOperatorRole)
	if err := sc.validateKeys(); err != nil {
		return err
	}
	warnEgress(log, sc.egress) // what the environment opens; loopback below is dev's own
	// On a dev instance the functions run on this machine, and their developer, the
	// one tenant, sees their failures whole.
	sc.egress.AllowedNetworks = append(sc.egress.AllowedNetworks, netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128"))
	if c.getenv("STEPGATE_PRIVATE_ERROR_DETAIL") == "" {
		sc.egress.PrivateErrorDetail = true
	}
	pgSource := "" // the banner's line of the private Postgres
	if sc.databaseURL == "" {
		pg, err := startDevPostgres(ctx, pgserver.DefaultSearch(c.getenv), filepath.Join(*dir, "pg"), log, c.stderr)
		if err != nil {
			return err
		}
		defer pg.stop()
		sc.databaseURL = pg.url
		pgSource = "\n  postgres    " + pg.source
		if c.getenv("STEPGATE_DB_MAX_CONNS") == "" {
			sc.maxConns = localPoolSize(runtime.NumCPU())
		}
	}
	pc, err := sc.process(log)
	if err != nil {
		return err
	}

	// The example functions: their own HTTP server, as a real app would be. They trust
	// every tenant of this instance (keys is set once the gateway runs, before it can
	// call them), so syncing them under a second tenant works too.
	var keys atomic.Pointer[auth.SigningKeys]
	app := functions.New(functions.Config{Logger: log, Keys: func(ctx context.Context, tenant string, refresh bool) (signature.Keys, error) {
		if k := keys.Load(); k != nil {
			return k.Verification(ctx, tenant, refresh)
		}
		return signature.Keys{}, nil
	}})
	examples.Register(app)
	fnLn, err := net.Listen("tcp", *fnAddr)
	if err != nil {
		return fmt.Errorf("listen for the example functions on %s: %w", *fnAddr, err)
	}
	fnSrv := &http.Server{Handler: app, ReadHeaderTimeout: 10 * time.Second}
	go fnSrv.Serve(fnLn)
	defer fnSrv.Close()

	stopTraces, err := c.traces(ctx, &pc)
	if err != nil {
		return err
	}
	defer stopTraces()
	g, err := gatewayproc.Start(ctx, pc)
	if err != nil {
		return err
	}
	defer g.Stop(context.WithoutCancel(ctx))
	keys.Store(g.Keys)

	token, err := pc.Auth.NewToken(auth.Identity{Subject: "dev", Tenant: auth.DefaultTenant, Roles: []string{"admin", sc.operatorRole}}, devTokenTTL)
	if err != nil {
		return err
	}
	base := gatewayproc.LocalURL(g.Addr())
	appURL := gatewayproc.LocalURL(fnLn.Addr()) + "/"
	names, err := syncApp(ctx, base, token, appURL)
	if err != nil {
		return fmt.Errorf("register the example functions: %w", err)
	}
	devKeys, err := g.Keys.Keys(ctx, auth.DefaultTenant)
	if err != nil {
		return err
	}
	var publicKeys []string
	for _, k := range devKeys {
		publicKeys = append(publicKeys, signature.FormatKey(k.PublicKey))
	}
	fmt.Fprintf(c.stdout, `
stepgate dev is running
  dashboard   %[1]s/#token=%[4]s
  API         %[1]s/v1
  functions   %[2]s (served at %[3]s)
  database    %[6]s%[7]s

STEPGATE_TOKEN=%[4]s
STEPGATE_PUBLIC_KEYS=%[5]s   (your own functions verify requests with it)

Try it:
  curl -s -X POST '%[1]s/v1/functions/orders.checkout/runs?wait=30s' -H 'Authorization: Bearer %[4]s' -H 'Content-Type: application/json' -d '{"item":"book"}'

Then read the run's journal:
  export STEPGATE_URL=%[1]s STEPGATE_TOKEN=%[4]s
  %[8]s runs list
  %[8]s runs get <run id>

Press Ctrl+C to stop.
`, base, strings.Join(names, ", "), appURL, token, strings.Join(publicKeys, ","), sc.databaseURL, pgSource, launcher(c.getenv))
	select {
	case <-ctx.Done():
		return nil
	case err := <-g.Done():
		return err
	}
}

// loopbackAddr reports whether the listen address addr (host:port) is on loopback
// only: a loopback IP address or localhost. An empty host is every interface.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// createDatabase creates name on the server at adminURL unless it exists.
func createDatabase(ctx context.Context, adminURL, name string) error {
	conn, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return fmt.Errorf("connect to private postgres: %w", err)
	}
	defer conn.Close(ctx)
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("look for database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// syncApp registers every function of the app at appURL through the gateway's API.
func syncApp(ctx context.Context, baseURL, token, appURL string) ([]string, error) {
	client, err := protocol.NewClientWithResponses(baseURL, protocol.WithRequestEditorFn(func(_ context.Context, r *http.Request) error {
		r.Header.Set("Authorization", "Bearer "+token)
		return nil
	}))
	if err != nil {
		return nil, err
	}
	resp, err := client.SyncAppWithResponse(ctx, nil, protocol.AppSync{URL: appURL})
	if err != nil {
		return nil, err
	}
	if resp.JSON200 == nil {
		return nil, fmt.Errorf("HTTP %d: %s", resp.StatusCode(), resp.Body)
	}
	var names []string
	for _, f := range resp.JSON200.Functions {
		names = append(names, f.Name)
	}
	return names, nil
}

// launcher is how the user ran this command, for the banner's command lines: what
// STEPGATE_LAUNCHER says (the npm package's shim sets "npx stepgate"), else "go run
// ./cmd/stepgate" for a binary that go run built (in the go command's temporary build
// directory), else "stepgate".
func launcher(getenv func(string) string) string {
	if l := getenv("STEPGATE_LAUNCHER"); l != "" {
		return l
	}
	if exe, err := os.Executable(); err == nil && strings.Contains(filepath.ToSlash(exe), "/go-build") {
		return "go run ./cmd/stepgate"
	}
	return "stepgate"
}
