package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"syscall"

	"github.com/stepgate/stepgate/protocol"
)

// defaultGateway is where the client commands look for a gateway when neither
// --url nor STEPGATE_URL says otherwise; it is where "stepgate dev" listens.
const defaultGateway = "http://127.0.0.1:8080"

// clientFlags are the flags every client command takes.
type clientFlags struct {
	gateway string // --url or --gateway; empty: $STEPGATE_URL, then defaultGateway
	token   string // --token; empty: $STEPGATE_TOKEN
	json    bool   // --json: print the raw JSON response
}

// addClientFlags registers --gateway, --token and --json on fs, and --url as
// the gateway unless urlIsGateway is false (in "functions register" --url is
// the function's URL).
func addClientFlags(fs *flag.FlagSet, urlIsGateway bool) *clientFlags {
	f := &clientFlags{}
	const gatewayUsage = "the gateway `URL` (default $STEPGATE_URL, else " + defaultGateway + ")"
	if urlIsGateway {
		fs.StringVar(&f.gateway, "url", "", gatewayUsage)
	}
	fs.StringVar(&f.gateway, "gateway", "", gatewayUsage)
	fs.StringVar(&f.token, "token", "", "the bearer `JWT` (default $STEPGATE_TOKEN)")
	fs.BoolVar(&f.json, "json", false, "print the raw JSON response instead of text")
	return f
}

// gatewayURL returns the gateway's base URL from the flags or the
// environment, checked to be an absolute http(s) URL.
func (c *cli) gatewayURL(f *clientFlags) (string, error) {
	base := cmp.Or(f.gateway, c.getenv("STEPGATE_URL"), defaultGateway)
	u, err := url.Parse(base)
	if err != nil {
		return "", fmt.Errorf("gateway url %q: %w", base, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("gateway url %q: want http://host:port or https://host", base)
	}
	return base, nil
}

// token returns the bearer token from the flags or the environment.
func (c *cli) token(f *clientFlags) string {
	return cmp.Or(f.token, c.getenv("STEPGATE_TOKEN"))
}

// client returns a generated API client for the gateway the flags name whose
// every request carries the bearer token. hc may be nil for a default
// http.Client.
func (c *cli) client(f *clientFlags, hc *http.Client) (*protocol.ClientWithResponses, error) {
	base, err := c.gatewayURL(f)
	if err != nil {
		return nil, err
	}
	if hc == nil {
		hc = &http.Client{}
	}
	opts := []protocol.ClientOption{protocol.WithHTTPClient(hc)}
	if tok := c.token(f); tok != "" {
		opts = append(opts, protocol.WithRequestEditorFn(bearer(tok)))
	}
	cl, err := protocol.NewClientWithResponses(base, opts...)
	if err != nil {
		return nil, fmt.Errorf("gateway client: %w", err)
	}
	return cl, nil
}

// bearer returns a request editor that adds "Authorization: Bearer <token>".
func bearer(token string) protocol.RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+token)
		return nil
	}
}

// response is what every generated *Response type offers.
type response interface {
	StatusCode() int
	GetBody() []byte
}

// expect returns nil if r has one of the wanted status codes, and an
// *apiError made from its body otherwise.
func expect(r response, want ...int) error {
	if slices.Contains(want, r.StatusCode()) {
		return nil
	}
	return problemError(r.StatusCode(), r.GetBody())
}

// apiError is an error answer of the gateway, usually from a problem+json
// body. Its message reads `404 Not Found: function "x" is not registered`.
type apiError struct {
	Status int
	Title  string
	Detail string
}

func (e *apiError) Error() string {
	title := cmp.Or(e.Title, http.StatusText(e.Status), "HTTP error")
	if e.Detail == "" || e.Detail == title {
		return fmt.Sprintf("%d %s", e.Status, title)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, title, e.Detail)
}

// problemError makes an *apiError from an error answer: a problem+json body,
// echo's {"message": ...}, or else the start of the body as text.
func problemError(status int, body []byte) *apiError {
	e := &apiError{Status: status}
	var p struct {
		protocol.Problem
		Message any `json:"message"`
	}
	if json.Unmarshal(body, &p) == nil {
		e.Title = p.Title
		e.Detail = p.Detail
		if e.Detail == "" && p.Message != nil {
			e.Detail = fmt.Sprint(p.Message)
		}
		if e.Title != "" || e.Detail != "" {
			return e
		}
	}
	e.Detail = truncate(strings.Join(strings.Fields(string(body)), " "), 200)
	return e
}

// requestError wraps an error from sending a request, and hints at the usual
// cause when nothing listens at the gateway URL.
func requestError(what string, err error) error {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return fmt.Errorf("%s: %w (is the gateway running? try \"stepgate dev\", or set STEPGATE_URL)", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// printRaw writes a raw JSON response body with a final newline; an empty
// body (204) writes nothing.
func printRaw(w io.Writer, body []byte) error {
	body = bytes.TrimSpace(body)
	if len(body) == 0 {
		return nil
	}
	_, err := fmt.Fprintf(w, "%s\n", body)
	return err
}

// singleRequest runs a client command that sends a single request: about the thing
// its one argument names (argName), or with no argument when argName is "". It parses
// the flags, sends the request within requestTimeout, turns an unexpected status into
// its problem, and prints the raw body with --json, else what show prints. what names
// the request in errors ("get run").
func singleRequest[R response](ctx context.Context, c *cli, args []string, cmd, argName, what string, want []int,
	send func(context.Context, *protocol.ClientWithResponses, string) (R, error), show func(resp R, arg string) error) error {
	fs := c.newFlagSet(cmd, argName)
	cf := addClientFlags(fs, true)
	var names []string
	if argName != "" {
		names = []string{argName}
	}
	pos, err := parseCommand(fs, args, names...)
	if err != nil {
		return err
	}
	arg := ""
	if argName != "" {
		arg = pos[0]
		what += " " + arg
	}
	return doRequest(ctx, c, cf, what, want,
		func(ctx context.Context, cl *protocol.ClientWithResponses) (R, error) { return send(ctx, cl, arg) },
		func(resp R) error { return show(resp, arg) })
}

// doRequest makes one request with cf's client, within requestTimeout, checks its
// status is one of want, and prints its body raw with --json, or as show says.
func doRequest[R response](ctx context.Context, c *cli, cf *clientFlags, what string, want []int,
	send func(context.Context, *protocol.ClientWithResponses) (R, error), show func(resp R) error) error {
	cl, err := c.client(cf, nil)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := send(ctx, cl)
	if err != nil {
		return requestError(what, err)
	}
	if err := expect(resp, want...); err != nil {
		return err
	}
	if cf.json {
		return printRaw(c.stdout, resp.GetBody())
	}
	return show(resp)
}

// jsonArg returns an optional positional argument that must be JSON, or a usage error
// of cmd naming what it is.
func jsonArg(cmd, what, arg string) (*protocol.AnyJSON, error) {
	if !json.Valid([]byte(arg)) {
		return nil, usagef("%s: the %s is not valid JSON: %s", cmd, what, arg)
	}
	return new(protocol.AnyJSON(arg)), nil
}
