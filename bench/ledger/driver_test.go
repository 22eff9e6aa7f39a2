package ledger_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stepgate/stepgate/bench/ledger"
	"github.com/stepgate/stepgate/functions"
	"github.com/stepgate/stepgate/functions/step"
)

// The driver is this test binary run again as a process of its own (driverEnv set): it
// serves the shapes' functions and plays their clients, so that the test's process,
// whose allocations the ledger counts, holds the gateway alone. It reads a shape's name
// per line on stdin and runs it once. It writes a line "settled" once the gateway has
// nothing left to do for it but River jobs waiting for River's scheduler (which moves
// due jobs every 5 seconds: a sleep's backstop), then, once those are done too, its
// HTTP requests as a JSON line.
const driverEnv = "STEPGATE_LEDGER_DRIVER"

// The driver's environment: the gateway, an admin token of the default tenant, and a
// superuser URL of the gateway's database (to see when the gateway is done).
const (
	envGateway  = "STEPGATE_LEDGER_GATEWAY"
	envToken    = "STEPGATE_LEDGER_TOKEN"
	envDatabase = "STEPGATE_LEDGER_DATABASE"
)

// shapes are the run shapes the ledger counts, in the file's order.
var shapes = []string{"noop", "noop.async", "steps3", "steps10", "steps3.request", "steps10.request", "sleep", "event", "child"}

// driverAnswer is the driver's line for one run of a shape.
type driverAnswer struct {
	Requests []ledger.Detail `json:"requests"`
	Error    string          `json:"error,omitempty"`
}

// requests counts HTTP requests by kind and normalized route.
type requests struct {
	mu sync.Mutex
	n  map[[2]string]int
}

