import { type Duration, toGo, toMs } from "./duration.js";
import type { FunctionConfig } from "./protocol.js";
import { BACKOFF_OPTIONS, FUNCTION_OPTIONS, unknownOption } from "./options.js";
import type { Identity, Step } from "./step.js";

/**
 * A Standard Schema (https://standardschema.dev): what Zod, Valibot, ArkType and others
 * implement, so any of them can validate a function's input. Only the part used here.
 */
export interface StandardSchemaV1<Input = unknown, Output = Input> {
  readonly "~standard": {
    readonly version: 1;
    readonly vendor: string;
    readonly validate: (
      value: unknown,
    ) =>
      | { readonly value: Output; readonly issues?: undefined }
      | { readonly issues: ReadonlyArray<{ readonly message: string; readonly path?: ReadonlyArray<PropertyKey | { key: PropertyKey }> }> }
      | Promise<
          | { readonly value: Output; readonly issues?: undefined }
          | { readonly issues: ReadonlyArray<{ readonly message: string; readonly path?: ReadonlyArray<PropertyKey | { key: PropertyKey }> }> }
        >;
    readonly types?: { readonly input: Input; readonly output: Output } | undefined;
  };
}

/** The run being invoked. */
export interface RunInfo {
  id: string;
  function: string;
  revision: number;
  /** The invocation attempt, from 1. */
  attempt: number;
  /** The run that invoked this one, for a child run. */
  parentId?: string;
  createdAt: Date;
}

/** What a function gets on each invocation. */
export interface Context<In> {
  /** The run's input (validated by the function's schema, if it has one). */
  input: In;
  /** The run's steps. */
  step: Step;
  /** Who started the run; a child run, an event's run or a schedule's carries its starter's. */
  identity: Identity;
  run: RunInfo;
  /** Aborted when the invocation stops early. */
  signal: AbortSignal;
}

/** A function's name and the configuration the gateway applies (its manifest entry). */
export interface FunctionOptions<In> {
  /** 1 to 255 letters, digits, '.', '_' or '-', starting with a letter or digit; unique in the app. */
  name: string;
  /** Validates the run's input; a refused input fails the run (type "input"). */
  input?: StandardSchemaV1<unknown, In>;
  /**
   * How long one invocation may take before the gateway retries it (gateway default 5m;
   * Go's functions.InvocationTimeout). Not a wait's timeout.
   */
  invocationTimeout?: Duration;
  /**
   * Invocations in all, the first included, before a run whose invocations keep failing
   * fails (gateway default 3; Go's functions.InvocationAttempts). Not a step's retries
   * (RunOptions.retries).
   */
  invocationAttempts?: number;
  /** The wait before each retried invocation (Go's functions.InvocationBackoff); not a step's (RunOptions.backoff). */
  invocationBackoff?: { initial?: Duration; max?: Duration };
  /**
   * For a platform that stops a request after this long (a serverless time limit): once
   * four fifths of it have passed, the invocation stops at the next step boundary and the
   * gateway calls the function again at once with the journal so far (a continue). At
   * least 100ms and at most invocationTimeout.
   */
  maxInvocationDuration?: Duration;
  /**
   * The longest sleep (step.sleep, step.sleepUntil) an invocation waits out in its
   * process, checkpointed, instead of suspending the run: a sleep of 1s then costs no
   * second invocation. Off by default. An invocation sleeps in its process only with time
   * to spare before its invocationTimeout and its maxInvocationDuration; while it does, the run is
   * running, not sleeping, and holds its concurrency slots. Not part of the manifest.
   */
  sleepInProcess?: Duration;
  /**
   * Journal its steps' results lazily (Go's functions.LazyCheckpoints()), each step's
   * own `lazy` option aside. Off by default: then step.run, step.now, step.uuid and
   * step.random resolve only once the gateway has journaled the step (a checkpoint
   * answered 200). With lazy checkpoints a step's result is journaled only when the
   * function's next step starts or it answers, so if the process dies in between, the
   * step runs again even though code after it already saw its result. What it buys: the
   * last step and a step just before a sleep or a wait cost no checkpoint of their own
   * (they ride in the answer). Not part of the manifest.
   */
  lazyCheckpoints?: boolean;
  /** Bounds each run from its creation; past it the run fails (deadline_exceeded). */
  runTimeout?: Duration;
  /** How long finished runs are kept. */
  retention?: Duration;
  /**
   * A caller needs one of these roles (or admin) to start runs, and to resume their waits
   * (an event, a message) unless it has one of resumeRoles.
   */
  invokeRoles?: string[];
  /**
   * Roles that may also resume the runs' waits (waitForEvent, receive): an event from any
   * other sender leaves a run waiting, and its messages are refused. Never restricts.
   */
  resumeRoles?: string[];
  /** Events whose arrival starts a run, with the event's data as input. */
  onEvent?: string[];
  /** At most limit runs at once, per value of key when given (e.g. "input.customer_id"). */
  concurrency?: { limit: number; key?: string }[];
  /** 1 (first) to 4 (last); 2 by default. */
  priority?: number;
  /** Any other setting of the manifest's config, as the protocol spells it (throttle, rate_limit, debounce). */
  config?: FunctionConfig;
}

