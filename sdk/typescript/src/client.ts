// A typed client of the gateway's public API, for code that calls functions: start a run,
// wait for its output, attach to it, cancel it, send events, messages and requests, read
// its values and streams. It runs wherever the Fetch API does and imports nothing of the
// function side of the SDK at run time.
import { type Duration, toGo, toMs } from "./duration.js";
import type { StepgateFunction } from "./function.js";
import type { Jsonify } from "./json.js";
import type { components } from "./protocol.gen.js";

type Schemas = components["schemas"];
export type RunStatus = Schemas["RunStatus"];
export type RunResult = Schemas["RunResult"];
export type RunDetail = Schemas["RunDetail"];
export type EventReceipt = Schemas["EventReceipt"];
export type MessageReceipt = Schemas["MessageReceipt"];
export type StartedWithMessage = Schemas["StartedWithMessage"];
export type RunRequest = Schemas["RunRequest"];
export type RunValue = Schemas["RunValue"];
export type RunErrorInfo = Schemas["ErrorInfo"];

/**
 * A typed reference to a function by name, for a caller that cannot import the function's
 * code: `ref<Order, Receipt>("orders.checkout")`. The types are the caller's promise; the
 * gateway checks none of them.
 */
export interface FunctionRef<In = unknown, Out = unknown> {
  readonly name: string;
  /** Carries the types only; never set. */
  readonly __types?: (input: In) => Out;
}

/** Returns a typed reference to the function called name. */
export function ref<In = unknown, Out = unknown>(name: string): FunctionRef<In, Out> {
  return Object.freeze({ name });
}

/** What a client starts: a function made by createFunction, a ref, or a bare name (untyped). */
export type Target = StepgateFunction<any, any> | FunctionRef<any, any> | string;

/** The input type of a target: a function's input, a ref's In, unknown for a name. */
export type InputOf<F> = F extends StepgateFunction<infer I, any> ? I : F extends FunctionRef<infer I, any> ? I : unknown;

/**
 * The output type of a target as the caller receives it: the JSON form of what the
 * function returns (a Date becomes a string), a ref's Out, unknown for a name.
 */
export type OutputOf<F> = F extends StepgateFunction<any, infer O> ? Jsonify<O> : F extends FunctionRef<any, infer O> ? O : unknown;

/** A typed reference to an event by name: `eventRef<{ orderId: string }>("order.paid")`. */
export interface EventRef<Data = unknown> {
  readonly name: string;
  /** Carries the type only; never set. */
  readonly __data?: (data: Data) => void;
}

/** Returns a typed reference to the event called name. */
export function eventRef<Data = unknown>(name: string): EventRef<Data> {
  return Object.freeze({ name });
}

/** A started run: its id and its status when the gateway answered. Out is its output's type. */
export interface StartedRun<Out = unknown> {
  readonly id: string;
  readonly status: RunStatus;
  /** Carries the type only; never set. */
  readonly __output?: Out;
}

/**
 * A run that startWithMessage started, or found under its idempotency key, with the
 * message in its mailbox. Out is its output's type.
 */
export interface StartedRunWithMessage<Out = unknown> extends StartedRun<Out> {
  /** This call created the run; false when the key named it already. */
  readonly created: boolean;
  /** The message: `consumed` when a receive of the run took it at once, `duplicate` when sent before under this key. */
  readonly message: MessageReceipt;
}

/** How the client retries a request the gateway could not serve. */
export interface RetryOptions {
  /** Retries after the first try, 0 for none. Default 3. */
  attempts?: number;
  /** The wait before the first retry, doubled before each next one, with jitter. Default 200ms. */
  initialDelay?: Duration;
  /**
   * The longest wait between tries. A Retry-After longer than this is not waited for: the
   * error is thrown at once. Default 10s.
   */
  maxDelay?: Duration;
}

