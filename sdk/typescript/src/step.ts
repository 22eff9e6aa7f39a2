// The steps of a durable function, as the Go SDK's package step has them.
import { type Duration, toGo, toMs } from "./duration.js";
import type { Jsonify } from "./json.js";
import { ErrorType, messageOf, NonRetryableError, StepError, TimedOutError } from "./errors.js";
import { runInStep } from "./context.js";
import { failed, type Invocation, never, q, retry, suspended } from "./invocation.js";
import { StreamWriter } from "./stream.js";
import type { Await, EntryKind, ErrorInfo, JournalEntry } from "./protocol.js";
import { MAX_INVOKE_ALL, type Values, waitAll, waitFirst } from "./combine.js";
import { Wait } from "./wait.js";
import {
  BACKOFF_OPTIONS, CALLBACK_OPTIONS, INVOKE_OPTIONS, type OptionNames, RECEIVE_OPTIONS, RUN_OPTIONS, unknownOption,
  WAIT_FOR_EVENT_OPTIONS,
} from "./options.js";

/** How many attempts a step makes, the first included, unless its options say otherwise. */
export const DEFAULT_MAX_ATTEMPTS = 3;

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

/** A request taken by step.receiveRequest: answer it with step.reply or step.replyError, once. */
export interface Request<T = unknown> {
  /** The request's id: what step.reply and step.replyError take. */
  id: string;
  /** The request's name, as the client sent it. */
  name: string;
  data: T;
  /** Who sent it: the caller's token. */
  sender: Identity;
  /** When the gateway stored it (database clock). */
  sentAt: Date;
}

/** The topic of the requests named name (the gateway's journal.RequestTopic). */
export const REQUEST_TOPIC_PREFIX = "request:";

/** The type of the error reply step.replyError sends for an error that is not a StepError. */
const REPLY_ERROR_TYPE = "error";

/** A callback made by step.callback: hand its url to whoever must resolve it. */
export interface Callback<T = unknown> {
  /** The seq of its entry. */
  seq: number;
  name: string;
  /** Resolve it with POST <url> and a JSON body (or reject it). */
  url: string;
  token: string;
  expiresAt: Date;
  /**
   * Who resolved or rejected it, once its result() has its outcome (as Go's
   * OpenCallback.Resolver): "token" (whoever held its URL) or "identity" (a caller with
   * a JWT and runs:manage, by run id and name); "" before, and when it expired.
   */
  resolver: "" | "token" | "identity";
  /** The caller's identity when resolver is "identity" (Go's ResolvedBy), else undefined. */
  resolvedBy?: Identity;
  /** When it was resolved or rejected (database clock; Go's ResolvedAt), else undefined. */
  resolvedAt?: Date;
  /**
   * Its resolution's data, a wait (lazy, as step.sleep's: awaiting it takes a seq): a
   * rejection rejects with a StepError (type "rejected" unless the rejection says
   * otherwise); the callback's expiry, with a TimedOutError. Every call returns the same
   * wait. Once it has its outcome, resolver, resolvedBy and resolvedAt say who resolved
   * or rejected it.
   */
  result(): Wait<T>;
}

/**
 * A callback's resolution, as the deprecated step.awaitCallback gives it.
 *
 * @deprecated Use `await cb.result()`, which gives the data, and the callback's resolver,
 * resolvedBy and resolvedAt. Removed in 0.3.0.
 */
export interface CallbackResult<T = unknown> {
  data: T;
  /** "token" (whoever held the URL) or "identity" (a caller with runs:manage, by run id and name). */
  resolver: string;
  /** The caller's identity, for resolver "identity". */
  resolvedBy?: Identity;
  /** When it was resolved (database clock). */
  resolvedAt?: Date;
}

/**
 * The outcome of one child run of the deprecated step.invokeAll: its output, or its StepError.
 *
 * @deprecated Use step.waitAll of step.invoke's waits, then await each wait. Removed in 0.3.0.
 */
export type Outcome<T> = { ok: true; output: T } | { ok: false; error: StepError };

