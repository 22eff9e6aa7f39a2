// The steps of a durable function, as the Go SDK's package step has them.
import { type Duration, toGo, toMs } from "./duration.js";
import type { Jsonify } from "./json.js";
import { ErrorType, messageOf, NonRetryableError, StepError } from "./errors.js";
import { runInStep } from "./context.js";
import { failed, type Invocation, never, q, retry, suspended } from "./invocation.js";
import { StreamWriter } from "./stream.js";
import type { Await, EntryKind, ErrorInfo, InvokeCall, JournalEntry } from "./protocol.js";

/** How many attempts a step makes, the first included, unless its options say otherwise. */
export const DEFAULT_MAX_ATTEMPTS = 3;

/** The most child runs one invokeAll starts. */
export const MAX_INVOKE_ALL = 64;

/** Who started a run, as the gateway verified it from their token (never the token itself). */
export interface Identity<Claims extends Record<string, unknown> = Record<string, unknown>> {
  subject: string;
  tenant: string;
  roles: string[];
  /** The claims the gateway's operator chose to keep. */
  claims: Partial<Claims>;
}

/** What a step's function gets. */
export interface StepContext {
  /** The attempt this is of the step, from 1. */
  attempt: number;
  /** Aborted when the invocation stops early: pass it on to fetch and the like. */
  signal: AbortSignal;
  /** A writer of the run's stream key whose chunks are placed in this step (see StreamWriter). */
  stream(key: string): StreamWriter;
}

/** Begins the name of the step that runs a compensation: the step of "release" is "compensate release". */
export const COMPENSATION_PREFIX = "compensate ";

/** Names the compensations that failed for good (Go's step.IncompleteCompensation). */
export class IncompleteCompensation extends Error {
  constructor(readonly failed: string[]) {
    super(`compensation incomplete: ${failed.join(", ")} failed`);
    this.name = "IncompleteCompensation";
  }
}

/** A step's retry policy, and when its result is journaled. */
export interface RunOptions {
  /** Retries after the first attempt (so retries + 1 attempts in all). Default 2. */
  retries?: number;
  /** The wait before each retry: random up to min(max, initial * 2^(n-1)), chosen by the gateway. */
  backoff?: { initial?: Duration; max?: Duration };
  /**
   * Journal the step's result lazily (Go's step.Lazy()): true holds it until the
   * function's next step starts or it answers, false journals it before run resolves.
   * Default: the function's lazyCheckpoints (false unless set). With lazy checkpoints a
   * step's result is journaled only when the function's next step starts or it answers,
   * so if the process dies in between, the step runs again even though code after it
   * already saw its result.
   */
  lazy?: boolean;
}

/** An event that resumed a waitForEvent. */
export interface Event<T = unknown> {
  id: string;
  name: string;
  data: T;
  /** Who sent it: the caller's token, or the run that sent it. */
  sender: Identity;
  /** When the gateway stored it (database clock). */
  sentAt: Date;
}

/** A message taken by receive. */
export interface Message<T = unknown> {
  id: string;
  topic: string;
  data: T;
  sender: Identity;
  /** The run that sent it with step.send, if one did. */
  senderRun?: string;
  sentAt: Date;
}

/** A callback made by step.callback: hand its url to whoever must resolve it. */
export interface CallbackHandle {
  seq: number;
  name: string;
  url: string;
  token: string;
  expiresAt: Date;
}

/** A callback's resolution. */
export interface CallbackResult<T = unknown> {
  data: T;
  /** "token" (whoever held the URL) or "identity" (a caller with runs:manage). */
  resolver: string;
  resolvedBy?: Identity;
  resolvedAt?: Date;
}

/** One child run of invokeAll. */
export interface Call {
  function: string;
  input?: unknown;
  /**
   * Cancelling this run does not cancel this child, and the child does not inherit this
   * run's deadline.
   */
  detached?: boolean;
}

/** One alternative of waitAny: an event (as waitForEvent), a callback, or a message of a topic. */
export type Alternative =
  | { event: string; match?: Record<string, string | number | boolean | null> }
  | { callback: CallbackHandle }
  | { topic: string };

/** What came first in waitAny: its index, and the event, the callback's resolution or the message. */
export interface Chosen<T = unknown> {
  index: number;
  event?: Event<T>;
  callback?: CallbackResult<T>;
  message?: Message<T>;
}