export interface ClientOptions {
  /** The gateway's base URL, e.g. http://127.0.0.1:8080. */
  url: string;
  /** The bearer token (a JWT), or a function that returns one for each request. */
  token?: string | (() => string | Promise<string>);
  /** The fetch to use; globalThis.fetch by default. */
  fetch?: typeof fetch;
  /** Retries of a failed request (a network error, a 429 or a 503): a count or options; 0 or false for none. */
  retries?: number | false | RetryOptions;
}

export interface StartOptions {
  /**
   * The run's idempotency key (per tenant and function): a start with a key already used
   * answers that run. Without it the client makes a random one for this start, reused by
   * its retries, so that a retried start never starts two runs.
   */
  idempotencyKey?: string;
  /** Start after this long (not with startAt). */
  delay?: Duration;
  /** Start at this time (not with delay). */
  startAt?: Date | string;
  /** Fail the run (deadline_exceeded) if it has not ended by this time. */
  deadline?: Date | string;
  /** The run's deadline as a duration from now (not with deadline). */
  timeout?: Duration;
  /** 1 (first) to 4 (last); overrides the function's priority. */
  priority?: number;
  signal?: AbortSignal;
}

export interface WaitOptions {
  /** How long to wait in all; until the run ends by default. */
  wait?: Duration;
  signal?: AbortSignal;
}

/** An error answer of the gateway: its HTTP status, its error code and its detail. */
export class ApiError extends Error {
  constructor(
    /** The HTTP status. */
    readonly status: number,
    /** The problem's type when the gateway names one, else the status's code (not_found, conflict, ...). */
    readonly code: string,
    message: string,
  ) {
    super(message);
    this.name = "ApiError";
  }
}
/** 400: the request is malformed; the message says how. */
export class BadRequestError extends ApiError {
  override name = "BadRequestError";
}
/** 401: the token is missing or invalid. */
export class UnauthorizedError extends ApiError {
  override name = "UnauthorizedError";
}
/** 403: the token lacks a permission or a role; the message names it. */
export class ForbiddenError extends ApiError {
  override name = "ForbiddenError";
}
/** 404: no such function or run in the token's tenant. */
export class NotFoundError extends ApiError {
  override name = "NotFoundError";
}
/** 409: the request conflicts with what is stored (a key reused with another input, a finished run). */
export class ConflictError extends ApiError {
  override name = "ConflictError";
}
/** 413: the body is over the gateway's limit. */
export class TooLargeError extends ApiError {
  override name = "TooLargeError";
}
/** 429: a limit is reached (after the client's retries). */
export class TooManyRequestsError extends ApiError {
  override name = "TooManyRequestsError";
}
/** 503: the gateway could not serve the request (after the client's retries). */
export class UnavailableError extends ApiError {
  override name = "UnavailableError";
}

const CODES: Record<number, [string, typeof ApiError]> = {
  400: ["bad_request", BadRequestError],
  401: ["unauthorized", UnauthorizedError],
  403: ["forbidden", ForbiddenError],
  404: ["not_found", NotFoundError],
  409: ["conflict", ConflictError],
  413: ["too_large", TooLargeError],
  429: ["too_many_requests", TooManyRequestsError],
  503: ["unavailable", UnavailableError],
};

/** The gateway was not reached, or its answer was cut off, on every try. */
export class NetworkError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "NetworkError";
  }
}

/** A run that failed: its error's type (timeout, step_failed, deadline_exceeded, ...) and message. */
export class RunFailedError extends Error {
  constructor(
    readonly runId: string,
    /** The run's error type. */
    readonly type: string,
    message: string,
  ) {
    super(message);
    this.name = "RunFailedError";
  }
}

/** A run that was cancelled: a RunFailedError of type "cancelled" when the gateway gave none. */
export class RunCancelledError extends RunFailedError {
  constructor(runId: string, type: string, message: string) {
    super(runId, type, message);
    this.name = "RunCancelledError";
  }
}

/** The wait ran out before the run ended (or the request was replied to). The run goes on. */
export class WaitTimeoutError extends Error {
  constructor(
    readonly runId: string,
    /** The run's status, or the request's, when the wait ran out. */
    readonly status: string,
    message: string,
  ) {
    super(message);
    this.name = "WaitTimeoutError";
  }
}