/** The options of step.waitForEvent. */
export interface WaitForEventOptions {
  /** The event's name. */
  event: string;
  /** Fields the event must hold: `{"data.order_id": "o-17"}` (dotted paths into {id, name, data}, scalar values). */
  match?: Record<string, string | number | boolean | null>;
  /** How long to wait before a TimedOutError (default 24h). */
  timeout?: Duration;
  /**
   * A look-back: `"start"` also takes the earliest matching event stored since the run was
   * created (the one that started it included), a time the earliest stored at or after it
   * (neither in the future nor further back than the gateway's STEPGATE_RETENTION, or the
   * run fails bad_answer). Without it, only events stored since this invocation started
   * match, so starting a run and then sending it its event needs `since: "start"`.
   */
  since?: "start" | Date | string;
}

/** The options of step.receive and step.receiveRequest. */
export interface ReceiveOptions {
  /** How long to wait before a TimedOutError (default 24h). */
  timeout?: Duration;
}

/** The options of step.callback. */
export interface CallbackOptions {
  /** How long the callback stays open (default 168h): after it, its result is a TimedOutError. */
  timeout?: Duration;
}

/** The options of step.invoke: the child run. */
export interface InvokeOptions {
  /** The function to run (of the run's tenant). */
  function: string;
  input?: unknown;
  /**
   * Cancelling this run does not cancel this child, and the child does not inherit this
   * run's deadline.
   */
  detached?: boolean;
}

const FUNCTION_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$/;
const UUID = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/;

function checkName(what: string, name: string) {
  const bytes = new TextEncoder().encode(name).length;
  if (typeof name !== "string" || bytes === 0 || bytes > 255) {
    throw new NonRetryableError(`step: ${what} ${q(String(name).slice(0, 64))} must be 1 to 255 bytes`);
  }
  if (name.includes("\0")) throw new NonRetryableError(`step: ${what} ${q(name.slice(0, 64))} must be UTF-8 text without NUL bytes`);
}

/**
 * Refuses an options object that names an option the step does not take, as an invalid
 * name is refused (a NonRetryableError, taking no seq): what to write instead for an old
 * name, else the options it takes.
 */