/** The outcome of one child of invokeAll: its output, or its StepError. */
export type Outcome<T> = { ok: true; output: T } | { ok: false; error: StepError };

const FUNCTION_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$/;
const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

function checkName(what: string, name: string) {
  const bytes = new TextEncoder().encode(name).length;
  if (typeof name !== "string" || bytes === 0 || bytes > 255) {
    throw new NonRetryableError(`step: ${what} ${q(String(name).slice(0, 64))} must be 1 to 255 bytes`);
  }
  if (name.includes("\0")) throw new NonRetryableError(`step: ${what} ${q(name.slice(0, 64))} must be UTF-8 text without NUL bytes`);
}

/** d as the gateway's duration string; one that is not a duration fails the run (a NonRetryableError), as an invalid name does. */
function goDuration(d: Duration, what: string): string {
  try {
    return toGo(d, what);
  } catch (e) {
    throw new NonRetryableError(messageOf(e).replace(/^stepgate: /, "step: "));
  }
}

function checkFunction(what: string, name: string) {
  if (!FUNCTION_NAME.test(name)) {
    throw new NonRetryableError(
      `${what} ${q(String(name).slice(0, 64))} is invalid: use 1 to 255 letters, digits, '.', '_' or '-', starting with a letter or digit`,
    );
  }
}

/** The JSON value of v, as a replay returns it; throws when v does not encode. */
function jsonValue(v: unknown): unknown {
  const s = JSON.stringify(v);
  return s === undefined ? null : JSON.parse(s);
}

function identityOf(w: unknown): Identity {
  const i = (w ?? {}) as Partial<Identity>;
  return { subject: i.subject ?? "", tenant: i.tenant ?? "", roles: i.roles ?? [], claims: i.claims ?? {} };
}

const stepError = (e: JournalEntry, info: ErrorInfo) => new StepError(e.seq, e.name, info.type, info.message);

function eventFrom<T>(output: unknown): Event<T> | null {
  const got = (output ?? {}) as { timed_out?: boolean; event?: { id: string; name: string; data: T; identity: unknown; created_at: string } };
  if (got.timed_out || !got.event) return null;
  const ev = got.event;
  return { id: ev.id, name: ev.name, data: ev.data, sender: identityOf(ev.identity), sentAt: new Date(ev.created_at) };
}

function messageFrom<T>(output: unknown): Message<T> | null {
  const got = (output ?? {}) as {
    timed_out?: boolean;
    message?: { id: string; topic: string; data: T; identity: unknown; source_run_id?: string; sent_at: string };
  };
  if (got.timed_out || !got.message) return null;
  const m = got.message;
  const out: Message<T> = { id: m.id, topic: m.topic, data: m.data, sender: identityOf(m.identity), sentAt: new Date(m.sent_at) };
  if (m.source_run_id) out.senderRun = m.source_run_id;
  return out;
}

/** A callback's outcome journaled at e: its resolution, null when it timed out; a rejection throws. */
function callbackFrom<T>(e: JournalEntry, output: unknown): CallbackResult<T> | null {
  const got = (output ?? {}) as {
    timed_out?: boolean; data?: T; error?: ErrorInfo; resolver?: string; resolved_by?: unknown; resolved_at?: string;
  };
  if (got.timed_out) return null;
  if (got.error) throw stepError(e, got.error);
  const out: CallbackResult<T> = { data: got.data as T, resolver: got.resolver ?? "" };
  if (got.resolved_by) out.resolvedBy = identityOf(got.resolved_by);
  if (got.resolved_at) out.resolvedAt = new Date(got.resolved_at);
  return out;
}

