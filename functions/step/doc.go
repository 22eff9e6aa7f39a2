// Package step makes a stepgate function durable, one named step at a time: the calls a
// function registered with [github.com/stepgate/stepgate/functions] makes to run steps,
// wait, and talk to other runs. The functions package's doc is the tutorial; this page
// says what each call does, and each wait has an example that runs in the harness of
// [github.com/stepgate/stepgate/functions/functionstest].
//
// # Steps
//
// [Run] runs a step once: it calls its function and journals the outcome with the
// gateway (a checkpoint) before returning it, so every finished step is durable before
// the function sees its result (unless it opted in to [Lazy] checkpoints); every later
// invocation of the run replays the outcome instead of calling the function again:
//
//	return step.Run(ctx, "mail", func(ctx context.Context) (string, error) {
//		return "reminded " + user, nil // the mail provider's call
//	})
//
// [Go] starts a step in its own goroutine, so that several run at once. [Now], [UUID]
// and [Random] journal a clock reading, a UUID or a random number once. [SetValue]
// publishes a value for clients to read while the run goes on (an entry too, taking a
// seq), and [Stream] writes ordered chunks that clients read live (not entries: they
// take no seq; see [StreamWriter] for what a replay does with them). [SendEvent] sends an
// event, [Send] a message to another run. [Compensate] registers the undo of a step, run
// when the run fails for good or at [Rollback].
//
// # Waits
//
// Everything a run waits for is a [Future] of one shape, and each wait ends the
// invocation: the run is suspended, holds nothing while it waits, and is invoked again
// when what it waits for comes, with that journaled.
//
//   - a timer: [After], [At]; [Sleep] and [SleepUntil] are After(...).Get() and
//     At(...).Get() (see the example of Sleep);
//   - an event: [WaitForEvent], which sees only the events stored since its invocation
//     began unless it looks back with [SinceStart] or [Since]: look back whenever the
//     event may be sent after the run starts and before it reaches the wait (a client
//     starts the run, then sends its event), or the run misses it when it comes first;
//   - a message sent to the run: [Receive], kept in the run's mailbox until taken;
//   - a request a client waits on: [ReceiveRequest], answered with [Reply] or
//     [ReplyError];
//   - a callback: [Callback] makes a URL the outside world resolves once (a person's
//     approval, a webhook), and its [OpenCallback.Result] waits for it;
//   - a child run: [Invoke]; any other run's end: [AwaitRun];
//   - a step started with [Go].
//
// [Future.Get] waits for one; [WaitFirst] says which of several comes first, and
// [WaitAll] waits for all of them (starting their child runs at once). A wait is lazy:
// making its future takes no seq and starts nothing; it begins when it is waited for.
// The waits for someone else take a [Timeout]; a wait that times out returns an error
// that is [ErrTimedOut]:
//
//	paid, err := step.WaitForEvent[Payment](ctx, "payment", "orders.paid",
//		step.Matching(step.Match{"data.order_id": orderID}), step.SinceStart(), step.Timeout(time.Hour)).Get()
//	if errors.Is(err, step.ErrTimedOut) {
//		return "unpaid", nil
//	}
//
// Every function takes the one [Option] type, and refuses an option it does not take.
//
// # Errors and retries
//
// A step's function that fails (returns an error, or panics) is retried in a later
// invocation, up to [MaxAttempts] attempts in all ([DefaultMaxAttempts] by default) with
// [Backoff] between them, unless its error is [NonRetryable]. The step's final failure
// is journaled and returned as an [*Error] (its Type [ErrorTypeFailed] or
// [ErrorTypeNonRetryable]); a child run's failure is an *Error too, as is a callback's
// rejection. The function may handle it (every replay takes the same branch, since it
// is journaled) or return it, which fails the run, as do a NonRetryable error and
// [ErrTimedOut]. Any other error the function returns, or a panic, fails the
// invocation, which the gateway retries per the function's invocation attempts.
//
// # Seqs and replay
//
// Each call to [Run], [Go], [Now], [UUID], [Random], [SetValue], [Sleep], [SleepUntil],
// [SendEvent], [Send], [Reply], [ReplyError] or [Callback] takes the next seq of the run
// (1, 2, ...), and so does the [Future.Get] of a wait not yet resolved (a step started with Go took its
// own); [WaitFirst] takes one, unless it is given waits the gateway keeps of which one
// is resolved already, or timers alone (then the earliest's Get takes it), and two when
// it is given both durations and times (it journals the time it waits from first); [WaitAll] and
// [All] take one per wait they resolve (each child run among them, started together,
// and each other wait, as its Get), [Patched] one unless
// the run's journal went past that point on older code, [DeprecatePatch] one only where
// the journal holds the patch's marker, and [Rollback] and [RunCompensations] one per
// compensation they run, each a [Run]. [After], [At], [WaitForEvent], [Receive],
// [ReceiveRequest], [Invoke], [AwaitRun], [Compensate], [Stream] and [Attempt] take none. When the
// gateway's journal already holds that seq, the step is replayed: Run returns the journaled output (or
// final error) without calling its function, a journaled sleep returns at once, and a
// journaled wait returns what came (an event, a message, a callback's resolution, a
// child run's outcome). Otherwise Run calls its function and journals the outcome with
// the gateway (a checkpoint) before returning, and a wait suspends the run until what it
// waits for comes.
//
// Code between steps runs again on every replay, so it must be deterministic: [Now],
// [UUID] and [Random] journal a clock reading, a UUID or a random number once, as steps,
// and replay it. [Patched] lets code change under runs that are suspended in it: it
// journals a marker (an entry of kind patch) the first time a run reaches the patch, and
// is false, taking no seq, for a run whose journal went past that point on older code;
// [DeprecatePatch] retires it.
//
// The rules that keep replays correct:
//
//   - Call steps one after another, with the context the function was called with (or
//     one derived from it), from the function's goroutine. Steps do not nest. To run
//     steps at the same time, start them with [Go] (still from the function's
//     goroutine, so each takes its seq in a fixed order).
//   - Give each step a stable name, and ask for the same steps in the same order on every
//     invocation: code between steps must be deterministic. Put side effects, clocks and
//     randomness inside steps.
//   - A step's output must round-trip through encoding/json: a replay returns the value
//     decoded from its JSON, not the value the function returned.
//
// # Testing
//
// Package functionstest runs the functions in the test's process, against an in-memory
// journal and a virtual clock: the test starts a run, moves the clock, and delivers
// events, messages, requests and callbacks, as the examples here do:
//
//	h := functionstest.New(t, app)
//	run := h.Start("trial.remind", "ada")
//	fmt.Println(run.Result().Status, run.Result().Await.Type)
//	res := run.Advance(14 * 24 * time.Hour)
//
// # Halting
//
// When the invocation must end early (a wait, a retry, nondeterminism, a conflict), these
// functions do not return: they unwind the function with a private panic that the SDK
// recovers; the function's deferred calls run on the way, as for any panic, and its
// context is cancelled. Code that recovers panics generically (a deferred recover() that swallows
// anything) cannot change the outcome: the answer is decided before the panic, later
// steps halt at once, and whatever the function returns afterwards is ignored. Such code
// should still re-panic values it does not know, so that it stops running too. Called
// from another goroutine, a halting step cannot unwind; it returns [ErrStopped] instead.
package step