/** A request the run answered with an error, or that it ended without replying to (type no_reply). */
export class RequestFailedError extends Error {
  constructor(
    readonly runId: string,
    readonly requestId: string,
    readonly type: string,
    message: string,
  ) {
    super(message);
    this.name = "RequestFailedError";
  }
}

// The longest single long-poll: below common proxies' idle timeouts, and within the
// gateway's bounds (15m for a result, 1m for a request's reply and a value).
const LONG_POLL_MS = 55_000;
const TERMINAL: ReadonlySet<string> = new Set(["completed", "failed", "cancelled"]);

interface Call {
  query?: Record<string, string | number | undefined>;
  body?: unknown;
  headers?: Record<string, string>;
  signal?: AbortSignal | undefined;
  /** Answers the caller reads instead of throwing (304). */
  accept?: number[];
}

/**
 * A client of a gateway's API, typed by the functions it calls. Every request is retried on
 * a network error, a 429 and a 503 (after Retry-After), a bounded number of times; starts,
 * events, messages and requests carry an id made before the first try (an idempotency key,
 * a deduplication id), so that a retry never does the thing twice.
 */
export class Client {
  private readonly base: string;
  private readonly token: ClientOptions["token"];
  private readonly fetchFn: typeof fetch;
  private readonly attempts: number;
  private readonly initialMs: number;
  private readonly maxMs: number;

  constructor(opts: ClientOptions) {
    const u = new URL(opts.url);
    if (u.protocol !== "http:" && u.protocol !== "https:") throw new TypeError(`stepgate: client url ${JSON.stringify(opts.url)}: want http:// or https://`);
    this.base = opts.url.replace(/\/+$/, "");
    this.token = opts.token;
    this.fetchFn = opts.fetch ?? ((input, init) => globalThis.fetch(input, init));
    const r: RetryOptions = typeof opts.retries === "object" ? opts.retries : { attempts: opts.retries === false ? 0 : (opts.retries ?? 3) };
    this.attempts = Math.max(0, Math.floor(r.attempts ?? 3));
    this.initialMs = toMs(r.initialDelay ?? 200, "retries.initialDelay");
    this.maxMs = toMs(r.maxDelay ?? 10_000, "retries.maxDelay");
  }

  /**
   * Starts a run of fn with input and answers at once with its id and status. input is
   * checked against fn's input type.
   */
  async start<F extends Target>(fn: F, input: InputOf<F>, opts: StartOptions = {}): Promise<StartedRun<OutputOf<F>>> {
    const r = await this.startRun(fn, input, opts, undefined);
    return { id: r.id, status: r.status };
  }

  /**
   * Starts a run of fn with input and waits for its output, typed as fn's. Throws a
   * RunFailedError (RunCancelledError) when the run fails (is cancelled), and a
   * WaitTimeoutError when opts.wait runs out first (the run goes on: attach to its runId).
   */
  async run<F extends Target>(fn: F, input: InputOf<F>, opts: StartOptions & WaitOptions = {}): Promise<OutputOf<F>> {
    const until = opts.wait === undefined ? Infinity : Date.now() + toMs(opts.wait, "wait");
    // The gateway takes no wait with a delayed start: start, then attach.
    const delayed = opts.delay !== undefined || opts.startAt !== undefined;
    const r = await this.startRun(fn, input, opts, delayed ? undefined : until);
    if (TERMINAL.has(r.status)) return outcome(r) as OutputOf<F>;
    const rest: WaitOptions = { ...(opts.signal ? { signal: opts.signal } : {}), ...(until === Infinity ? {} : { wait: Math.max(0, until - Date.now()) }) };
    return this.attach<OutputOf<F>>(r.id, rest);
  }

  /** The same as run. */
  startAndWait<F extends Target>(fn: F, input: InputOf<F>, opts: StartOptions & WaitOptions = {}): Promise<OutputOf<F>> {
    return this.run(fn, input, opts);
  }

