// Options objects are checked by name where they are given: TypeScript's checks do not
// run under tsx or in plain JavaScript, and an option the SDK ignores (a typo, or a name
// a release renamed) silently changes what a run does.

import type { FunctionOptions } from "./function.js";
import type { CallbackOptions, InvokeOptions, ReceiveOptions, RunOptions, WaitForEventOptions } from "./step.js";

/**
 * keys, which the compiler checks are every option of T and nothing else: an option
 * added to T and not here fails the build, rather than being refused at run time.
 */
function every<T>() {
  return <const K extends readonly (keyof T & string)[]>(
    keys: K & ([Exclude<keyof T, K[number]>] extends [never] ? unknown : { missing: Exclude<keyof T, K[number]> }),
  ): readonly string[] => keys;
}

/** The names of an options object, and what each name it once took is called now. */
export interface OptionNames {
  /** Every name it takes. */
  readonly accepted: readonly string[];
  /** A name it no longer takes (or a likely mix-up), and what to write instead. */
  readonly renamed?: Readonly<Record<string, string>>;
}

/** The options of createFunction (FunctionOptions). */
export const FUNCTION_OPTIONS: OptionNames = {
  accepted: every<FunctionOptions<unknown>>()([
    "name", "input", "invocationTimeout", "invocationAttempts", "invocationBackoff", "maxInvocationDuration",
    "sleepInProcess", "lazyCheckpoints", "runTimeout", "retention", "invokeRoles", "resumeRoles", "onEvent",
    "concurrency", "priority", "config",
  ]),
  renamed: {
    timeout: "invocationTimeout (renamed before 0.1.0: how long one invocation may take; a wait's timeout is the wait's own option)",
    maxAttempts: "invocationAttempts (renamed before 0.1.0: invocations in all before the run fails; a step's are step.run's retries)",
    backoff: "invocationBackoff (renamed before 0.1.0: the wait before a retried invocation; a step's is step.run's backoff)",
    retries: "invocationAttempts (invocations in all, the first included; a step's retries are step.run's option)",
  },
};

/** The options of a backoff ({ initial, max }). */
export const BACKOFF_OPTIONS: OptionNames = { accepted: every<NonNullable<RunOptions["backoff"]>>()(["initial", "max"]) };

/** The options of step.run (RunOptions). */
export const RUN_OPTIONS: OptionNames = {
  accepted: every<RunOptions>()(["retries", "backoff", "lazy"]),
  renamed: {
    maxAttempts: "retries (the attempts after the first: maxAttempts - 1; Go's step.MaxAttempts)",
    attempts: "retries (the attempts after the first)",
  },
};

/** The options of step.waitForEvent (WaitForEventOptions). */
export const WAIT_FOR_EVENT_OPTIONS: OptionNames = { accepted: every<WaitForEventOptions>()(["event", "match", "timeout", "since"]), renamed: { sinceStart: 'since: "start"' } };

/** The options of step.receive, step.receiveRequest and step.awaitRun (ReceiveOptions). */
export const RECEIVE_OPTIONS: OptionNames = { accepted: every<ReceiveOptions>()(["timeout"]) };

/** The options of step.callback (CallbackOptions). */
export const CALLBACK_OPTIONS: OptionNames = { accepted: every<CallbackOptions>()(["timeout"]) };

/** The options of step.invoke (InvokeOptions). */
export const INVOKE_OPTIONS: OptionNames = { accepted: every<InvokeOptions>()(["function", "input", "detached"]), renamed: { fn: "function", data: "input" } };

/**
 * Checks that opts (an options object, or undefined) names only what names accepts, and
 * returns the message of the first it does not, or undefined: for a name it no longer
 * takes, what to write instead; for any other, the names it takes. what names the
 * object's owner ("createFunction \"orders.pay\"").
 */
export function unknownOption(what: string, opts: unknown, names: OptionNames): string | undefined {
  if (opts === undefined || opts === null || typeof opts !== "object" || Array.isArray(opts)) return undefined;
  for (const key of Object.keys(opts)) {
    if (names.accepted.includes(key)) continue;
    const now = names.renamed && Object.hasOwn(names.renamed, key) ? names.renamed[key] : undefined;
    if (now !== undefined) return `${what}: unknown option ${JSON.stringify(key)}: write ${now}`;
    return `${what}: unknown option ${JSON.stringify(key)}: it takes ${names.accepted.join(", ")}`;
  }
  return undefined;
}
