// Command stepgate is the stepgate gateway and its command line.
//
// "stepgate dev", "serve" and "migrate" run the gateway; every other command
// is a client of a running gateway's HTTP API (see openapi.yaml), built on the
// generated client in protocol. Run "stepgate help" for the list.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/stepgate/stepgate/internal/helpers/version"
	"github.com/stepgate/stepgate/protocol"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		os.Exit(report(os.Stderr, err))
	}
}

// report prints err for a user and returns the process exit code: 2 for
// usage errors, 1 for everything else.
func report(stderr io.Writer, err error) int {
	var uerr *usageError
	switch {
	case errors.Is(err, errFlagsReported):
		// The flag package has printed the error and the usage already.
		return 2
	case errors.As(err, &uerr):
		fmt.Fprintf(stderr, "stepgate: %v\nRun 'stepgate help' for usage.\n", err)
		return 2
	default:
		fmt.Fprintf(stderr, "stepgate: %v\n", err)
		return 1
	}
}

// run runs the stepgate command line. args are the arguments without the
// program name; getenv reads the environment (STEPGATE_URL, STEPGATE_TOKEN,
// DATABASE_URL). Invoke reads its input from standard input when --data is
// absent and standard input is a pipe or a file.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	c := &cli{
		getenv: getenv,
		stdin:  pipedStdin,
		stdout: stdout,
		stderr: stderr,
		loc:    time.Local,
	}
	return c.run(ctx, args)
}

// pipedStdin returns os.Stdin if it is a pipe or a regular file, and nil if it
// is a terminal or a device, so that invoke never blocks on a keyboard.
func pipedStdin() io.Reader {
	fi, err := os.Stdin.Stat()
	if err != nil {
		return nil
	}
	if m := fi.Mode(); m&os.ModeNamedPipe != 0 || m.IsRegular() {
		return os.Stdin
	}
	return nil
}

// cli holds what the commands read and write; tests build one directly.
type cli struct {
	getenv func(string) string
	stdin  func() io.Reader // returns nil when there is no piped input
	stdout io.Writer
	stderr io.Writer
	loc    *time.Location // times are printed in this zone
}

// errFlagsReported is returned when the flag package has already printed the
// problem and the command's usage.
var errFlagsReported = errors.New("invalid flags")

// usageError is a command line that does not make sense, such as a missing
// argument.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

