// Package functionstest runs the functions of a [functions.App] in the test's process,
// against an in-memory journal and a virtual clock, with no gateway and no database, in
// the spirit of net/http/httptest:
//
//	h := functionstest.New(t, app)
//	run := h.Start("orders.checkout", input)
//	res := run.Advance(7 * 24 * time.Hour) // a week's sleep, in milliseconds
//
// The harness plays the gateway's part of the function protocol (openapi.yaml): it
// invokes the function over HTTP on a loopback server with the run's journal, answers
// its checkpoints in memory, and applies each answer as the gateway does, so steps are
// journaled and replayed by the SDK itself, not by a model of it. [NewHandler] does the
// same for functions served by any http.Handler (a function written with no SDK).
//
// What matches the gateway (the conformance scenarios of protocol/conformance, which
// pass against a real gateway, pass here too: conformance_test.go):
//   - a step's entry is journaled at its seq when checkpointed (or with the answer, for
//     a lazy step), in seq order or within the checkpoint's window for steps run in
//     parallel (step.Go), which may leave holes; an identical repeat is harmless, and
//     another entry at a journaled seq is refused as a conflict (a checkpoint's fails
//     the run with nondeterminism, an answer's fails the test);
//   - a failed step with attempts left is retried with its next attempt (step_attempts,
//     counted by the harness, not taken from the answer; past the retry's max_attempts
//     the step's failure is journaled), its final error or a non-retryable error fails
//     the run, after its compensations;
//   - an invocation that answers HTTP 500 (an error, a panic) is retried up to the
//     function's InvocationAttempts (3 by default), and the run fails after the last;
//   - sleeps ([step.Sleep], [step.After], [step.At]) and wait timeouts suspend the run
//     until the virtual clock ([Harness.Advance]) reaches their wake time; a wait_event
//     or receive times out after 24h by default, a callback when it expires (its
//     step.Timeout from when it is made, or [DefaultCallbackTimeout]);
//   - events, messages, requests and callbacks delivered by the test end the wait they
//     satisfy with the entry the gateway journals; a message or a callback resolution
//     that comes before its wait is kept for it, an event is not (unless a later wait
//     looks back with since or since_start); a WaitFirst takes the first alternative
//     satisfied, the lowest index among those satisfied at once;
//   - a child run (step.Invoke, WaitAll of invokes) is answered by a stub
//     ([Harness.Stub]) or by the app's function of that name, run as a child run to its
//     end (it may suspend too); its outcome is journaled at its seq;
//   - [Run.CrashAfter] loses an invocation right after an entry is journaled, and the
//     next invocation replays the journal, counted as a failed invocation.
//
// What does not:
//   - no concurrency limits, throttles, rate limits, debounce, priorities, flow control,
//     run timeouts or retention: every run starts and runs at once;
//   - a retried step or invocation is invoked again at once, without its backoff, and
//     the virtual clock does not move;
//   - the SDK's own clock is the machine's: step.Now, SleepInProcess and the sleeps it
//     waits out in the process use real time (use no SleepInProcess under test);
//   - events sent by runs (step.SendEvent, recorded by [Run.SentEvents]) resume the
//     harness's runs waiting for them, but start no function (no event triggers);
//     messages (step.Send, [Run.SentMessages]) reach runs of the same harness only;
//   - identities, permissions and signatures are those of one tenant ("acme") and one
//     admin user: the harness signs invocations only with [WithKey];
//   - streams and cancellation are not modelled.
//
// [Replay] replays a production run exported by the gateway (GET /v1/runs/{id}/export,
// `stepgate runs export`) against the code under test, with no side effects, and fails
// the test at the first divergence:
//
//	r := functionstest.Replay(t, app, "checkout.pay", "testdata/run.json")
//	t.Log(r) // replays cleanly; would wait for sleep "cool off" at seq 3
//
// [ReplayFile] (an export's file) and [ReplayExport] (a decoded export) fail nothing:
// they return the [Replayed], whose Divergence is nil when the run replays cleanly, so a
// test can assert a divergence (a change that breaks the runs in flight) instead of
// failing on it; their error is never a divergence:
//
//	r, err := functionstest.ReplayFile(app, "checkout.pay", "testdata/run.json")
//	if err != nil {
//		t.Fatal(err) // the export cannot be read or the function invoked
//	}
//	if d := r.Divergence; d == nil || d.Seq != 2 {
//		t.Errorf("want a divergence at seq 2, got: %s", r)
//	}
//
// A Harness is used from the test's goroutine: Start, Advance and the deliveries drive
// the runs synchronously and return once every run they woke has ended or suspended.
package functionstest