  /**
   * Waits for a run's output (long-polling its result): returns it when the run
   * completes, throws RunFailedError (RunCancelledError) when it fails (is cancelled), and
   * WaitTimeoutError when opts.wait runs out first. Give the StartedRun that start returned
   * to keep its output's type.
   */
  async attach<Out = unknown>(run: string | StartedRun<Out>, opts: WaitOptions = {}): Promise<Out> {
    const id = typeof run === "string" ? run : run.id;
    const until = opts.wait === undefined ? Infinity : Date.now() + toMs(opts.wait, "wait");
    for (;;) {
      const left = until - Date.now();
      const resp = await this.call("GET", `/v1/runs/${enc(id)}/result`, { query: { wait: left > 0 ? waitParam(Math.min(left, LONG_POLL_MS)) : undefined }, signal: opts.signal });
      const r = (await resp.json()) as RunResult;
      if (TERMINAL.has(r.status)) return outcome(r) as Out;
      if (until - Date.now() <= 0) throw new WaitTimeoutError(id, r.status, `run ${id} is ${r.status}: the wait ran out before it ended`);
    }
  }

  /** Returns a run with the first page of its journal. */
  async get(runId: string, opts: { signal?: AbortSignal } = {}): Promise<RunDetail> {
    return (await this.call("GET", `/v1/runs/${enc(runId)}`, { signal: opts.signal })).json() as Promise<RunDetail>;
  }

  /**
   * Cancels a run that has not finished and returns it, cancelled. A run that has finished
   * is a ConflictError; so is a retry of a cancel whose first try reached the gateway.
   */
  async cancel(runId: string, opts: { signal?: AbortSignal } = {}): Promise<RunResult> {
    return (await this.call("POST", `/v1/runs/${enc(runId)}/cancel`, { signal: opts.signal })).json() as Promise<RunResult>;
  }

  /**
   * Sends an event: it starts the functions it triggers and resumes the runs waiting for
   * it. opts.id deduplicates it (per tenant); without it the client makes one, so that a
   * retry sends it once.
   */
  async sendEvent<E extends EventRef<any> | string>(
    event: E,
    data: E extends EventRef<infer D> ? D : unknown,
    opts: { id?: string; signal?: AbortSignal } = {},
  ): Promise<EventReceipt> {
    const name = typeof event === "string" ? event : event.name;
    const body = { name, data: data === undefined ? null : data, id: opts.id ?? randomId() };
    return (await this.call("POST", "/v1/events", { body, signal: opts.signal })).json() as Promise<EventReceipt>;
  }

  /**
   * Sends a message to a run's mailbox, taken by a receive of its topic. opts.id
   * deduplicates it (per run); without it the client makes one, so that a retry sends it
   * once.
   */
  async send(runId: string, topic: string, data: unknown, opts: { id?: string; signal?: AbortSignal } = {}): Promise<MessageReceipt> {
    const body = { topic, data: data === undefined ? null : data, id: opts.id ?? randomId() };
    return (await this.call("POST", `/v1/runs/${enc(runId)}/messages`, { body, signal: opts.signal })).json() as Promise<MessageReceipt>;
  }