const usageText = `stepgate: an HTTP-first durable functions gateway.

Usage:
  stepgate <command> [arguments] [flags]

Running the gateway:
  dev                              gateway, dashboard and example functions on a private Postgres
  serve                            the gateway against $DATABASE_URL (production)
  migrate                          apply the migrations to $DATABASE_URL

Functions and apps:
  functions register NAME --url URL [--timeout 30s] [--max-attempts N]
                                   register a function (each call makes a new revision)
  functions list                   the registered functions (also: stepgate functions)
  functions get NAME               one function's current revision
  functions queue NAME             its queued, running and held runs, per concurrency key
  functions stats NAME [--window 1h|1d]
                                   its runs per minute (or 15 minutes for 1d): started,
                                   completed, failed, durations, waits, queue depth
  functions delete NAME            unregister a function; its runs are kept
  apps sync URL [--check [--force] [--sample N]] [--dry-run]
                                   register every function in an app's manifest (a new
                                   revision only where its URL or config changed); --check
                                   first replays live runs against the new code and
                                   registers nothing if one would break

Runs:
  invoke NAME [--data JSON | --data @FILE | <FILE] [--wait [DURATION]] [--idempotency-key KEY]
                                   start a run; --wait waits for its result (30s if no DURATION)
  runs list [--function F] [--status S] [--limit N] [--cursor C]
                                   runs, newest first (also: stepgate runs)
  runs get ID                      a run with its journal and failed attempts
  runs values ID                   the latest value of each key the run published
  runs callbacks ID                the run's open callbacks with their whole URLs, to hand
                                   one to whoever resolves it (needs runs:manage)
  runs export ID [-o FILE]         the run, its whole journal and failures as one JSON
                                   file (stdout by default), to replay it locally
  runs rerun ID [--from N]         a new run of a finished run, as you; --from N replays
                                   its entries before seq N and runs N onwards again
  runs send ID TOPIC [JSON] [--id MESSAGE_ID]
                                   a message to a run's mailbox, for its step.Receive of TOPIC
  runs request ID NAME [JSON] [--wait 30s] [--id REQUEST_ID]
                                   a request to a run, for its step.ReceiveRequest of NAME:
                                   prints the reply (waits up to 1m), or where to wait again
  runs requests ID                 a run's requests, newest first: pending, replied or failed
  runs cancel ID                   cancel a run and its children (not the detached ones)
  runs cancel [--function F] [--status S,...] [--created-after T] [--created-before T] [--key-prefix P]
                                   cancel every matching run in the background, printing progress
  runs rerun [--function F] [--status S,...] [--error-type T] [--error-group G] [--from start|failure|N] [...]
                                   rerun every matching finished run as you (a redrive), in
                                   the background, printing progress; --from failure starts
                                   each at the step where it failed
  failures [list] [--since 7d] [--limit N] [--all] [--hide-redriven]
                                   failed runs grouped by function and error (dead letters),
                                   with how many were redriven and how many of those succeeded
  failures dismiss GROUP           hide a group until one of its runs fails again
  failures redrive GROUP [--from failure]
                                   rerun the group's failed runs (runs rerun --error-group)
  events send NAME [JSON] [--id EVENT_ID]
                                   send an event: it starts the runs it triggers and resumes
                                   the runs waiting for it
  callbacks resolve TOKEN|URL [JSON]
                                   resolve a run's callback with JSON (null if none); the
                                   token is the credential, no --token needed
  callbacks reject TOKEN|URL MESSAGE [--type T]
                                   reject it; the run's await gets the error

Schedules:
  schedules put NAME --function F --cron EXPR [--input JSON] [--timezone TZ]
                 [--catchup skip|one|all] [--catchup-window 1m]
                                   start a run of F on each cron tick ("0 9 * * MON-FRI",
                                   "@hourly", "@every 1m"), as you; ticks missed by more
                                   than the window start one run (or none, or all)
  schedules list                   the schedules (also: stepgate schedules)
  schedules get NAME               one schedule, its next tick and last run
  schedules delete NAME            delete a schedule; its runs are kept

Keys (the gateway signs every request to your functions with your tenant's key):
  keys                             your tenant's Ed25519 public keys, for your functions
                                   (STEPGATE_PUBLIC_KEYS) (also: keys list)
  keys secrets                     your tenant's HMAC secrets, for functions without Ed25519
  keys rotate [--overlap 24h]      a new key; the old one signs too until the overlap ends
  keys rotate-invocation [--overlap 1h]
                                   operators: a new invocation token key in $DATABASE_URL

Tokens:
  token create --sub S [--tenant T] [--role R ...] [--ttl 1h]
                                   sign a token with $STEPGATE_JWT_SECRET, or the key of
                                   the "stepgate dev" in this folder

Measuring:
  bench [--functions hello,orders.checkout,chain] [--concurrency 1,16] [--duration 10s]
        [--warmup 1s] [--database-url URL] [--floor-duration 2s]
                                   latency and throughput of a running gateway

  help                             this text
  version                          stepgate's version and the function protocol's
                                   (also: stepgate --version)

Flags of every client command:
  --url URL       the gateway; defaults to $STEPGATE_URL, else http://127.0.0.1:8080
                  (in "functions register", --url is the function's URL: use --gateway)
  --gateway URL   the gateway, in every command
  --token JWT     the bearer token; defaults to $STEPGATE_TOKEN
  --json          print the raw JSON response instead of text

Flags may come before or after the arguments. "stepgate <command> -h" lists a
command's flags.
`

// run runs one command line. A -h that printed a command's usage is not an
// error.
func (c *cli) run(ctx context.Context, args []string) error {
	err := c.dispatch(ctx, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	return err
}

// dispatch runs the command named by args[0].
func (c *cli) dispatch(ctx context.Context, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, usageText)
		return &usageError{msg: "no command given"}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "help", "-h", "-help", "--help":
		fmt.Fprint(c.stdout, usageText)
		return nil
	case "version", "-version", "--version":
		return c.version(rest)
	case "dev":
		tuneGC(c.getenv)
		return c.dev(ctx, rest)
	case "serve":
		tuneGC(c.getenv)
		return c.serve(ctx, rest)
	case "migrate":
		return c.migrate(ctx, rest)
	case "functions", "function", "fn":
		return c.functions(ctx, rest)
	case "apps", "app":
		return c.apps(ctx, rest)
	case "invoke":
		return c.invoke(ctx, rest)
	case "runs", "run":
		return c.runs(ctx, rest)
	case "schedules", "schedule":
		return c.schedules(ctx, rest)
	case "callbacks", "callback":
		return c.callbacks(ctx, rest)
	case "events", "event":
		return c.events(ctx, rest)
	case "failures", "failure":
		return c.failures(ctx, rest)
	case "bench":
		return c.bench(ctx, rest)
	case "token":
		return c.tokenCmd(ctx, rest)
	case "keys", "key":
		return c.keys(ctx, rest)
	default:
		return usagef("unknown command %q", cmd)
	}
}

