// A wait: one thing a run waits for (a sleep, an event, a message, a callback's
// resolution, a child run), made by a step's constructor and performed when awaited
// alone, or combined with others by step.waitFirst and step.waitAll (combine.ts).
import type { Invocation } from "./invocation.js";
import { never, suspended } from "./invocation.js";
import type { Await, EntryKind, JournalEntry } from "./protocol.js";

/**
 * What makes one kind of wait: a new kind is a constructor in step.ts that builds this
 * (its protocol await and the decode of its journal entry).
 */
export interface WaitSpec<T> {
  /** The kind of its entry when awaited alone. */
  kind: EntryKind;
  /** Its name: the entry's when awaited alone. */
  name: string;
  /**
   * What step.waitFirst makes of it: an alternative of a wait_any, the wait_any's timer
   * (its timeout), or a child run (which waitFirst refuses, and waitAll starts with the
   * others at once).
   */
  role: "alternative" | "timer" | "child";
  /** The protocol's await of it at seq. */
  await(seq: number): Await;
  /**
   * Its outcome from out, the output of its entry e (or of the alternative a wait_any
   * chose, journaled in e): returns its value, or throws what it rejects with.
   */
  decode(e: JournalEntry, out: unknown): T;
  /** Its own timeout, when its options gave one: in a waitFirst, one of its deadlines. */
  timeout?: string;
  /** Awaited alone, instead of replaying its entry or suspending on its await (a sleep waited out in the process). */
  alone?(st: Invocation): Promise<T>;
}

/** A wait's outcome, once it has one. */
export type Settled<T> = { ok: true; value: T } | { ok: false; error: unknown };

interface Inner<T> {
  st: Invocation;
  spec: WaitSpec<T>;
  settled?: Settled<T>;
  pending?: Promise<T>;
}

const inner = new WeakMap<Wait<unknown>, Inner<unknown>>();

/**
 * Something the run waits for, made by step.sleep, step.sleepUntil, step.waitForEvent,
 * step.receive, step.invoke, or a callback's result(). It is lazy: making it takes no
 * seq and does nothing. Awaiting it (`await w`, its then) takes the run's next seq at
 * that moment and waits there, alone: the journal's entry is replayed, or the run
 * suspends until it comes. Or give it to step.waitFirst or step.waitAll, which wait for
 * several at once. Once it has an outcome (awaited, or chosen by waitFirst, or waited by
 * waitAll), awaiting it again gives the same outcome without taking a seq. A timeout that
 * passed rejects with a TimedOutError.
 */
export class Wait<T> implements PromiseLike<T> {
  /** Made by the steps' constructors, not by hand. */
  constructor(st: Invocation, spec: WaitSpec<T>) {
    inner.set(this as Wait<unknown>, { st, spec } as Inner<unknown>);
  }

  then<A = T, B = never>(onfulfilled?: ((value: T) => A | PromiseLike<A>) | null, onrejected?: ((reason: unknown) => B | PromiseLike<B>) | null): Promise<A | B> {
    return perform(this).then(onfulfilled, onrejected);
  }

  catch<B = never>(onrejected?: ((reason: unknown) => B | PromiseLike<B>) | null): Promise<T | B> {
    return this.then(undefined, onrejected);
  }

  finally(onfinally?: (() => void) | null): Promise<T> {
    return perform(this).finally(onfinally);
  }
}

/** The inside of w. */
export function innerOf<T>(w: Wait<T>): Inner<T> {
  return inner.get(w as Wait<unknown>) as Inner<T>;
}

/** Gives w its outcome, decided by waitFirst or waitAll. */
export function settle<T>(w: Wait<T>, s: Settled<T>) {
  innerOf(w).settled = s;
}

/** w's outcome as a promise: the one it has, or the one its wait alone brings. */
function perform<T>(w: Wait<T>): Promise<T> {
  const i = innerOf(w);
  if (i.settled) return i.settled.ok ? Promise.resolve(i.settled.value) : Promise.reject(i.settled.error);
  i.pending ??= (i.spec.alone ? i.spec.alone(i.st) : alone(i.st, i.spec)).then(
    (value) => {
      i.settled = { ok: true, value };
      return value;
    },
    (error: unknown) => {
      i.settled = { ok: false, error };
      throw error;
    },
  );
  return i.pending;
}

/** Waits for spec alone at the next seq: replays its entry, or suspends the run on its await. */
async function alone<T>(st: Invocation, spec: WaitSpec<T>): Promise<T> {
  const n = st.next(spec.kind, spec.name, 1, true);
  if (!n) return never();
  const e = n.entries[0];
  if (e) return spec.decode(e, e.output);
  return st.halt(suspended(spec.await(n.seq)));
}