function checkOptions(what: string, opts: unknown, names: OptionNames) {
  const bad = unknownOption(`step: ${what}`, opts, names);
  if (bad) throw new NonRetryableError(bad);
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

/** The event of a wait_event's entry e (or of a wait_any's alternative in it); a timeout throws. */
function eventFrom<T>(e: JournalEntry, output: unknown): Event<T> {
  const got = (output ?? {}) as { timed_out?: boolean; event?: { id: string; name: string; data: T; identity: unknown; created_at: string } };
  if (got.timed_out || !got.event) throw new TimedOutError(e.seq, e.name);
  const ev = got.event;
  return { id: ev.id, name: ev.name, data: ev.data, sender: identityOf(ev.identity), sentAt: new Date(ev.created_at) };
}

/** The message of a receive's entry e (or of a wait_any's alternative in it); a timeout throws. */
function messageFrom<T>(e: JournalEntry, output: unknown): Message<T> {
  const got = (output ?? {}) as {
    timed_out?: boolean;
    message?: { id: string; topic: string; data: T; identity: unknown; source_run_id?: string; sent_at: string };
  };
  if (got.timed_out || !got.message) throw new TimedOutError(e.seq, e.name);
  const m = got.message;
  const out: Message<T> = { id: m.id, topic: m.topic, data: m.data, sender: identityOf(m.identity), sentAt: new Date(m.sent_at) };
  if (m.source_run_id) out.senderRun = m.source_run_id;
  return out;
}

/** An awaited run's end journaled at e: its output; a failure, a cancellation or a refusal throws a StepError, a timeout a TimedOutError. */
function runEndFrom<T>(e: JournalEntry, output: unknown): T {
  const got = (output ?? {}) as { timed_out?: boolean; run?: { status?: string; output?: T; error?: ErrorInfo } };
  if (got.timed_out || !got.run) throw new TimedOutError(e.seq, e.name);
  if (got.run.error) throw stepError(e, got.run.error);
  return (got.run.output ?? null) as T;
}

/** Who resolved (or rejected) the callback whose journaled resolution is out. */
function resolutionFrom(out: unknown): { resolver?: string; resolvedBy?: Identity; resolvedAt?: Date } {
  const got = (out ?? {}) as { resolver?: string; resolved_by?: unknown; resolved_at?: string };
  const r: { resolver?: string; resolvedBy?: Identity; resolvedAt?: Date } = {};
  if (got.resolver) r.resolver = got.resolver;
  if (got.resolved_by) r.resolvedBy = identityOf(got.resolved_by);
  if (got.resolved_at) r.resolvedAt = new Date(got.resolved_at);
  return r;
}

/** A callback's resolution journaled at e: its data; a rejection throws a StepError, a timeout a TimedOutError. */
function callbackFrom<T>(e: JournalEntry, output: unknown): T {
  const got = (output ?? {}) as { timed_out?: boolean; data?: T; error?: ErrorInfo };
  if (got.timed_out) throw new TimedOutError(e.seq, e.name);
  if (got.error) throw stepError(e, got.error);
  return got.data as T;
}

/**
 * The steps of one invocation, handed to a function as `step`. Each call takes the next
 * seq of the run (1, 2, ...), except a wait (sleep, sleepUntil, waitForEvent, receive,
 * receiveRequest, invoke, a callback's result()), which takes its seq when it is awaited (see Wait):
 * when the journal already holds that seq the step is
 * replayed (run returns the journaled output without calling its function; a journaled
 * sleep resolves at once), otherwise it runs and is journaled (checkpointed): every step
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
    checkOptions(`run ${q(name)}`, opts, RUN_OPTIONS);
    checkOptions(`run ${q(name)}: backoff`, opts.backoff, BACKOFF_OPTIONS);
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
   * A wait of d (milliseconds or a duration string such as "10m"): awaited, it suspends
   * the run for d from when the gateway receives the answer, on the database clock; on
   * replay, the journaled sleep resolves at once. In step.waitFirst it is a timer: the
   * first of the waits to come unless another comes before d has passed (a timer under
   * 1s waits 1s there, the gateway's shortest).
   *
   * A short sleep awaited alone may be waited out in the function's process instead, in
   * one invocation: when d is at most the function's sleepInProcess (off by default) and
   * the invocation has time to spare, the sleep is checkpointed (durable, with its wake
   * time) and resolves when that time comes. If the process dies meanwhile, the gateway
   * calls the function again at that time, as for a suspended sleep.
   */
  sleep(name: string, d: Duration): Wait<void> {
    checkName("step name", name);
    const duration = goDuration(d, `sleep ${q(name)}: duration`);
    const ms = toMs(d, `sleep ${q(name)}: duration`);
    return this.timer(name, () => ms, { duration });
  }

  /** A wait until t, like sleep (waited out in the process when t is near). */
  sleepUntil(name: string, t: Date | string): Wait<void> {
    checkName("step name", name);
    const until = new Date(t);
    if (Number.isNaN(until.getTime())) throw new NonRetryableError(`step: sleep ${q(name)}: ${q(String(t))} is not a time`);
    return this.timer(name, () => until.getTime() - Date.now(), { until: until.toISOString() });
  }

  /** The wait of a sleep of ms() from now, whose await says aw. */
  private timer(name: string, ms: () => number, aw: { duration?: string; until?: string }): Wait<void> {
    return new Wait<void>(this.st, {
      kind: "sleep", name, role: "timer",
      await: (seq) => ({ type: "sleep", seq, name, ...aw }),
      decode: () => undefined,
      alone: (st) => this.sleepFor(st, name, ms(), aw),
    });
  }

  private async sleepFor(st: Invocation, name: string, ms: number, aw: { duration?: string; until?: string }): Promise<void> {
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

  /**
   * A wait for a child run: awaited, it starts a run of opts.function (a function of the
   * run's tenant) with opts.input as a child of this run, suspends until it ends, and
   * gives its output; a child that failed, was cancelled or could not start (type
   * not_found, forbidden) rejects with a StepError. The child runs as this run's
   * identity. The child inherits this run's deadline; with detached, cancelling this run
   * does not cancel the child, and the child does not inherit the deadline (it outlives
   * this run, bounded only by its own function's run_timeout). step.waitAll starts the
   * child runs among its waits at once; step.waitFirst refuses a child run.
   */
  invoke<T = unknown>(name: string, opts: InvokeOptions): Wait<T> {
    checkName("step name", name);
    checkOptions(`invoke ${q(name)}`, opts, INVOKE_OPTIONS);
    checkFunction(`step: invoke ${q(name)}: function`, opts.function);
    const input = jsonValue(opts.input);
    return new Wait<T>(this.st, {
      kind: "invoke", name, role: "child",
      await: (seq) => ({ type: "invoke", seq, name, function: opts.function, input, ...(opts.detached ? { detached: true } : {}) }),
      decode: (e, out) => {
        if (e.error) throw stepError(e, e.error);
        return (out ?? null) as T;
      },
    });
  }

  /**
   * Waits for the first of waits to come and resolves with its index in waits; awaiting
   * that wait then gives its outcome at once. The others stay as they were: awaiting one
   * later waits for it anew (a message not chosen was not taken from the mailbox; a
   * callback not chosen refuses a resolution until its result is awaited again). A wait
   * that already has its outcome, or is being awaited, is the first, taking no seq.
   *
   * Waits the gateway keeps are one wait_any at one seq, whose entry records the choice,
   * so a replay resolves with the same index. Timers (step.sleep, step.sleepUntil) and
   * waits with their own timeout are deadlines: the earliest is the wait's timeout (at
   * least 1s), and its wait is chosen when it passes first, the lowest index on a tie (a
   * wait's own timeout then rejects it with a TimedOutError). Given both durations
   * (step.sleep, a timeout: from when the wait is stored) and times (step.sleepUntil),
   * waitFirst first journals the time it waits from, as a step called name, so that a
   * replay compares the same deadlines. Receives of one topic are one wait: a message
   * ends the first of them. A callback among the waits expires when the wait times out.
   * Timers alone are the earliest's sleep. With no deadline the wait lasts the gateway's
   * longest, 10 years, then rejects with a TimedOutError.
   *
   * Promises of steps running in parallel (step.run), alone: the first to settle (resolve
   * or reject), its index journaled as a step called name, so a replay picks the same.
   *
   * Refused with a NonRetryableError, taking no seq: a child run (step.invoke: the
   * gateway's first-of has no child-run alternative; use waitAll), step promises mixed
   * with waits the gateway keeps (they run in the process, the waits suspend it), more
   * than 8 waits besides timers.
   */
  waitFirst(name: string, ...waits: PromiseLike<unknown>[]): Promise<number> {
    checkName("step name", name);
    return waitFirst(this.st, name, waits, (pick, lazy) => this.run(name, pick, { retries: 0, ...(lazy ? { lazy } : {}) }));
  }

  /**
   * Starts a child run for each of calls (1 to MAX_INVOKE_ALL) at once, all named name,
   * suspends until all have ended, and resolves with their outcomes in order. It journals
   * what it journaled before 0.1.0 (one invoke_all, one entry per child), so runs
   * suspended on code that called it replay on code that still does.
   *
   * @deprecated Use `step.waitAll(...calls.map((c) => step.invoke(name, c)))`, which
   * journals the same but rejects with the first child's error; then await each wait
   * for its own outcome. Removed in 0.3.0.
   */
  async invokeAll<T = unknown>(name: string, calls: InvokeOptions[]): Promise<Outcome<T>[]> {
    checkName("step name", name);
    if (!Array.isArray(calls) || calls.length === 0 || calls.length > MAX_INVOKE_ALL) {
      throw new NonRetryableError(`step: invokeAll ${q(name)}: ${Array.isArray(calls) ? calls.length : 0} calls, not from 1 to ${MAX_INVOKE_ALL}`);
    }
    const waits = calls.map((c) => this.invoke<T>(name, c));
    try {
      await this.waitAll(...waits);
    } catch (e) {
      if (!(e instanceof StepError)) throw e;
    }
    return Promise.all(
      waits.map((w) =>
        w.then(
          (output): Outcome<T> => ({ ok: true, output }),
          (error: unknown): Outcome<T> => {
            if (error instanceof StepError) return { ok: false, error };
            throw error;
          },
        ),
      ),
    );
  }

  /**
   * Waits for all of waits and resolves with their values, in order (as Promise.all, for
   * waits): first the promises of steps running in parallel (step.run), then every child
   * run among them (step.invoke) at once (one invoke_all; their entries take one seq each
   * and are named by the first child's name), then the other waits in the order given,
   * each at its own seq. Rejects, once all are done, with the first error in the order
   * given.
   */
  waitAll<const W extends readonly unknown[]>(...waits: W): Promise<Values<W>> {
    return waitAll(this.st, waits);
  }
  /**
   * Journals an entry made now (an event, a value, a message, a callback) with the
   * gateway; resolves with the acknowledgement, or never when the invocation stopped.
   */
  private async journal(seq: number, kind: EntryKind, name: string, output: unknown, error?: ErrorInfo) {
    const st = this.st;
    if (!(await st.room(seq))) return undefined;
    const gone = st.goneSeen();
    if (gone) return st.halt<undefined>(retry("canceled", `${kind} ${seq} ${q(name)}: ${gone}`));
    const now = new Date().toISOString();
    const entry: JournalEntry = { seq, kind, name, started_at: now, finished_at: now };
    if (output !== undefined) entry.output = output;
    if (error) entry.error = error;
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
   * A wait for an event named opts.event whose fields hold opts.match's values
   * (`{"data.order_id": "o-17"}`: dotted paths into {id, name, data}, scalar values):
   * awaited, it suspends until one arrives, and gives it; after opts.timeout (default 24h)
   * it rejects with a TimedOutError. Only events stored since the invocation that waits
   * started match, unless opts.since looks back further ("start": since the run was
   * created).
   */
  waitForEvent<T = unknown>(name: string, opts: WaitForEventOptions): Wait<Event<T>> {
    checkName("step name", name);
    checkOptions(`wait ${q(name)}`, opts, WAIT_FOR_EVENT_OPTIONS);
    const timeout = opts.timeout === undefined ? undefined : goDuration(opts.timeout, `wait ${q(name)}: timeout`);
    const match = opts.match ?? {};
    const since = lookBack(name, opts.since);
    return new Wait<Event<T>>(this.st, {
      kind: "wait_event", name, role: "alternative", ...(timeout ? { timeout } : {}),
      await: (seq) => ({ type: "wait_event", seq, name, event: opts.event, match, ...(timeout ? { timeout } : {}), ...since }),
      decode: (e, out) => eventFrom<T>(e, out),
    });
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
   * A wait called name for the end of the run runId of this run's tenant: any run, not
   * only a child (one a client started, a schedule, another run). Awaited, it suspends
   * until that run ends and gives its output; a run that failed (its error's type), was
   * cancelled (cancelled), is not in the tenant (not_found) or that this run's identity
   * may not read (forbidden: it needs runs:read) rejects with a StepError; after
   * opts.timeout (default 24h) it rejects with a TimedOutError. A run that has ended
   * already gives its outcome at once. It may be one of step.waitFirst's waits. A run may
   * not await itself: the gateway fails it.
   */
  awaitRun<T = unknown>(name: string, runId: string, opts: ReceiveOptions = {}): Wait<T> {
    checkName("step name", name);
    checkOptions(`awaitRun ${q(name)}`, opts, RECEIVE_OPTIONS);
    if (!/^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/.test(runId)) {
      throw new NonRetryableError(`step: awaitRun ${q(name)}: run id ${q(runId)} is not a UUID`);
    }
    const timeout = opts.timeout === undefined ? undefined : goDuration(opts.timeout, `awaitRun ${q(name)}: timeout`);
    return new Wait<T>(this.st, {
      kind: "await_run", name, role: "alternative", ...(timeout ? { timeout } : {}),
      await: (seq) => ({ type: "await_run", seq, name, run_id: runId, ...(timeout ? { timeout } : {}) }),
      decode: (e, out) => runEndFrom<T>(e, out),
    });
  }

  /**
   * A wait for a message of topic: awaited, it takes the oldest message of topic from
   * the run's mailbox, or suspends until one is sent; after opts.timeout (default 24h) it
   * rejects with a TimedOutError.
   */
  receive<T = unknown>(topic: string, opts: ReceiveOptions = {}): Wait<Message<T>> {
    checkName("topic", topic);
    checkOptions(`receive ${q(topic)}`, opts, RECEIVE_OPTIONS);
    const timeout = opts.timeout === undefined ? undefined : goDuration(opts.timeout, `receive ${q(topic)}: timeout`);
    return new Wait<Message<T>>(this.st, {
      kind: "receive", name: topic, role: "alternative", ...(timeout ? { timeout } : {}),
      await: (seq) => ({ type: "receive", seq, name: topic, topic, ...(timeout ? { timeout } : {}) }),
      decode: (e, out) => messageFrom<T>(e, out),
    });
  }

  /**
   * A wait for a request called name (a client's POST /v1/runs/{id}/requests): awaited,
   * it takes the oldest request of that name the run has not received, or suspends until
   * one is sent; after opts.timeout (default 24h) it rejects with a TimedOutError. It is
   * step.receive of the topic "request:" + name, which its entry is named after, and
   * combines as it does (step.waitFirst takes the request only when it is the wait
   * chosen). Answer each request with step.reply or step.replyError, once: a request the
   * run has not replied to when it ends is answered by the gateway with an error.
   */
  receiveRequest<T = unknown>(name: string, opts: ReceiveOptions = {}): Wait<Request<T>> {
    if (name === "") throw new NonRetryableError("step: receive request: the request name is empty");
    const topic = REQUEST_TOPIC_PREFIX + name;
    checkName("topic", topic);
    checkOptions(`receive request ${q(name)}`, opts, RECEIVE_OPTIONS);
    const timeout = opts.timeout === undefined ? undefined : goDuration(opts.timeout, `receive request ${q(name)}: timeout`);
    return new Wait<Request<T>>(this.st, {
      kind: "receive", name: topic, role: "alternative", ...(timeout ? { timeout } : {}),
      await: (seq) => ({ type: "receive", seq, name: topic, topic, ...(timeout ? { timeout } : {}) }),
      decode: (e, out) => {
        const m = messageFrom<T>(e, out);
        return { id: m.id, name, data: m.data, sender: m.sender, sentAt: m.sentAt };
      },
    });
  }

  /**
   * Replies value (its JSON value) to the request requestId (a Request's id) that the
   * run received, as the run's next entry, of kind reply, named requestId: it resolves
   * once the gateway has journaled it (durable), and the client waiting on the request
   * gets it. On replay it resolves at once and sends nothing again. A request takes one
   * reply: the gateway refuses (400) a reply to a request the run has not received, or
   * has replied to already, and the run then fails, non-retryable, saying why (the
   * promise never settles).
   */
  async reply(requestId: string, value: unknown): Promise<void> {
    checkName("request id", requestId);
    await this.replyEntry(requestId, jsonValue(value));
  }

  /**
   * Replies an error to the request requestId, as step.reply replies a value: the client
   * gets an error whose type is error's when it is a StepError, or else "error", and
   * whose message is error's message (or String(error) when it is not an Error).
   */
  async replyError(requestId: string, error: unknown): Promise<void> {
    checkName("request id", requestId);
    if (error === undefined || error === null) throw new NonRetryableError(`step: reply an error to request ${q(requestId)}: the error is ${error}`);
    const type = error instanceof StepError && error.type ? error.type : REPLY_ERROR_TYPE;
    await this.replyEntry(requestId, undefined, { type, message: messageOf(error) });
  }

  /** Journals a reply to requestId at the next seq: its output, or its error; a journaled reply is not sent again. */
  private async replyEntry(requestId: string, output: unknown, error?: ErrorInfo): Promise<void> {
    const n = this.st.next("reply", requestId);
    if (!n) return never();
    if (n.entries[0]) return;
    if (!(await this.journal(n.seq, "reply", requestId, output, error))) return never();
  }

  /**
   * Makes a callback, at once (it takes a seq and is journaled): a URL that the outside
   * world resolves once (a person's approval, a webhook) with POST <url> and a JSON body.
   * It expires after opts.timeout (default 168h). Its result() is the wait for it.
   */
  async callback<T = unknown>(name: string, opts: CallbackOptions = {}): Promise<Callback<T>> {
    checkName("step name", name);
    checkOptions(`callback ${q(name)}`, opts, CALLBACK_OPTIONS);
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
    const seq = n.seq;
    const cb: Callback<T> = { seq, name, url: got.url ?? "", token: got.token, expiresAt: new Date(got.expires_at ?? 0), resolver: "", result: () => result };
    const result: Wait<T> = new Wait<T>(st, {
      kind: "await_callback", name, role: "alternative",
      await: (at) => ({ type: "await_callback", seq: at, name, callback_seq: seq }),
      decode: (e, o) => {
        // Who resolved it is the callback's, set whether it was resolved or rejected.
        const r = resolutionFrom(o);
        if (r.resolver === "token" || r.resolver === "identity") cb.resolver = r.resolver;
        if (r.resolvedBy) cb.resolvedBy = r.resolvedBy;
        if (r.resolvedAt) cb.resolvedAt = r.resolvedAt;
        return callbackFrom<T>(e, o);
      },
    });
    return cb;
  }
  /**
   * Waits for cb's resolution as step.awaitCallback did before 0.1.0, journaling what it
   * journaled (an await_callback named after the callback, at the next seq): resolves
   * with the data and who resolved it; rejects with a StepError when it is rejected; and
   * resolves with null when opts.timeout passes first (the wait's end is the callback's
   * expiry; default: the callback's own). So runs suspended on code that called it
   * replay on code that still does.
   *
   * @deprecated Use `await cb.result()`, which rejects with a TimedOutError when the
   * callback expires (give step.callback the timeout), or, for a wait shorter than the
   * callback, step.waitFirst(name, cb.result(), step.sleep(...)), which journals another
   * entry (see docs/versioning.md for runs suspended on the old code). Removed in 0.3.0.
   */
  async awaitCallback<T = unknown>(cb: Pick<Callback<T>, "seq" | "name">, opts: ReceiveOptions = {}): Promise<CallbackResult<T> | null> {
    checkName("step name", cb?.name);
    checkOptions(`awaitCallback ${q(cb.name)}`, opts, RECEIVE_OPTIONS);
    const timeout = opts.timeout === undefined ? undefined : goDuration(opts.timeout, `callback ${q(cb.name)}: timeout`);
    const name = cb.name;
    const w = new Wait<CallbackResult<T>>(this.st, {
      kind: "await_callback", name, role: "alternative", ...(timeout ? { timeout } : {}),
      await: (seq) => ({ type: "await_callback", seq, name, callback_seq: cb.seq, ...(timeout ? { timeout } : {}) }),
      decode: (e, out) => {
        const r = resolutionFrom(out);
        const result: CallbackResult<T> = { data: callbackFrom<T>(e, out), resolver: r.resolver ?? "" };
        if (r.resolvedBy) result.resolvedBy = r.resolvedBy;
        if (r.resolvedAt) result.resolvedAt = r.resolvedAt;
        return result;
      },
    });
    try {
      return await w;
    } catch (e) {
      if (e instanceof TimedOutError) return null;
      throw e;
    }
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

/** lookBack turns a wait's since option into the protocol's look-back fields. */
function lookBack(name: string, since: WaitForEventOptions["since"]): { since?: string; since_start?: boolean } {
  if (since === undefined) return {};
  if (since === "start") return { since_start: true };
  const t = since instanceof Date ? since : new Date(since);
  if (Number.isNaN(t.getTime())) throw new NonRetryableError(`step: wait ${q(name)}: since ${q(String(since))} is not "start" or a time`);
  return { since: t.toISOString() };
}