// version prints "stepgate 0.1.0 (function protocol 1.0.0)": this build's version
// (see [version.String]) and the version of the function protocol it speaks.
func (c *cli) version(args []string) error {
	fs := c.newFlagSet("version", "")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: stepgate version\n\nPrints stepgate's version and the version of the function protocol it speaks.")
	}
	if _, err := parseCommand(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "stepgate %s (function protocol %s)\n", version.String(), protocol.Version)
	return nil
}

// functions dispatches "stepgate functions ...". With no subcommand (or only
// flags) it lists.
func (c *cli) functions(ctx context.Context, args []string) error {
	if len(args) == 0 || isFlag(args[0]) {
		return c.functionsList(ctx, args)
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "register", "put":
		return c.functionsRegister(ctx, rest)
	case "list", "ls":
		return c.functionsList(ctx, rest)
	case "get", "show":
		return c.functionsGet(ctx, rest)
	case "delete", "rm":
		return c.functionsDelete(ctx, rest)
	case "queue":
		return c.functionsQueue(ctx, rest)
	case "stats":
		return c.functionsStats(ctx, rest)
	default:
		return usagef("unknown command \"functions %s\" (want register, list, get, queue, stats or delete)", sub)
	}
}

// apps dispatches "stepgate apps ...".
func (c *cli) apps(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usagef("apps: want \"apps sync URL\"")
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "sync":
		return c.appsSync(ctx, rest)
	default:
		return usagef("unknown command \"apps %s\" (want sync)", sub)
	}
}

// runs dispatches "stepgate runs ...". With no subcommand (or only flags) it
// lists.
func (c *cli) runs(ctx context.Context, args []string) error {
	if len(args) == 0 || isFlag(args[0]) {
		return c.runsList(ctx, args)
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "list", "ls":
		return c.runsList(ctx, rest)
	case "get", "show":
		return c.runsGet(ctx, rest)
	case "values":
		return c.runsValues(ctx, rest)
	case "callbacks":
		return c.runsCallbacks(ctx, rest)
	case "send":
		return c.runsSend(ctx, rest)
	case "request":
		return c.runsRequest(ctx, rest)
	case "requests":
		return c.runsRequests(ctx, rest)
	case "cancel":
		return c.runsCancel(ctx, rest)
	case "rerun":
		return c.runsRerun(ctx, rest)
	case "export":
		return c.runsExport(ctx, rest)
	default:
		return usagef("unknown command \"runs %s\" (want list, get, values, callbacks, send, request, requests, cancel, rerun or export)", sub)
	}
}

func isFlag(arg string) bool { return len(arg) > 1 && arg[0] == '-' }

// newFlagSet returns a FlagSet for one command whose usage prints the
// synopsis "stepgate <name> <synopsis>" and the flags to the cli's stderr.
func (c *cli) newFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet("stepgate "+name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: stepgate %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

// parseArgs parses flags anywhere in args, before, between or after the
// positional arguments, and returns the positional ones in order. Everything
// after "--" is positional. -h prints the usage and returns flag.ErrHelp.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, errFlagsReported
		}
		rest := fs.Args()
		consumed := args[:len(args)-len(rest)]
		if len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseCommand parses args with fs and checks that exactly len(names)
// positional arguments were given; names are used in the error message.
func parseCommand(fs *flag.FlagSet, args []string, names ...string) ([]string, error) {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	cmd := strings.TrimPrefix(fs.Name(), "stepgate ")
	switch {
	case len(pos) < len(names):
		return nil, usagef("%s: missing %s", cmd, names[len(pos)])
	case len(pos) > len(names):
		return nil, usagef("%s: unexpected argument %q", cmd, pos[len(names)])
	}
	return pos, nil
}

// joinOptionalValue rewrites "-name VALUE" and "--name VALUE" as
// "--name=VALUE" when isValue(VALUE), so that a flag whose value is optional
// (a boolean-style flag such as --wait) can still take one after a space.
// It stops at "--".
func joinOptionalValue(args []string, name string, isValue func(string) bool) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return append(out, args[i:]...)
		}
		if (a == "-"+name || a == "--"+name) && i+1 < len(args) && isValue(args[i+1]) {
			out = append(out, "--"+name+"="+args[i+1])
			i++
			continue
		}
		out = append(out, a)
	}
	return out
}