/**
 * The steps of one invocation, handed to a function as `step`. Each call takes the next
 * seq of the run (1, 2, ...): when the journal already holds that seq the step is
 * replayed (run returns the journaled output without calling its function; a journaled
 * sleep returns at once), otherwise it runs and is journaled (checkpointed): every step
 * call resolves only once the gateway has acknowledged its entry (a checkpoint answered
 * 200), so code after a step never sees a result that a lost invocation could make the
 * step produce again. A function with lazyCheckpoints, or a run with the lazy option,
 * trades that for fewer checkpoints (see RunOptions.lazy).
 *
 * The rules that keep replays correct:
 *  - Give each step a stable name and ask for the same steps in the same order on every
 *    invocation: code between steps must be deterministic. Put side effects, clocks and
 *    randomness inside steps (or use step.now, step.uuid, step.random).
 *  - Steps do not nest: call steps from the function, never from a step's function (a
 *    step started there throws a NonRetryableError where the platform has
 *    AsyncLocalStorage; elsewhere it is not detected).
 *  - To run steps at the same time, start them together: `Promise.all([step.run(...),
 *    step.run(...)])` takes their seqs in call order, so a replay finds each at its seq
 *    whatever order they finished in; each is checkpointed as soon as it finishes.
 *  - A step's output must be JSON: run returns the JSON value of what its function
 *    returned (a Date becomes its string), on the first run as on a replay, and is typed
 *    so (Jsonify).
 *  - A step object belongs to one invocation: once the function's call has answered,
 *    every step call throws a NonRetryableError and runs nothing.
 *
 * When the invocation must end (a sleep, a wait, an invoke, a step's retry,
 * nondeterminism), the step's promise never settles: the function stops there, and its
 * catch and finally blocks do not run. The gateway calls the function again when the run
 * resumes.
 */
export class Step {
  constructor(private readonly st: Invocation) {}

  /**
   * Runs the step called name: returns the journaled outcome if the step already
   * finished, and otherwise calls fn and journals its outcome.
   *
   * When fn succeeds, its output is journaled (a checkpoint the gateway answered 200),
   * and then returned: fn is never called again once run has resolved. It returns the
   * JSON form of fn's output (Jsonify<T>: a Date becomes its string), on the first run as
   * on a replay.
   *
   * With lazy checkpoints (opts.lazy, or the function's lazyCheckpoints) the output is
   * returned at once, and journaled before the function's next step (or sleep, patch,
   * stream write: anything that takes a seq or writes) starts, or with its answer when
   * none does: a function's last step, and a step before a sleep or a wait, then cost no
   * checkpoint of their own. With lazy checkpoints a step's result is journaled only when
   * the function's next step starts or it answers, so if the process dies in between, the
   * step runs again even though code after it already saw its result. An output over 64
   * KiB of JSON, or a step run in parallel with others, is checkpointed at once even
   * then.
   *
   * When fn throws and the step has attempts left, the run suspends and the gateway
   * retries the step later, in a new invocation. When the last attempt fails, or fn throws
   * a NonRetryableError, the failure is journaled and thrown as a StepError, which the
   * function may catch and go on. fn is never called again once its step is journaled.
   */
  async run<T>(name: string, fn: (ctx: StepContext) => T | Promise<T>, opts: RunOptions = {}): Promise<Jsonify<T>> {
    checkName("step name", name);
    const retries = opts.retries ?? DEFAULT_MAX_ATTEMPTS - 1;
    if (!Number.isInteger(retries) || retries < 0) throw new NonRetryableError(`step ${q(name)}: retries ${retries} must be an integer, 0 or more`);
    const retryPolicy: Await["retry"] = { max_attempts: retries + 1 };
    if (opts.backoff?.initial !== undefined) retryPolicy.initial_interval = goDuration(opts.backoff.initial, `step ${q(name)}: backoff.initial`);
    if (opts.backoff?.max !== undefined) retryPolicy.max_interval = goDuration(opts.backoff.max, `step ${q(name)}: backoff.max`);

    const st = this.st;
    const n = st.next("step", name);
    if (!n) return never();
    const seq = n.seq;
    const e = n.entries[0];
    if (e) {
      if (e.error) throw stepError(e, e.error);
      return (e.output ?? null) as Jsonify<T>;
    }
    // A step that took its seq while the invocation ran, but got here after it answered
    // (a promise the function left unawaited), stops as one whose invocation stopped.
    if (!(await st.room(seq)) || st.hasEnded) return never();
    const gone = st.goneSeen();
    if (gone) return st.halt(retry("canceled", `step ${seq} ${q(name)}: ${gone}`));
    // A captured request sent again to a process that never saw it passes the signature
    // check: the gateway says whether this invocation still owns the run before any step
    // function runs.
    if (!(await st.checkOwner())) return never();

    st.begin(seq);
    let journaled = false;
    let retryAwait: Await | undefined;
    try {
      const attempt = st.attempt(seq);
      const started = new Date().toISOString();
      let out: unknown;
      let err: unknown;
      let ok = false;
      try {
        const ctx: StepContext = {
          attempt, signal: st.controller.signal,
          stream: (key) => new StreamWriter(st, key, { seq, attempt }),
        };
        out = await runInStep({ st, seq, attempt }, () => fn(ctx));
        ok = true;
      } catch (x) {
        err = x;
      }
      const entry: JournalEntry = { seq, kind: "step", name, attempt, started_at: started, finished_at: new Date().toISOString() };
      if (ok) {
        let raw: string;
        try {
          raw = JSON.stringify(out) ?? "null";
          entry.output = JSON.parse(raw);
        } catch (x) {
          return st.halt(failed("output", `step ${seq} ${q(name)}: encode output: ${messageOf(x)}`));
        }
        // Journaled now (eager, the default), or, lazy, held and journaled before
        // whatever the function does next (or with its answer): no hole either way.
        if (!(await st.defer(entry, raw, opts.lazy ?? st.lazy))) return never();
        journaled = true;
        return entry.output as Jsonify<T>;
      }
      if (st.stoppedWith) {
        // It failed because the invocation stopped (its signal aborted): not the
        // step's outcome. A later invocation runs it again.
        return never();
      }
      const nonRetryable = err instanceof NonRetryableError || err instanceof StepError;
      const type = nonRetryable ? ErrorType.nonRetryable : ErrorType.failed;
      const message = messageOf(err);
      if (!nonRetryable && attempt < retries + 1) {
        retryAwait = {
          type: "retry", seq, name, attempt,
          error: { type, message, retryable: true },
          retry: retryPolicy,
        };
        return st.halt(suspended(retryAwait));
      }
      entry.error = { type, message, retryable: false };
      if (!(await st.checkpoint(entry))) return never();
      journaled = true;
      throw new StepError(seq, name, type, message);
    } finally {
      st.done(seq, journaled, retryAwait);
    }
  }

