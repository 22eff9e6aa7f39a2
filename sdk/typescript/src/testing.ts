// @stepgate/sdk/testing: runs functions made with createFunction in this process, against
// an in-memory journal, with no gateway and a virtual clock. See harness; and replay,
// which replays a run exported from a gateway against the code, running no step body.
import { toMs, type Duration } from "./duration.js";
import { NonRetryableError, StepError } from "./errors.js";
import type { StepgateFunction } from "./function.js";
import type { Poster, PostResult } from "./invocation.js";
import type { ErrorInfo, InvocationAnswer, InvocationRequest, JournalEntry, StreamWrite, WireIdentity } from "./protocol.js";
import { serve, type FetchHandler } from "./serve.js";
import { TestRun, URL_PREFIX, type ChildOutcome, type Ev, type Outcome } from "./testing-run.js";

export { TestRun };
export type { ChildOutcome, Outcome };
export type { Poster, PostResult };
export { EXPORT_FORMAT, replay, replayExport, ReplayDivergenceError } from "./testing-replay.js";
export type { Divergence, Next, Replayed, ReplayOptions, RunExport, StepRef } from "./testing-replay.js";

/** An event a run sent (step.sendEvent). */
export interface SentEvent {
  runId: string;
  name: string;
  data: unknown;
}

/** A message a run sent to another run (step.send). */
export interface SentMessage {
  runId: string;
  to: string;
  topic: string;
  data: unknown;
}

/** A child run a run started (step.invoke, waitAll of invokes). */
export interface ChildCall {
  runId: string;
  seq: number;
  function: string;
  input: unknown;
  /** The child run, when it runs in the harness (no stub): deliver to it, drive it. */
  run?: TestRun;
}

/**
 * A stub of a child run's function: what it returns (or resolves with) is the child's
 * output; what it throws fails the child, with the type a function throwing it would
 * fail with (a StepError's type, non_retryable for a NonRetryableError, else error).
 */
export type Stub = (input: any) => unknown;

export interface HarnessOptions {
  /** The virtual clock's start (default: the real time now). */
  now?: Date | number;
  /** Who starts the runs (default subject "test" of tenant "test"). */
  identity?: WireIdentity;
  /** Invocations a run may make before it fails (type limit_exceeded): a bound on a function that never ends. Default 1000. */
  maxInvocations?: number;
}

export interface StartOptions {
  /** The function to run, by name; the harness's only function by default. */
  function?: string;
}


/**
 * A test harness for functions: start runs of them with start, then drive them with a
 * run's result or a delivery (sendEvent, sendMessage, resolveCallback, sendRequest), and
 * move the virtual clock with advance. A function runs in this process as the gateway
 * would call it: each invocation gets the journal so far, its steps are journaled in
 * memory (checkpoints answered at once, with the gateway's ordering rules), a step that
 * fails is retried (at once, not after its backoff) up to its retries and then fails for
 * good (the harness counts its attempts, as the gateway does, and journals its failure
 * past the retry's max_attempts), an invocation that fails (an error that is not non-retryable) is retried until
 * the function's invocationAttempts (default 3) have failed in a row (an answer in
 * between starts the count again), and then fails the run. It passes the conformance
 * scenarios for waits (protocol/conformance), as the gateway does.
 */
export function harness(fns: StepgateFunction<any, any> | StepgateFunction<any, any>[], opts: HarnessOptions = {}): Harness {
  return new Harness(Array.isArray(fns) ? fns : [fns], opts);
}

/**
 * Serves a function written against the protocol itself, with no createFunction (or
 * another SDK's, behind a Fetch handler): it gets each invocation as the gateway sends
 * it, a POST to /<function name> with the InvocationRequest as JSON, and answers the
 * InvocationAnswer. The request's checkpoint.url is the harness's, reached only through
 * post (with the Authorization header, as on the gateway).
 */
export type RawHandler = (request: Request, post: Poster) => Promise<Response>;

/**
 * A harness of the functions called names, served by handler (see RawHandler), each
 * with the gateway's default config (3 invocation attempts, no triggers): for testing a
 * function written without the SDK, as the conformance scenarios do.
 */
export function rawHarness(handler: RawHandler, names: string[], opts: HarnessOptions = {}): Harness {
  return new Harness([], opts, { handler, names });
}