  /**
   * Starts the run of fn whose idempotency key is opts.idempotencyKey with input, unless
   * the key names one already, and puts a message in its mailbox, taken by a receive of
   * message.topic: both or neither, in one transaction of the gateway (signal-with-start).
   * The key (required, 1 to 255 bytes) is also the message's id, so a retry with the same
   * key, input and message starts nothing and sends nothing again (message.duplicate).
   * Answers at once: attach to the run for its output.
   *
   * The caller needs runs:invoke and events:send (a ForbiddenError naming it). The same key
   * with another input or message, or a key whose run has finished without this message, is
   * a ConflictError; a debounced function is a BadRequestError.
   */
  async startWithMessage<F extends Target>(
    fn: F,
    input: InputOf<F>,
    message: { topic: string; data?: unknown },
    opts: { idempotencyKey: string; signal?: AbortSignal },
  ): Promise<StartedRunWithMessage<OutputOf<F>>> {
    const name = typeof fn === "string" ? fn : fn.name;
    if (!opts?.idempotencyKey) {
      throw new TypeError(`stepgate: startWithMessage(${JSON.stringify(name)}): opts.idempotencyKey is required: it names the run the message goes to (and is the message's id)`);
    }
    const body = { input: input === undefined ? null : input, message: { topic: message.topic, data: message.data === undefined ? null : message.data } };
    const headers = { "Idempotency-Key": opts.idempotencyKey };
    const resp = await this.call("POST", `/v1/functions/${enc(name)}/runs/with-message`, { body, headers, signal: opts.signal });
    const r = (await resp.json()) as StartedWithMessage;
    return { id: r.id, status: r.status, created: r.created, message: r.message };
  }

  /**
   * Sends a request to a run (taken by its receiveRequest of name) and waits for the reply,
   * which it returns. Throws RequestFailedError when the run replies with an error or ends
   * without replying, and WaitTimeoutError when opts.wait runs out first. opts.id
   * deduplicates the request (per run); without it the client makes one.
   */
  async request<Reply = unknown>(runId: string, name: string, data: unknown, opts: WaitOptions & { id?: string } = {}): Promise<Reply> {
    const until = opts.wait === undefined ? Infinity : Date.now() + toMs(opts.wait, "wait");
    const id = opts.id ?? randomId();
    const wait = () => {
      const left = until - Date.now();
      return left > 0 ? waitParam(Math.min(left, LONG_POLL_MS)) : undefined;
    };
    const body = { name, data: data === undefined ? null : data, id };
    let r = (await (await this.call("POST", `/v1/runs/${enc(runId)}/requests`, { body, query: { wait: wait() }, signal: opts.signal })).json()) as RunRequest;
    for (;;) {
      if (r.status === "replied" && !r.error) return r.reply as Reply;
      if (r.status !== "pending") {
        throw new RequestFailedError(runId, id, r.error?.type ?? r.status, r.error?.message ?? `request ${id} ${r.status}`);
      }
      if (until - Date.now() <= 0) throw new WaitTimeoutError(runId, r.status, `request ${id} to run ${runId} is pending: the wait ran out before the reply`);
      r = (await (await this.call("GET", `/v1/runs/${enc(runId)}/requests/${enc(id)}`, { query: { wait: wait() }, signal: opts.signal })).json()) as RunRequest;
    }
  }

  /** The values a run published (the latest of each key). */
  async values(runId: string, opts: { signal?: AbortSignal } = {}): Promise<RunValue[]> {
    const r = (await (await this.call("GET", `/v1/runs/${enc(runId)}/values`, { signal: opts.signal })).json()) as { values: RunValue[] };
    return r.values;
  }

  /**
   * Yields the values a run publishes under key as they come, newest first then each newer
   * one (long-polling), and ends when the run has finished and its last value was yielded.
   */
  async *watchValue<T = unknown>(runId: string, key: string, opts: { signal?: AbortSignal } = {}): AsyncGenerator<T, void, undefined> {
    let after: number | undefined;
    for (;;) {
      const resp = await this.call("GET", `/v1/runs/${enc(runId)}/values/${enc(key)}`, {
        query: { wait: waitParam(LONG_POLL_MS), after },
        signal: opts.signal,
        accept: [304, 404],
      });
      if (resp.status === 200) {
        const v = (await resp.json()) as RunValue;
        after = v.version;
        yield v.value as T;
        continue;
      }
      await resp.body?.cancel();
      // Nothing newer: the wait ran out, or the run finished (then it publishes no more).
      const r = (await (await this.call("GET", `/v1/runs/${enc(runId)}/result`, { signal: opts.signal })).json()) as RunResult;
      if (TERMINAL.has(r.status)) {
        const last = await this.call("GET", `/v1/runs/${enc(runId)}/values/${enc(key)}`, { query: { after }, signal: opts.signal, accept: [304, 404] });
        if (last.status === 200) yield ((await last.json()) as RunValue).value as T;
        else await last.body?.cancel();
        return;
      }
    }
  }