  /**
   * Suspends the run for d (milliseconds or a duration string such as "10m") from when
   * the gateway receives the answer, on the database clock. On replay, the journaled sleep
   * returns at once.
   *
   * A short sleep may be waited out in the function's process instead, in one
   * invocation: when d is at most the function's sleepInProcess (off by default) and the
   * invocation has time to spare, the sleep is checkpointed (durable, with its wake time)
   * and resolves when that time comes. If the process dies meanwhile, the gateway calls
   * the function again at that time, as for a suspended sleep.
   */
  async sleep(name: string, d: Duration): Promise<void> {
    const duration = goDuration(d, `sleep ${q(name)}: duration`);
    return this.sleepFor(name, toMs(d, `sleep ${q(name)}: duration`), { duration });
  }

  /** Suspends the run until t, like sleep (waited out in the process when t is near). */
  async sleepUntil(name: string, t: Date | string): Promise<void> {
    const until = new Date(t);
    if (Number.isNaN(until.getTime())) throw new NonRetryableError(`step: sleep ${q(name)}: ${q(String(t))} is not a time`);
    return this.sleepFor(name, until.getTime() - Date.now(), { until: until.toISOString() });
  }

  private async sleepFor(name: string, ms: number, aw: { duration?: string; until?: string }): Promise<void> {
    checkName("step name", name);
    const st = this.st;
    const n = st.next("sleep", name, 1, true);
    if (!n) return never();
    const seq = n.seq;
    const e = n.entries[0];
    if (e) {
      // Journaled: the sleep is over, unless it was being waited out in a process that
      // stopped before its end (the gateway calls again at its end: this waits for what
      // is left of it, by this machine's clock).
      const left = e.until ? new Date(e.until).getTime() - Date.now() : 0;
      if (left > 0 && st.sleepInProcess(left)) return st.waitOut(left);
      return;
    }
    if (!st.sleepInProcess(Math.max(ms, 0))) return st.halt(suspended({ type: "sleep", seq, name, ...aw }));
    if (!(await st.room(seq))) return never();
    const gone = st.goneSeen();
    if (gone) return st.halt(retry("canceled", `sleep ${seq} ${q(name)}: ${gone}`));
    const entry: JournalEntry = { seq, kind: "sleep", name };
    if (aw.until) entry.until = aw.until;
    else entry.output = { duration: aw.duration };
    st.begin(seq);
    let ack;
    try {
      ack = await st.checkpoint(entry);
    } finally {
      st.done(seq, ack !== undefined);
    }
    if (!ack) return never();
    if (!ack.until) {
      return st.halt(failed("protocol", `sleep ${seq} ${q(name)}: the gateway answered its checkpoint without a wake time`));
    }
    return st.waitOut(new Date(ack.until).getTime() - Date.now());
  }