/** A function made by createFunction, to give to serve. */
export interface StepgateFunction<In = unknown, Out = unknown> {
  readonly name: string;
  readonly config: FunctionConfig;
  /** config.max_invocation_duration in milliseconds, or 0. */
  readonly budgetMs: number;
  /** The longest sleep waited out in the process, in milliseconds (sleepInProcess), or 0. */
  readonly sleepMaxMs: number;
  /** Whether its steps' results are journaled lazily by default (lazyCheckpoints). */
  readonly lazyCheckpoints: boolean;
  readonly schema: StandardSchemaV1<unknown, In> | undefined;
  readonly handler: (ctx: Context<In>) => Out | Promise<Out>;
}

const FUNCTION_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$/;

/**
 * Makes a durable function: handler runs on each invocation with the run's input and its
 * steps, and what it returns (JSON) completes the run. Throw a NonRetryableError (or let
 * a StepError out) to fail the run at once; any other error makes the invocation fail
 * (HTTP 500), and the gateway retries it per the function's retry policy.
 *
 * It throws a TypeError for an invalid name, and for an option it does not take (a typo,
 * or a name from before 0.1.0: timeout, maxAttempts, backoff), naming what to write
 * instead or the options it takes.
 */
export function createFunction<In = unknown, Out = unknown>(
  opts: FunctionOptions<In>,
  handler: (ctx: Context<In>) => Out | Promise<Out>,
): StepgateFunction<In, Out> {
  if (!FUNCTION_NAME.test(opts.name)) {
    throw new TypeError(`stepgate: invalid function name ${JSON.stringify(opts.name)}: use 1 to 255 letters, digits, '.', '_' or '-', starting with a letter or digit`);
  }
  // An option this SDK does not take is refused now, at definition: ignored, an old
  // name (timeout, maxAttempts, backoff) would leave the run to the gateway's defaults.
  const what = `stepgate: createFunction ${JSON.stringify(opts.name)}`;
  const bad = unknownOption(what, opts, FUNCTION_OPTIONS) ?? unknownOption(`${what}: invocationBackoff`, opts.invocationBackoff, BACKOFF_OPTIONS);
  if (bad) throw new TypeError(bad);
  const c: FunctionConfig = {};
  if (opts.invocationTimeout !== undefined) c.timeout = toGo(opts.invocationTimeout, "invocationTimeout");
  if (opts.invocationAttempts !== undefined || opts.invocationBackoff) {
    c.retries = {};
    if (opts.invocationAttempts !== undefined) c.retries.max_attempts = Math.max(1, Math.floor(opts.invocationAttempts));
    if (opts.invocationBackoff?.initial !== undefined) c.retries.initial_interval = toGo(opts.invocationBackoff.initial, "invocationBackoff.initial");
    if (opts.invocationBackoff?.max !== undefined) c.retries.max_interval = toGo(opts.invocationBackoff.max, "invocationBackoff.max");
  }
  let budgetMs = 0;
  if (opts.maxInvocationDuration !== undefined) {
    c.max_invocation_duration = toGo(opts.maxInvocationDuration, "maxInvocationDuration");
    budgetMs = toMs(opts.maxInvocationDuration, "maxInvocationDuration");
  }
  if (opts.runTimeout !== undefined) c.run_timeout = toGo(opts.runTimeout, "runTimeout");
  if (opts.retention !== undefined) c.retention = toGo(opts.retention, "retention");
  if (opts.invokeRoles) c.invoke_roles = [...opts.invokeRoles];
  if (opts.resumeRoles) c.resume_roles = [...opts.resumeRoles];
  if (opts.onEvent) c.triggers = opts.onEvent.map((event) => ({ event }));
  if (opts.concurrency) c.concurrency = opts.concurrency.map((l) => (l.key ? { limit: l.limit, key: l.key } : { limit: l.limit }));
  if (opts.priority !== undefined) c.priority = opts.priority;
  Object.assign(c, opts.config ?? {});
  const sleepMaxMs = opts.sleepInProcess === undefined ? 0 : toMs(opts.sleepInProcess, "sleepInProcess");
  return Object.freeze({ name: opts.name, config: c, budgetMs, sleepMaxMs, lazyCheckpoints: opts.lazyCheckpoints === true, schema: opts.input, handler });
}