  /**
   * Reads a run's stream live, from opts.offset (0 by default): yields each chunk in order
   * as the run writes it, and ends when the run closes the stream or finishes. A dropped
   * connection is resumed after the last chunk received, nothing missed or repeated.
   */
  async *stream<T = unknown>(runId: string, key: string, opts: { offset?: number; signal?: AbortSignal } = {}): AsyncGenerator<T, void, undefined> {
    let next = opts.offset ?? 0;
    let drops = 0;
    for (;;) {
      const resp = await this.call("GET", `/v1/runs/${enc(runId)}/streams/${enc(key)}`, {
        query: { offset: next },
        headers: { Accept: "text/event-stream" },
        signal: opts.signal,
      });
      let ended = false;
      try {
        for await (const ev of sseEvents(resp)) {
          if (ev.event === "chunk") {
            next = Number(ev.id) + 1;
            drops = 0;
            yield JSON.parse(ev.data) as T;
          } else if (ev.event === "end") {
            ended = true;
            return;
          } else if (ev.event === "expired") {
            throw new UnauthorizedError(401, "expired", `stream ${key} of run ${runId}: the token expired`);
          }
        }
      } catch (e) {
        if (ended || opts.signal?.aborted || e instanceof ApiError || drops >= this.attempts) throw e;
        drops++;
        await sleep(this.backoff(drops - 1), opts.signal);
        continue;
      }
      // The connection closed without an end: resume after the last chunk.
      if (drops >= this.attempts) throw new NetworkError(`stream ${key} of run ${runId}: the connection closed before the stream's end`);
      drops++;
    }
  }

  private async startRun(fn: Target, input: unknown, opts: StartOptions, until: number | undefined): Promise<RunResult> {
    const name = typeof fn === "string" ? fn : fn.name;
    const left = until === undefined ? 0 : until - Date.now();
    const query = {
      wait: left > 0 ? waitParam(Math.min(left, LONG_POLL_MS)) : undefined,
      delay: opts.delay === undefined ? undefined : toGo(opts.delay, "delay"),
      start_at: time(opts.startAt),
      deadline: time(opts.deadline),
      timeout: opts.timeout === undefined ? undefined : toGo(opts.timeout, "timeout"),
      priority: opts.priority,
    };
    const headers = { "Idempotency-Key": opts.idempotencyKey ?? randomId() };
    const resp = await this.call("POST", `/v1/functions/${enc(name)}/runs`, { query, body: input === undefined ? null : input, headers, signal: opts.signal });
    return (await resp.json()) as RunResult;
  }

  /** The wait before retry n (from 0): exponential from initialMs, capped at maxMs, with jitter. */
  private backoff(n: number): number {
    const d = Math.min(this.maxMs, this.initialMs * 2 ** n);
    return d / 2 + Math.random() * (d / 2);
  }