  /** Journals nothing new: replays the entry of kind named name, or suspends on aw. */
  private async suspendOn(kind: EntryKind, name: string, aw: (seq: number) => Await): Promise<void> {
    checkName("step name", name);
    const n = this.st.next(kind, name, 1, true);
    if (!n) return never();
    if (n.entries[0]) return;
    return this.st.halt(suspended(aw(n.seq)));
  }

  /**
   * Starts a run of fn (a function of the run's tenant) with input as a child of this run,
   * suspends until it ends, and returns its output; a child that failed, was cancelled or
   * could not start (type not_found, forbidden) throws a StepError. The child runs as this
   * run's identity. The child inherits this run's deadline; with detached, cancelling this
   * run does not cancel the child, and the child does not inherit the deadline (it outlives
   * this run, bounded only by its own function's run_timeout).
   */
  async invoke<T = unknown>(name: string, call: Call): Promise<T> {
    checkName("step name", name);
    checkFunction(`step: invoke ${q(name)}: function`, call.function);
    const input = jsonValue(call.input);
    const n = this.st.next("invoke", name, 1, true);
    if (!n) return never();
    const e = n.entries[0];
    if (e) {
      if (e.error) throw stepError(e, e.error);
      return (e.output ?? null) as T;
    }
    const aw: Await = { type: "invoke", seq: n.seq, name, function: call.function, input };
    if (call.detached) aw.detached = true;
    return this.st.halt(suspended(aw));
  }

  /**
   * Starts a child run for each of calls (1 to 64) at once, suspends until all have
   * ended, and returns their outcomes in order. The children take one seq each.
   */
  async invokeAll<T = unknown>(name: string, calls: Call[]): Promise<Outcome<T>[]> {
    checkName("step name", name);
    if (calls.length === 0 || calls.length > MAX_INVOKE_ALL) {
      throw new NonRetryableError(`step: invoke_all ${q(name)}: ${calls.length} calls, not from 1 to ${MAX_INVOKE_ALL}`);
    }
    const wire: InvokeCall[] = calls.map((c, i) => {
      checkFunction(`step: invoke_all ${q(name)}: calls[${i}]: function`, c.function);
      const w: InvokeCall = { function: c.function, input: jsonValue(c.input) };
      if (c.detached) w.detached = true;
      return w;
    });
    const st = this.st;
    const n = st.next("invoke", name, calls.length, true);
    if (!n) return never();
    const journaled = n.entries.filter((e) => e).length;
    if (journaled === 0) return st.halt(suspended({ type: "invoke_all", seq: n.seq, name, calls: wire }));
    if (journaled < calls.length) {
      return st.halt(retry("replay", `invoke_all ${q(name)}: ${journaled} of the ${calls.length} children at seqs ${n.seq} to ${n.seq + calls.length - 1} are journaled; the run is called again once all are`));
    }
    return n.entries.map((e) =>
      e!.error ? { ok: false, error: stepError(e!, e!.error) } : { ok: true, output: (e!.output ?? null) as T },
    );
  }

  /**
   * Journals an entry made now (an event, a value, a message, a callback) with the
   * gateway; resolves with the acknowledgement, or never when the invocation stopped.
   */
  private async journal(seq: number, kind: EntryKind, name: string, output: unknown) {
    const st = this.st;
    if (!(await st.room(seq))) return undefined;
    const gone = st.goneSeen();
    if (gone) return st.halt<undefined>(retry("canceled", `${kind} ${seq} ${q(name)}: ${gone}`));
    const now = new Date().toISOString();
    const entry: JournalEntry = { seq, kind, name, started_at: now, finished_at: now };
    if (output !== undefined) entry.output = output;
    st.begin(seq);
    let ok = false;
    try {
      const ack = await st.checkpoint(entry);
      ok = ack !== undefined;
      return ack;
    } finally {
      st.done(seq, ok);
    }
  }