var (
	uuidSegment = regexp.MustCompile(`/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	fnSegment   = regexp.MustCompile(`^/v1/functions/[^/]+`)
)

func (r *requests) add(kind string, req *http.Request) {
	path := uuidSegment.ReplaceAllString(req.URL.Path, "/{id}")
	path = fnSegment.ReplaceAllString(path, "/v1/functions/{name}")
	r.mu.Lock()
	defer r.mu.Unlock()
	r.n[[2]string{kind, req.Method + " " + path}]++
}

func (r *requests) take() []ledger.Detail {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []ledger.Detail
	for k, n := range r.n {
		out = append(out, ledger.Detail{Kind: k[0], Name: k[1], Count: n})
	}
	clear(r.n)
	return out
}

type countingTransport struct {
	kind string
	reqs *requests
	next http.RoundTripper
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.reqs.add(t.kind, r)
	return t.next.RoundTrip(r)
}

// input is every shape's input: a key that makes a run's event its own.
type input struct {
	Key string `json:"key"`
}

func runDriver() error {
	ctx := context.Background()
	gateway, token := os.Getenv(envGateway), os.Getenv(envToken)
	db, err := pgx.Connect(ctx, os.Getenv(envDatabase))
	if err != nil {
		return err
	}
	reqs := &requests{n: map[[2]string]int{}}
	transport := func(kind string) *http.Client {
		return &http.Client{Transport: countingTransport{kind: kind, reqs: reqs, next: http.DefaultTransport.(*http.Transport).Clone()}}
	}
	keys, err := functions.GatewayKeys(gateway, token, time.Hour, nil)
	if err != nil {
		return err
	}
	app := functions.New(functions.Config{Keys: keys, HTTPClient: transport("back"),
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	steps := func(n int) func(context.Context, input) (int, error) {
		return func(ctx context.Context, in input) (int, error) {
			sum := 0
			for i := range n {
				v, err := step.Run(ctx, fmt.Sprintf("step%d", i), func(context.Context) (int, error) { return i, nil })
				if err != nil {
					return 0, err
				}
				sum += v
			}
			return sum, nil
		}
	}
	const noop, gated, steps3, steps10, sleep, event, child = "ledger.noop", "ledger.gated", "ledger.steps3", "ledger.steps10",
		"ledger.sleep", "ledger.event", "ledger.child"
	functions.Register(app, noop, func(_ context.Context, in input) (input, error) { return in, nil })
	// A gated run ends only when the driver opens its gate: after the client attached.
	var gates sync.Map // key -> chan struct{}
	functions.Register(app, gated, func(ctx context.Context, in input) (input, error) {
		gate, _ := gates.LoadOrStore(in.Key, make(chan struct{}))
		select {
		case <-gate.(chan struct{}):
			return in, nil
		case <-ctx.Done():
			return in, ctx.Err()
		}
	})
	functions.Register(app, steps3, steps(3))
	functions.Register(app, steps10, steps(10))
	functions.Register(app, sleep, func(ctx context.Context, in input) (input, error) {
		return in, step.Sleep(ctx, "nap", 100*time.Millisecond)
	})
	functions.Register(app, event, func(ctx context.Context, in input) (string, error) {
		e, err := step.WaitForEvent[input](ctx, "approval", "ledger.approved", step.Matching(step.Match{"data.key": in.Key})).Get()
		return e.Data.Key, err
	})
	functions.Register(app, child, func(ctx context.Context, in input) (input, error) {
		return step.Invoke[input](ctx, "child", noop, in).Get()
	})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			reqs.add("out", r)
		}
		app.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	if err := syncApp(ctx, gateway, token, "http://"+ln.Addr().String()+"/"); err != nil {
		return err
	}
	// The same steps from an app that speaks request/response only: each checkpoint an
	// HTTP request back to the gateway, and the claim a write.
	reqApp := functions.New(functions.Config{Keys: keys, HTTPClient: transport("back"), RequestResponseOnly: true,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, nil))})
	const steps3r, steps10r = "ledger.steps3.request", "ledger.steps10.request"
	functions.Register(reqApp, steps3r, steps(3))
	functions.Register(reqApp, steps10r, steps(10))
	reqLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	reqSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			reqs.add("out", r)
		}
		reqApp.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	go reqSrv.Serve(reqLn)
	defer reqSrv.Close()
	if err := syncApp(ctx, gateway, token, "http://"+reqLn.Addr().String()+"/"); err != nil {
		return err
	}
	c := &apiClient{base: gateway, token: token, hc: transport("in")}

	run := map[string]func(ctx context.Context, key string) error{
		"noop": func(ctx context.Context, key string) error {
			return c.run(ctx, noop, key)
		},
		"noop.async": func(ctx context.Context, key string) error {
			// Started without waiting, then attached to while it runs: it ends once the
			// client waits for it.
			gate, _ := gates.LoadOrStore(key, make(chan struct{}))
			defer gates.Delete(key)
			id, err := c.start(ctx, gated, key, false)
			if err != nil {
				return err
			}
			return attach(ctx, db, id, func() error { close(gate.(chan struct{})); return nil }, func() error {
				_, err := c.result(ctx, id)
				return err
			})
		},
		"steps3": func(ctx context.Context, key string) error {
			return c.run(ctx, steps3, key)
		},
		"steps10": func(ctx context.Context, key string) error {
			return c.run(ctx, steps10, key)
		},
		"steps3.request": func(ctx context.Context, key string) error {
			return c.run(ctx, steps3r, key)
		},
		"steps10.request": func(ctx context.Context, key string) error {
			return c.run(ctx, steps10r, key)
		},
		"sleep": func(ctx context.Context, key string) error {
			return c.run(ctx, sleep, key)
		},
		"event": func(ctx context.Context, key string) error {
			id, err := c.start(ctx, event, key, false)
			if err != nil {
				return err
			}
			if err := await(ctx, db, `SELECT EXISTS (SELECT FROM stepgate.run_wait WHERE run_id = $1)`, id); err != nil {
				return fmt.Errorf("the run never waited: %w", err)
			}
			// The client waits for the run, then the event comes.
			return attach(ctx, db, id, func() error {
				_, err := c.do(ctx, http.MethodPost, "/v1/events", map[string]any{"name": "ledger.approved", "data": input{key}})
				return err
			}, func() error {
				got, err := c.result(ctx, id)
				if err == nil && string(got) != strconv.Quote(key) {
					err = fmt.Errorf("the run got the event of %s", got)
				}
				return err
			})
		},
		"child": func(ctx context.Context, key string) error {
			return c.run(ctx, child, key)
		},
	}

	out := json.NewEncoder(os.Stdout)
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for i := 0; sc.Scan(); i++ {
		shape := sc.Text()
		fn := run[shape]
		var answer driverAnswer
		if fn == nil {
			answer.Error = "no shape " + shape
		} else {
			rctx, cancel := context.WithTimeout(ctx, time.Minute)
			err := fn(rctx, fmt.Sprintf("%s-%d", shape, i))
			if err == nil {
				err = await(rctx, db, settled)
			}
			fmt.Println("settled")
			if err == nil {
				err = await(rctx, db, quiet)
			}
			cancel()
			if err != nil {
				answer.Error = err.Error()
			}
		}
		answer.Requests = reqs.take()
		if err := out.Encode(answer); err != nil {
			return err
		}
	}
	return sc.Err()
}

// attach runs wait (a client's long-poll of run id) and, once the gateway has it (the run
// is marked to be notified), then: so that every run of a shape is attached to while it
// runs, never after it ended, whatever the timing.
func attach(ctx context.Context, db *pgx.Conn, id string, then, wait func() error) error {
	done := make(chan error, 1)
	go func() { done <- wait() }()
	if err := await(ctx, db, `SELECT notify FROM stepgate.run WHERE id = $1`, id); err != nil {
		return fmt.Errorf("the client never attached: %w", err)
	}
	if err := then(); err != nil {
		return err
	}
	return <-done
}

// quiet is true when the gateway has nothing left to do: no run open and no River job
// due (a job scheduled for later, such as a wait's timeout, may stay); settled, when
// the due jobs left wait only for River's scheduler to make them available.
const (
	quiet = `SELECT NOT EXISTS (SELECT FROM stepgate.run WHERE status NOT IN ('completed', 'failed', 'cancelled'))
	AND NOT EXISTS (SELECT FROM public.river_job WHERE state IN ('available', 'running', 'retryable', 'pending')
		OR (state = 'scheduled' AND scheduled_at <= now()))`
	settled = `SELECT NOT EXISTS (SELECT FROM stepgate.run WHERE status NOT IN ('completed', 'failed', 'cancelled'))
	AND NOT EXISTS (SELECT FROM public.river_job WHERE state IN ('available', 'running', 'retryable', 'pending'))`
)

// await polls query until it answers true, within ctx.
func await(ctx context.Context, db *pgx.Conn, query string, args ...any) error {
	for {
		var ok bool
		if err := db.QueryRow(ctx, query, args...).Scan(&ok); err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// syncApp registers the app at url, outside the counted requests.
func syncApp(ctx context.Context, gateway, token, url string) error {
	body, _ := json.Marshal(map[string]string{"url": url})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, gateway+"/v1/apps", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return errors.New("sync: " + resp.Status + ": " + string(b))
	}
	return nil
}

// apiClient starts runs and waits for them as the Go client does (an Idempotency-Key
// with each start, long-polls), over plain HTTP.
type apiClient struct {
	base, token string
	hc          *http.Client
}

// runResult is the gateway's RunResult.
type runResult struct {
	ID     string          `json:"id"`
	Status string          `json:"status"`
	Output json.RawMessage `json:"output"`
	Error  json.RawMessage `json:"error"`
}

func (r runResult) final() bool {
	return r.Status == "completed" || r.Status == "failed" || r.Status == "cancelled"
}

// do sends a request with body as JSON and returns the answer's body, an error unless
// it is 2xx.
func (c *apiClient) do(ctx context.Context, method, path string, body any) ([]byte, error) {
	var in io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		in = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, in)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if method == http.MethodPost && strings.Contains(path, "/runs") {
		req.Header.Set("Idempotency-Key", rand.Text())
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode/100 != 2 {
		err = fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, out)
	}
	return out, err
}

// start starts a run of fn with input {key}, waiting for it when wait is set, and returns
// its id.
func (c *apiClient) start(ctx context.Context, fn, key string, wait bool) (string, error) {
	path := "/v1/functions/" + fn + "/runs"
	if wait {
		path += "?wait=30s"
	}
	b, err := c.do(ctx, http.MethodPost, path, input{key})
	if err != nil {
		return "", err
	}
	var r runResult
	if err := json.Unmarshal(b, &r); err != nil {
		return "", err
	}
	if wait && r.Status != "completed" {
		return r.ID, fmt.Errorf("run %s is %s: %s", r.ID, r.Status, r.Error)
	}
	return r.ID, nil
}

// run starts a run of fn with input {key} and waits for it to complete.
func (c *apiClient) run(ctx context.Context, fn, key string) error {
	_, err := c.start(ctx, fn, key, true)
	return err
}

// result long-polls run id's result until it is final, and returns its output.
func (c *apiClient) result(ctx context.Context, id string) (json.RawMessage, error) {
	for {
		b, err := c.do(ctx, http.MethodGet, "/v1/runs/"+id+"/result?wait=30s", nil)
		if err != nil {
			return nil, err
		}
		var r runResult
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, err
		}
		if r.final() {
			if r.Status != "completed" {
				return nil, fmt.Errorf("run %s is %s: %s", id, r.Status, r.Error)
			}
			return r.Output, nil
		}
	}
}