  /**
   * Makes a request, retrying it after a network error, a 429 or a 503 up to the client's
   * attempts. Answers 2xx (and the statuses in c.accept); throws an ApiError for others.
   */
  private async call(method: string, path: string, c: Call = {}): Promise<Response> {
    const url = new URL(this.base + path);
    for (const [k, v] of Object.entries(c.query ?? {})) if (v !== undefined) url.searchParams.set(k, String(v));
    const body = c.body === undefined ? undefined : JSON.stringify(c.body);
    for (let n = 0; ; n++) {
      const headers: Record<string, string> = { Accept: "application/json", ...c.headers };
      if (body !== undefined) headers["Content-Type"] = "application/json";
      const token = typeof this.token === "function" ? await this.token() : this.token;
      if (token) headers.Authorization = `Bearer ${token}`;
      let resp: Response;
      try {
        resp = await this.fetchFn(url, { method, headers, ...(body === undefined ? {} : { body }), ...(c.signal ? { signal: c.signal } : {}) });
      } catch (e) {
        if (c.signal?.aborted) throw e;
        if (n >= this.attempts) throw new NetworkError(`${method} ${url.pathname}: ${messageOf(e)}`, { cause: e });
        await sleep(this.backoff(n), c.signal);
        continue;
      }
      if (resp.ok || c.accept?.includes(resp.status)) return resp;
      const text = await resp.text().catch(() => "");
      if ((resp.status === 429 || resp.status === 503) && n < this.attempts) {
        const after = retryAfterMs(resp.headers.get("Retry-After"));
        if (after === undefined || after <= this.maxMs) {
          await sleep(after ?? this.backoff(n), c.signal);
          continue;
        }
      }
      throw apiError(resp.status, text);
    }
  }
}

/** The output of a finished run, or the error of a failed or cancelled one. */
function outcome(r: RunResult): unknown {
  if (r.status === "completed") return r.output === undefined ? null : r.output;
  const type = r.error?.type ?? r.status;
  const message = r.error?.message ?? `run ${r.id} ${r.status}`;
  if (r.status === "cancelled") throw new RunCancelledError(r.id, type, message);
  throw new RunFailedError(r.id, type, message);
}

function apiError(status: number, text: string): ApiError {
  let type: string | undefined;
  let detail = text;
  try {
    const p = JSON.parse(text) as { type?: unknown; detail?: unknown };
    if (typeof p.type === "string" && p.type !== "" && p.type !== "about:blank") type = p.type;
    if (typeof p.detail === "string") detail = p.detail;
  } catch {
    // Not a problem body: its text is the message.
  }
  const [code, Class] = CODES[status] ?? [`http_${status}`, ApiError];
  return new Class(status, type ?? code, detail || `HTTP ${status}`);
}

/** Retry-After in milliseconds (seconds, or an HTTP date), or undefined when absent or unreadable. */
function retryAfterMs(h: string | null): number | undefined {
  if (h === null || h.trim() === "") return undefined;
  if (/^\s*\d+\s*$/.test(h)) return Number(h) * 1000;
  const at = Date.parse(h);
  return Number.isNaN(at) ? undefined : Math.max(0, at - Date.now());
}

/** Waits ms, or rejects when signal aborts. */
function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener("abort", abort);
      resolve();
    }, ms);
    const abort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener("abort", abort, { once: true });
  });
}

/** Reads the server-sent events of resp's body. */
async function* sseEvents(resp: Response): AsyncGenerator<{ event: string; id: string; data: string }> {
  if (!resp.body) return;
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  let ev = { event: "message", id: "", data: [] as string[] };
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      buf += decoder.decode(value, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).replace(/\r$/, "");
        buf = buf.slice(nl + 1);
        if (line === "") {
          if (ev.data.length > 0 || ev.event !== "message") yield { event: ev.event, id: ev.id, data: ev.data.join("\n") };
          ev = { event: "message", id: "", data: [] };
          continue;
        }
        if (line.startsWith(":")) continue;
        const i = line.indexOf(":");
        const field = i < 0 ? line : line.slice(0, i);
        const value = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
        if (field === "event") ev.event = value;
        else if (field === "id") ev.id = value;
        else if (field === "data") ev.data.push(value);
      }
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
}

/** ms as a Go duration, rounded up to the millisecond. */
function waitParam(ms: number): string {
  return `${Math.ceil(ms)}ms`;
}

function time(t: Date | string | undefined): string | undefined {
  return t === undefined ? undefined : t instanceof Date ? t.toISOString() : t;
}

function enc(s: string): string {
  return encodeURIComponent(s);
}

function randomId(): string {
  return crypto.randomUUID();
}

function messageOf(e: unknown): string {
  if (e instanceof Error) return e.cause instanceof Error ? `${e.message}: ${e.cause.message}` : e.message;
  return String(e);
}