  /**
   * Sends the event name with data to the gateway, once: it starts the runs its triggers
   * name and resumes runs waiting for it, with this run's identity as its sender. Its id
   * is `<run id>:<seq>`, so a repeated checkpoint sends nothing twice.
   */
  async sendEvent(name: string, data?: unknown): Promise<void> {
    checkName("event name", name);
    const value = jsonValue(data);
    const n = this.st.next("event", name);
    if (!n) return never();
    if (n.entries[0]) return;
    const ack = await this.journal(n.seq, "event", name, { name, data: value, id: `${this.st.req.run.id}:${n.seq}` });
    if (!ack) return never();
  }

  /**
   * Suspends until an event named event whose fields hold match's values arrives
   * (`{"data.order_id": "o-17"}`: dotted paths into {id, name, data}, scalar values), or
   * timeout passes (default 24h); returns the event, or null when it timed out.
   */
  async waitForEvent<T = unknown>(name: string, opts: { event: string; match?: Record<string, string | number | boolean | null>; timeout?: Duration }): Promise<Event<T> | null> {
    checkName("step name", name);
    const timeout = opts.timeout === undefined ? undefined : goDuration(opts.timeout, `wait ${q(name)}: timeout`);
    const n = this.st.next("wait_event", name, 1, true);
    if (!n) return never();
    const e = n.entries[0];
    if (!e) {
      const aw: Await = { type: "wait_event", seq: n.seq, name, event: opts.event, match: opts.match ?? {} };
      if (timeout) aw.timeout = timeout;
      return this.st.halt(suspended(aw));
    }
    return eventFrom<T>(e.output);
  }

  /**
   * Sends a message of topic with data to the run runId of the same tenant, once. A
   * message that cannot be sent (type not_found, forbidden, finished, limit_exceeded) throws a
   * StepError, on replay too.
   */
  async send(topic: string, runId: string, data?: unknown): Promise<void> {
    checkName("topic", topic);
    if (!UUID.test(runId)) throw new NonRetryableError(`step: send ${q(topic)}: ${q(runId)} is not a run id (a UUID)`);
    const value = jsonValue(data);
    const n = this.st.next("send", topic);
    if (!n) return never();
    const e = n.entries[0];
    if (e) {
      if (e.error) throw stepError(e, e.error);
      return;
    }
    const ack = await this.journal(n.seq, "send", topic, { run_id: runId, topic, data: value, id: `${this.st.req.run.id}:${n.seq}` });
    if (!ack) return never();
    if (ack.error) throw new StepError(n.seq, topic, ack.error.type, ack.error.message);
  }

  /**
   * Takes the oldest message of topic from the run's mailbox, or suspends until one is
   * sent or timeout passes (default 24h); null when it timed out.
   */
  async receive<T = unknown>(topic: string, opts: { timeout?: Duration } = {}): Promise<Message<T> | null> {
    checkName("topic", topic);
    const timeout = opts.timeout === undefined ? undefined : goDuration(opts.timeout, `receive ${q(topic)}: timeout`);
    const n = this.st.next("receive", topic, 1, true);
    if (!n) return never();
    const e = n.entries[0];
    if (!e) {
      const aw: Await = { type: "receive", seq: n.seq, name: topic, topic };
      if (timeout) aw.timeout = timeout;
      return this.st.halt(suspended(aw));
    }
    return messageFrom<T>(e.output);
  }

  /**
   * Makes a callback: a URL that the outside world resolves once (a person's approval, a
   * webhook) with POST <url> and a JSON body. It expires after timeout (default 168h).
   * Wait for it with awaitCallback.
   */
  async callback(name: string, opts: { timeout?: Duration } = {}): Promise<CallbackHandle> {
    checkName("step name", name);
    const timeout = opts.timeout === undefined ? undefined : goDuration(opts.timeout, `callback ${q(name)}: timeout`);
    const st = this.st;
    const n = st.next("callback", name);
    if (!n) return never();
    let out: unknown = n.entries[0]?.output;
    if (!n.entries[0]) {
      const ack = await this.journal(n.seq, "callback", name, timeout ? { timeout } : undefined);
      if (!ack) return never();
      out = ack.output;
    }
    const got = (out ?? {}) as { url?: string; token?: string; expires_at?: string };
    if (!got.token) {
      return st.halt(retry("callback", `callback ${n.seq} ${q(name)}: the gateway gave no token (output ${JSON.stringify(out ?? null)})`));
    }
    return { seq: n.seq, name, url: got.url ?? "", token: got.token, expiresAt: new Date(got.expires_at ?? 0) };
  }

