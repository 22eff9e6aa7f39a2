// Package functions is the Go SDK for writing stepgate functions: ordinary HTTP
// endpoints that the gateway calls with a run's journal, so that finished steps are
// replayed instead of run again. This page is the tutorial: a function, its steps, its
// waits, its errors and retries, and its tests. Package
// [github.com/stepgate/stepgate/functions/step] documents each call a function makes,
// with a runnable example of each wait, and package
// [github.com/stepgate/stepgate/functions/functionstest] the test harness.
//
// # A function
//
// A function is a Go function of a context and an input that returns an output and an
// error; the input and the output travel as JSON. [Register] adds it, under a name, to
// an [App], an [http.Handler] that serves many functions:
//
//	app := functions.New(functions.Config{PublicKeys: keys})
//	functions.Register(app, "orders.checkout", checkout, functions.InvocationTimeout(30*time.Second))
//	log.Fatal(http.ListenAndServe("127.0.0.1:9090", app))
//
// (keys are your tenant's public keys, as `stepgate keys` prints them; see Serving.)
// `stepgate apps sync http://127.0.0.1:9090/` registers the app's functions with the
// gateway, which reads their names and options ([Option]) from the app's manifest. A
// run starts with POST /v1/functions/orders.checkout/runs, from a [client.Client] (with
// the [client.Ref] that Register returns, typed by the function's input and output), on
// an event ([OnEvent]), on a schedule, or from another run. The gateway then invokes the
// function, and invokes it again, with the run's journal, after every wait and failure,
// until the run ends: the function's output completes the run, and an error may fail it
// (see Errors and retries below).
//
// # Steps
//
// Durable work happens in steps. [step.Run] runs a step once: it calls its function and
// journals the output with the gateway (a checkpoint) before returning it, and every
// later invocation of the run replays the output from the journal instead of calling the
// function again:
//
//	func checkout(ctx context.Context, o Order) (Receipt, error) {
//		chargeID, err := step.Run(ctx, "charge", func(ctx context.Context) (string, error) {
//			return "ch_" + o.ID, nil // call the payment provider here
//		}, step.MaxAttempts(5), step.Backoff(time.Second, time.Minute))
//		if err != nil {
//			return Receipt{}, err // the charge failed for good: the run fails
//		}
//		if err := step.Sleep(ctx, "cool-off", 10*time.Minute); err != nil {
//			return Receipt{}, err
//		}
//		tracking, err := step.Run(ctx, "ship", func(ctx context.Context) (string, error) {
//			return "trk_" + o.ID, nil
//		})
//		return Receipt{ChargeID: chargeID, Tracking: tracking}, err
//	}
//
// So the code around the steps runs again on every invocation and must take the same
// steps in the same order: put side effects, clocks and randomness inside steps (or use
// [step.Now], [step.UUID], [step.Random]), and give each step a stable name. A step's
// output must round-trip through encoding/json. [step.Go] runs steps at the same time,
// [step.SetValue] and [step.Stream] publish what a run has so far, [step.Patched] changes
// code under runs in flight, and [step.Compensate] undoes steps when a later one fails.
//
// # Waits
//
// A run can wait without holding a process: the invocation ends, the run is suspended,
// and the gateway invokes it again when the wait is over, with what came journaled.
// Each wait is a [step.Future], lazy until its Get:
//
//   - time: [step.Sleep], [step.SleepUntil] ([step.After] and [step.At] as futures);
//   - an event sent to the tenant: [step.WaitForEvent] (with [step.SinceStart] when
//     the event may be sent after the run starts but before it reaches the wait: a
//     wait without a look-back sees only the events stored since its invocation began);
//   - a message sent to the run: [step.Receive], kept in the run's mailbox until taken;
//   - a request that a client waits on, answered with [step.Reply]: [step.ReceiveRequest];
//   - a callback URL that a person or a webhook resolves: [step.Callback], then its
//     [step.OpenCallback.Result];
//   - a child run: [step.Invoke]; the end of any run of the tenant: [step.AwaitRun];
//   - the first of several: [step.WaitFirst]; all of them: [step.WaitAll].
//
// The waits for someone else take a [step.Timeout]; a wait that times out returns an
// error that is [step.ErrTimedOut] (a value the function may branch on, or return to
// fail the run).
//
// # Errors and retries
//
// A step's function that returns an error (or panics) is retried, in a later
// invocation, up to [step.MaxAttempts] attempts in all ([step.DefaultMaxAttempts], 3,
// by default) with the [step.Backoff] between them; an error wrapped in
// [step.NonRetryable] stops the retries at once. The step's final failure is journaled
// and returned as a [*step.Error], which the function may handle (and every replay
// takes the same branch) or return.
//
// The function's own outcome is the invocation's answer: its output completes the run;
// a [step.NonRetryable] error, a [*step.Error] or a [step.ErrTimedOut] it returns fails
// the run at once; any other error, or a panic, answers HTTP 500, and the gateway
// retries the invocation, up to [InvocationAttempts] invocations (3 by default) with
// [InvocationBackoff] between them, replaying the journal each time; after the last the
// run fails. An invocation that runs past its [InvocationTimeout] is retried the same
// way.
//
// # Testing
//
// Package functionstest runs an App's functions in the test's process, against an
// in-memory journal and a virtual clock, with no gateway and no database: a week's
// sleep takes no time, and the test delivers events, messages, requests and callbacks:
//
//	func TestCheckout(t *testing.T) {
//		app := functions.New(functions.Config{InsecureSkipVerify: true})
//		functions.Register(app, "orders.checkout", checkout)
//		h := functionstest.New(t, app)
//
//		run := h.Start("orders.checkout", Order{ID: "42", Amount: 1000})
//		if res := run.Result(); res.Status != functionstest.Suspended {
//			t.Fatalf("want the run asleep in its cool-off, got %+v", res)
//		}
//		res := run.Advance(10 * time.Minute) // the virtual clock: no real wait
//		var got Receipt
//		if err := res.Decode(&got); err != nil || got.Tracking != "trk_42" {
//			t.Fatalf("got %+v, %v", got, err)
//		}
//	}
//
// The harness's StartCrashing loses an invocation right after a given step is
// journaled, to test that the retry replays the step instead of running it again;
// functionstest.Replay replays a run exported from production (`stepgate runs export`)
// against new code and reports where it diverges.
//
// # Serving
//
// An App answers two requests:
//
//	POST /<name>   runs one invocation (function protocol 1) and answers it
//	GET  /         answers the app's manifest, for `stepgate apps sync <app url>`
//
// Both verify the gateway's Stepgate-Signature with the keys of [Config] (Ed25519 public
// keys of your tenant, or its HMAC secrets), and an invocation accepted before is refused
// as a replay. An app with no keys refuses every request, unless
// [Config].InsecureSkipVerify says otherwise.
//
// The app speaks the function protocol's version [protocol.Version]: its manifest says
// it (protocol_version, with sdk "stepgate-go/<stepgate's version>"), and so does every
// answer, in the header Stepgate-Protocol. It refuses an invocation whose
// Stepgate-Protocol header names a gateway of another major version, or is not a
// version (see [protocol.CheckGatewayVersion]); a request without the header is served.
//
// A replay-only invocation (the request's replay_only, which the gateway sends to check
// a new revision against live runs; the manifest says the app answers it) runs no step
// function and journals nothing: no checkpoint, no claim of the run, no event, message,
// value, callback or stream write, no sleep waited out. The function's code replays the
// journal and the invocation answers status replayed with what the code asks for
// first past the journal (an entry's seq, kind and name, before anything of it runs,
// or kind end named completed or failed where the function would end the run), or
// where it asks for another entry than the journal holds (a divergence, which
// otherwise fails the run with nondeterminism). A retryable error, a panic or a
// journaled output the code cannot read answers HTTP 500, as in any invocation.
package functions