export class Harness {
  /** Events the runs sent (step.sendEvent), in order. */
  readonly events: SentEvent[] = [];
  /** Messages the runs sent (step.send), in order. */
  readonly messages: SentMessage[] = [];
  /** Child runs the runs started (step.invoke, waitAll), in order. */
  readonly children: ChildCall[] = [];
  private clock: number;
  private readonly fns = new Map<string, Pick<StepgateFunction<any, any>, "name" | "config">>();
  private readonly stubs = new Map<string, Stub>();
  private readonly runs = new Map<string, TestRun>();
  private readonly handler: FetchHandler;
  private readonly identity: WireIdentity;
  private queue: Promise<unknown> = Promise.resolve();
  /** @internal See HarnessOptions.maxInvocations. */
  readonly maxInvocations: number;

  constructor(fns: StepgateFunction<any, any>[], opts: HarnessOptions, raw?: { handler: RawHandler; names: string[] }) {
    for (const f of fns) this.fns.set(f.name, f);
    for (const name of raw?.names ?? []) this.fns.set(name, { name, config: {} });
    this.clock = opts.now === undefined ? Date.now() : new Date(opts.now).getTime();
    this.identity = opts.identity ?? { subject: "test", tenant: "test", roles: [], claims: {} };
    this.maxInvocations = opts.maxInvocations ?? 1000;
    const post: Poster = (url, headers, body) => this.post(url, headers, body);
    this.handler = raw ? (request) => raw.handler(request, post) : serve({ functions: fns, insecureSkipVerify: true, post, onError: () => {} });
  }

  /** The virtual clock's time. */
  get now(): Date {
    return new Date(this.clock);
  }

  /** Answers child runs of the function name with stub's result, instead of running it (or failing the child when there is no such function). */
  stub(name: string, stub: Stub): this {
    this.stubs.set(name, stub);
    return this;
  }

  /** Starts a run of the function (the only one, or opts.function) with input; it runs when a method of the run or advance drives it. */
  start(input?: unknown, opts: StartOptions = {}): TestRun {
    let fn = opts.function;
    if (fn === undefined) {
      if (this.fns.size !== 1) throw new Error(`stepgate/testing: the harness has ${this.fns.size} functions: name the one to start (start(input, { function }))`);
      fn = [...this.fns.keys()][0]!;
    }
    if (!this.fns.has(fn)) throw new Error(`stepgate/testing: no function ${JSON.stringify(fn)} in the harness`);
    return this.newRun(fn, input);
  }

  private newRun(fn: string, input: unknown, parentId?: string): TestRun {
    const id = crypto.randomUUID();
    const run = new TestRun(this, id, fn, input ?? null, new Date(this.clock), parentId);
    this.runs.set(id, run);
    return run;
  }

  /**
   * Moves the virtual clock forward by d (a duration, which may start with days: "7d",
   * "1d12h"), waking what falls due on the way in the order
   * it falls due (sleeps, wait timeouts, callback expiries), and drives the runs.
   */
  advance(d: Duration): Promise<void> {
    const ms = advanceMs(d);
    return this.serial(async () => {
      const target = this.clock + ms;
      for (;;) {
        await this.pump();
        let next = Infinity;
        for (const r of this.runs.values()) {
          const due = r.dueAt();
          if (due !== undefined && due <= target) next = Math.min(next, due);
        }
        if (next === Infinity) break;
        this.clock = Math.max(this.clock, next);
      }
      this.clock = target;
      await this.pump();
    });
  }

  /** Runs f once the harness's earlier work is done. */
  serial<T>(f: () => Promise<T>): Promise<T> {
    const p = this.queue.then(f);
    this.queue = p.catch(() => {});
    return p;
  }

  /** Drives every run that can move until none can. */
  async pump(): Promise<void> {
    for (;;) {
      let moved = false;
      for (const r of [...this.runs.values()]) {
        if (await r.move()) moved = true;
      }
      if (!moved) return;
    }
  }

  /** @internal The harness's run of id, if any (an await_run looks it up). */
  runOf(id: string): TestRun | undefined {
    return this.runs.get(id);
  }

  /** @internal */
  clockMs(): number {
    return this.clock;
  }

  /** @internal The invocations in all a run of fn gets before it fails (invocationAttempts, default 3). */
  invocationAttempts(fn: string): number {
    return this.fns.get(fn)?.config.retries?.max_attempts ?? 3;
  }