  /**
   * Suspends until the callback cb is resolved (returns its data), rejected (throws a
   * StepError, type "rejected" unless the rejection says otherwise) or timeout passes
   * (null; default: the callback's expiry).
   */
  async awaitCallback<T = unknown>(cb: CallbackHandle, opts: { timeout?: Duration } = {}): Promise<CallbackResult<T> | null> {
    const timeout = opts.timeout === undefined ? undefined : goDuration(opts.timeout, `callback ${q(cb.name)}: timeout`);
    const n = this.st.next("await_callback", cb.name, 1, true);
    if (!n) return never();
    const e = n.entries[0];
    if (!e) {
      const aw: Await = { type: "await_callback", seq: n.seq, name: cb.name, callback_seq: cb.seq };
      if (timeout) aw.timeout = timeout;
      return this.st.halt(suspended(aw));
    }
    return callbackFrom<T>(e, e.output);
  }

  /**
   * Suspends until the first of alternatives comes (1 to 8: an event, a callback's
   * resolution or a message), or timeout passes (default 24h), and returns which came
   * (its index in alternatives) with what it brought; null when it timed out. The others
   * are ended: a callback resolved after another alternative came is refused.
   */
  async waitAny<T = unknown>(name: string, alternatives: Alternative[], opts: { timeout?: Duration } = {}): Promise<Chosen<T> | null> {
    checkName("step name", name);
    if (alternatives.length === 0 || alternatives.length > 8) {
      throw new NonRetryableError(`step: wait_any ${q(name)}: ${alternatives.length} alternatives, not 1 to 8`);
    }
    const timeout = opts.timeout === undefined ? undefined : goDuration(opts.timeout, `wait_any ${q(name)}: timeout`);
    const n = this.st.next("wait_any", name, 1, true);
    if (!n) return never();
    const e = n.entries[0];
    if (!e) {
      const of: Await[] = alternatives.map((a) =>
        "event" in a
          ? { type: "wait_event", seq: n.seq, name, event: a.event, match: a.match ?? {} }
          : "callback" in a
            ? { type: "await_callback", seq: n.seq, name, callback_seq: a.callback.seq }
            : { type: "receive", seq: n.seq, name, topic: a.topic },
      );
      const aw: Await = { type: "wait_any", seq: n.seq, name, of };
      if (timeout) aw.timeout = timeout;
      return this.st.halt(suspended(aw));
    }
    const got = (e.output ?? {}) as { timed_out?: boolean; index?: number; kind?: string; output?: unknown };
    if (got.timed_out) return null;
    const chosen: Chosen<T> = { index: got.index ?? 0 };
    switch (got.kind) {
      case "wait_event":
        chosen.event = eventFrom<T>(got.output) ?? undefined;
        break;
      case "await_callback":
        chosen.callback = callbackFrom<T>(e, got.output) ?? undefined;
        break;
      case "receive":
        chosen.message = messageFrom<T>(got.output) ?? undefined;
        break;
    }
    return chosen;
  }

  /**
   * Publishes value under key for clients to read while the run goes on
   * (GET /v1/runs/{id}/values/{key}); it takes a seq, as a step does.
   */
  async setValue(key: string, value: unknown): Promise<void> {
    checkFunction("step: value key", key);
    const v = jsonValue(value);
    const n = this.st.next("value", key);
    if (!n) return never();
    if (n.entries[0]) return;
    if (!(await this.journal(n.seq, "value", key, v))) return never();
  }

  /**
   * Returns a writer of the run's stream called key (see StreamWriter); it sends nothing
   * until the first write. Writers of one key share the stream. key must be 1 to 255
   * letters, digits, '.', '_' or '-', starting with a letter or digit (a
   * NonRetryableError otherwise). Inside a step's function, prefer ctx.stream(key).
   */
  stream(key: string): StreamWriter {
    return new StreamWriter(this.st, key);
  }

