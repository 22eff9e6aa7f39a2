// Which step's function is running: the seq and attempt of the step whose function the
// current async code belongs to, kept with the platform's AsyncLocalStorage where it has
// one (Node, Bun and Deno; Cloudflare Workers under nodejs_compat), found at run time
// through process.getBuiltinModule, so the package imports nothing and bundles anywhere.
// Where there is none, inStep() always answers undefined: nested steps are not detected,
// and a stream writer made with step.stream places its chunks between steps (a step's
// function gets ctx.stream, which knows its step on every platform).
import type { Invocation } from "./invocation.js";

/** Where a step's function runs: its invocation, seq and attempt. */
export interface StepPlace {
  st: Invocation;
  seq: number;
  attempt: number;
}

interface Storage<T> {
  run<R>(store: T, fn: () => R): R;
  getStore(): T | undefined;
}

function storage(): Storage<StepPlace> | undefined {
  const g = globalThis as {
    process?: { getBuiltinModule?: (id: string) => { AsyncLocalStorage?: new () => Storage<StepPlace> } | undefined };
    AsyncLocalStorage?: new () => Storage<StepPlace>;
  };
  try {
    const ALS = g.process?.getBuiltinModule?.("node:async_hooks")?.AsyncLocalStorage ?? g.AsyncLocalStorage;
    return ALS ? new ALS() : undefined;
  } catch {
    return undefined;
  }
}

const als = storage();

/** Whether this platform tells which step's function runs (AsyncLocalStorage). */
export const tracksSteps = als !== undefined;

/** Calls fn as the function of the step at place. */
export function runInStep<R>(place: StepPlace, fn: () => R): R {
  return als ? als.run(place, fn) : fn();
}

/** The step of st whose function the calling code belongs to, if known. */
export function inStep(st: Invocation): StepPlace | undefined {
  const p = als?.getStore();
  return p && p.st === st ? p : undefined;
}