  /** @internal Starts the child of call at seq: a stub's outcome at once, or a run of the harness's function. */
  async child(parent: TestRun, seq: number, fn: string, input: unknown): Promise<ChildOutcome> {
    const call: ChildCall = { runId: parent.id, seq, function: fn, input };
    this.children.push(call);
    const stub = this.stubs.get(fn);
    if (stub) {
      try {
        return { done: { output: JSON.parse(JSON.stringify((await stub(input)) ?? null)) } };
      } catch (e) {
        // The type a child run failing so would have: a StepError's, non_retryable, or error.
        const type = e instanceof StepError ? e.type : e instanceof NonRetryableError ? "non_retryable" : "error";
        return { done: { error: { type, message: e instanceof Error ? e.message : String(e) } } };
      }
    }
    if (this.fns.has(fn)) {
      call.run = this.newRun(fn, input, parent.id);
      return { run: call.run };
    }
    return { done: { error: { type: "not_found", message: `stepgate/testing: no function ${JSON.stringify(fn)} in the harness and no stub of it (h.stub)` } } };
  }

  /** @internal One invocation of run. */
  async invoke(req: InvocationRequest): Promise<{ status: number; body: InvocationAnswer & ErrorInfo }> {
    const resp = await this.handler(
      new Request(`http://stepgate.test/${req.run.function}`, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(req) }),
    );
    return { status: resp.status, body: (await resp.json()) as InvocationAnswer & ErrorInfo };
  }

  /** @internal The request's identity. */
  get starter(): WireIdentity {
    return this.identity;
  }

  /** The checkpoint endpoint, in memory. */
  private async post(url: string, headers: Record<string, string>, body: string): Promise<PostResult> {
    const [id, path] = url.slice(URL_PREFIX.length).split("/checkpoint");
    const run = this.runs.get(id ?? "");
    const answer = (status: number, b: unknown): PostResult => ({ status, body: JSON.stringify(b), retryAfter: null });
    if (!run || headers.Authorization !== `Bearer ${run.token}`) return answer(401, { detail: "this invocation's token is no longer valid" });
    if (path === "/current") return answer(200, { run_id: run.id });
    if (path === "/stream") return answer(200, run.write(JSON.parse(body) as StreamWrite));
    return run.checkpoint(JSON.parse(body) as JournalEntry);
  }

  /**
   * Sends the event name with data to every run of the harness (it meets a wait_event
   * that matches, as run.sendEvent does), and starts a run of each function it triggers
   * (onEvent) with data as input; drives the runs, and returns the runs it started.
   */
  sendEvent(name: string, data?: unknown): Promise<TestRun[]> {
    return this.serial(async () => {
      const started = this.publish(name, data ?? null);
      await this.pump();
      return started;
    });
  }

  /** Delivers the event to every run that has not finished, and starts the runs it triggers. */
  private publish(name: string, data: unknown, id: string = crypto.randomUUID()): TestRun[] {
    const ev: Ev = { id, name, data, identity: this.identity, created_at: new Date(this.clock).toISOString() };
    for (const r of this.runs.values()) if (!r.finished) r.receiveEvent(ev);
    const started: TestRun[] = [];
    for (const f of this.fns.values()) {
      if (f.config.triggers?.some((t) => t.event === name)) started.push(this.newRun(f.name, data));
    }
    return started;
  }

  /** @internal Records what e sends (an event, a message) and delivers a message to a run of the harness. */
  sent(run: TestRun, e: JournalEntry): ErrorInfo | undefined {
    const out = (e.output ?? {}) as { data?: unknown; run_id?: string; topic?: string; id?: string };
    if (e.kind === "event") {
      this.events.push({ runId: run.id, name: e.name, data: out.data ?? null });
      this.publish(e.name, out.data ?? null, out.id);
    }
    if (e.kind === "send") {
      const to = this.runs.get(out.run_id ?? "");
      this.messages.push({ runId: run.id, to: out.run_id ?? "", topic: e.name, data: out.data ?? null });
      if (to) {
        if (to.finished) return { type: "finished", message: `run ${to.id} has finished` };
        to.deliver({ id: out.id ?? crypto.randomUUID(), topic: e.name, data: out.data ?? null, identity: this.identity, source_run_id: run.id, sent_at: new Date(this.clock).toISOString() });
      }
    }
    return undefined;
  }
}

/** The milliseconds of d, a duration that may start with a count of days ("7d", "1d12h"). */
function advanceMs(d: Duration): number {
  const m = typeof d === "string" ? /^(\d+)d(.*)$/.exec(d) : null;
  if (!m) return toMs(d, "advance");
  return Number(m[1]) * 86_400_000 + (m[2] ? toMs(m[2] as Duration, "advance") : 0);
}