  /**
   * Says whether the run takes the patched code path of the patch called name, so that
   * a function's code can change while runs of the old code are suspended and must
   * replay what they journaled:
   *
   *     if (await step.patched("fix-rounding")) total = await step.run("total-v2", rounded);
   *     else total = await step.run("total", oldTotal);
   *
   * true for a run that reaches the patch for the first time on code that has it (the
   * journal holds nothing at the next seq: a marker, an entry of kind patch named name,
   * is journaled there first), and on each replay of that run, which finds its marker.
   * false, without taking a seq, for a run whose journal holds another entry there: it
   * went past this point on code from before the patch, and replays the old path. Once
   * no run of the old code is left, drop the old branch and replace patched with
   * deprecatePatch of the same name; once no run with a marker is left, remove that too.
   * Call it between steps, not inside a step's function. name must be 1 to 255 bytes.
   */
  async patched(name: string): Promise<boolean> {
    checkName("patch name", name);
    const st = this.st;
    const p = st.patch(name, false);
    if (!p) return never();
    if (p.marker) return true;
    if (p.seq === 0) return false;
    if (!(await this.journal(p.seq, "patch", name, undefined))) return never();
    return true;
  }

  /**
   * Marks where the patch called name was, once the code keeps only its patched path
   * (see patched): when the journal holds the patch's marker at the next seq, it takes
   * that seq so the entries after it replay in place; otherwise it does nothing, and
   * journals nothing. Call it where patched was.
   */
  async deprecatePatch(name: string): Promise<void> {
    checkName("patch name", name);
    if (!this.st.patch(name, true)) return never();
  }

  /**
   * Registers fn as the undo of what the run has done so far (a saga's compensation),
   * usually right after the step it undoes. When the run fails for good (the function
   * throws a StepError or a NonRetryableError) or the function calls rollback, the SDK
   * runs the registered undos newest first, each as a journaled step named
   * "compensate <name>", with the step's retries: a replay does not run one twice, and a
   * crash in the middle goes on where it stopped. The run then fails with the original
   * error; when an undo fails for good, the others still run and the run's error ends
   * with "(compensation incomplete: <names> failed)".
   *
   * Registration is not journaled: it is code, and runs again on every replay, so
   * register under the same conditions each time. Any other error (the invocation is
   * retried) runs nothing. name must be 1 to 244 bytes (255 with the prefix).
   */
  compensate(name: string, fn: (ctx: StepContext) => unknown): void {
    const bytes = new TextEncoder().encode(String(name)).length;
    if (typeof name !== "string" || bytes === 0 || COMPENSATION_PREFIX.length + bytes > 255) {
      throw new NonRetryableError(`step: compensation name ${q(String(name))} is not 1 to ${255 - COMPENSATION_PREFIX.length} bytes`);
    }
    this.st.pushUndo({ name, fn: fn as (ctx: { attempt: number; signal: AbortSignal }) => unknown });
  }

  /**
   * Runs the registered compensations now, newest first, as compensate says, and returns
   * the error to throw to fail the run with cause: a NonRetryableError with cause's
   * message, noting an incomplete compensation. A function that handles a failure itself
   * calls it; one that simply lets a StepError or a NonRetryableError out gets the same.
   */
  async rollback(cause?: unknown): Promise<NonRetryableError> {
    const c = cause ?? new Error("rolled back");
    try {
      await this.runCompensations();
    } catch (e) {
      if (!(e instanceof IncompleteCompensation)) throw e;
      return new NonRetryableError(`${messageOf(c)} (${e.message})`, { cause: c });
    }
    return new NonRetryableError(messageOf(c), { cause: c });
  }

  /**
   * Runs and forgets the registered compensations, newest first, each as a journaled
   * step; throws an IncompleteCompensation when some failed for good. The SDK calls it
   * when a run fails for good; rollback calls it too.
   */
  async runCompensations(): Promise<void> {
    const failed: string[] = [];
    for (const u of this.st.takeUndos()) {
      try {
        await this.run(COMPENSATION_PREFIX + u.name, async (ctx) => {
          await u.fn(ctx);
          return {};
        });
      } catch (e) {
        if (!(e instanceof StepError)) throw e;
        failed.push(u.name);
      }
    }
    if (failed.length > 0) throw new IncompleteCompensation(failed);
  }

  /** The current time, journaled as the step called name: a replay returns the same. */
  async now(name: string): Promise<Date> {
    return new Date(await this.run(name, () => new Date().toISOString()));
  }

  /** A random (version 4) UUID, journaled as the step called name. */
  async uuid(name: string): Promise<string> {
    return this.run(name, () => crypto.randomUUID());
  }

  /** A pseudo-random number in [0, 1), journaled as the step called name. Not for secrets. */
  async random(name: string): Promise<number> {
    return this.run(name, () => Math.random());
  }
}
