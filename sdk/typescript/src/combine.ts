// step.waitFirst and step.waitAll: several waits (wait.ts) at once, or the first of
// several parallel steps.
import { NonRetryableError, TimedOutError } from "./errors.js";
import { type Invocation, never, q, retry, suspended } from "./invocation.js";
import type { Await, InvokeCall, JournalEntry } from "./protocol.js";
import { innerOf, settle, type Settled, Wait } from "./wait.js";

/** The most waits one waitFirst gives the gateway (journal.MaxAlternatives), its timer aside. */
export const MAX_ALTERNATIVES = 8;

/** The most child runs one waitAll starts at once (journal.MaxInvokeAll). */
export const MAX_INVOKE_ALL = 64;

/**
 * The wait_any timeout of a waitFirst without a timer: the longest the gateway allows
 * (invoker.MaxSleep, 10 years).
 */
export const NO_TIMER_TIMEOUT = "87600h";

/** The values of waits, in order. */
export type Values<W extends readonly unknown[]> = { -readonly [K in keyof W]: Awaited<W[K]> };

/**
 * step.waitFirst: the index of the first of waits to come. See Step.waitFirst.
 * runIndex journals a step promise race's chosen index as the step called name.
 */
export async function waitFirst(
  st: Invocation,
  name: string,
  waits: readonly PromiseLike<unknown>[],
  runIndex: (pick: () => Promise<number>) => Promise<number>,
): Promise<number> {
  const what = `step: waitFirst ${q(name)}`;
  if (waits.length === 0) throw new NonRetryableError(`${what}: no waits: give it 1 or more`);
  const gateway = waits.map((w) => w instanceof Wait);
  if (!gateway.some((g) => g)) {
    // Parallel steps, running in this process: the first to settle, journaled.
    return runIndex(() => Promise.race(waits.map((p, i) => Promise.resolve(p).then(() => i, () => i))));
  }
  const step = gateway.indexOf(false);
  if (step >= 0) {
    throw new NonRetryableError(
      `${what}: waits[${step}] is a promise (a step running in this process) and waits[${gateway.indexOf(true)}] a wait the gateway keeps (a sleep, an event, a message, a callback): one waitFirst cannot take the first of both, as the gateway resumes the run for its waits only after the invocation has answered: await the steps first`,
    );
  }
  const ws = waits as readonly Wait<unknown>[];
  let timer = -1;
  const alts: number[] = []; // the waits in the wait_any's of, by index in waits
  const topics = new Map<string, number>();
  for (let i = 0; i < ws.length; i++) {
    const { spec, settled, pending } = innerOf(ws[i]!);
    if (settled) return i; // it came before: the first, on every replay too
    if (pending) {
      // Awaited already, at a seq of its own: it is the first once it comes (it
      // suspends the run, or a replay has it at once).
      await pending.catch(() => {});
      return i;
    }
    if (spec.role === "child") {
      throw new NonRetryableError(
        `${what}: waits[${i}] is a child run (invoke ${q(spec.name)}): the gateway cannot wait for the first of a child run and other waits; await it alone or with waitAll`,
      );
    }
    if (spec.timeout !== undefined) {
      throw new NonRetryableError(
        `${what}: waits[${i}] (${spec.kind} ${q(spec.name)}) has its own timeout: in a waitFirst, a timer (step.sleep or step.sleepUntil) among the waits is the timeout`,
      );
    }
    if (spec.role === "timer") {
      if (timer >= 0) throw new NonRetryableError(`${what}: waits[${timer}] and waits[${i}] are both timers: give at most one (the first of two timers is the shorter)`);
      timer = i;
      continue;
    }
    const aw = spec.await(0);
    if (aw.type === "receive" && aw.topic !== undefined) {
      const seen = topics.get(aw.topic);
      if (seen !== undefined) throw new NonRetryableError(`${what}: waits[${seen}] and waits[${i}] both receive topic ${q(aw.topic)}: give it once`);
      topics.set(aw.topic, i);
    }
    alts.push(i);
  }
  if (alts.length > MAX_ALTERNATIVES) {
    throw new NonRetryableError(`${what}: ${alts.length} waits besides a timer, more than the gateway's limit of ${MAX_ALTERNATIVES}`);
  }
  if (alts.length === 0) {
    await ws[timer]!; // only a timer: it is the first
    return timer;
  }

  const n = st.next("wait_any", name, 1, true);
  if (!n) return never();
  const e = n.entries[0];
  if (!e) {
    const of: Await[] = alts.map((i) => ({ ...innerOf(ws[i]!).spec.await(n.seq), name }));
    const timeout = timer >= 0 ? innerOf(ws[timer]!).spec.timerTimeout!() : NO_TIMER_TIMEOUT;
    return st.halt(suspended({ type: "wait_any", seq: n.seq, name, of, timeout }));
  }
  return chosen(st, e, ws, alts, timer);
}

/** Which wait the wait_any journaled at e chose, given its outcome. */
function chosen(st: Invocation, e: JournalEntry, ws: readonly Wait<unknown>[], alts: number[], timer: number): Promise<number> | number {
  const got = (e.output ?? {}) as { timed_out?: boolean; index?: number; kind?: string; output?: unknown };
  if (got.timed_out) {
    if (timer < 0) throw new TimedOutError(e.seq, e.name); // after NO_TIMER_TIMEOUT
    settle(ws[timer]!, { ok: true, value: undefined });
    return timer;
  }
  const i = alts[got.index ?? -1];
  const spec = i === undefined ? undefined : innerOf(ws[i]!).spec;
  if (i === undefined || !spec || got.kind !== spec.kind) {
    const msg = `step ${e.seq}: code waits for the first of ${alts.length} waits in wait_any ${q(e.name)} but the journal holds alternative ${got.index} (${got.kind})`;
    return st.halt(st.diverged(e.seq, { kind: got.kind ?? e.kind, name: e.name }, { kind: spec?.kind ?? e.kind, name: e.name }, msg));
  }
  let s: Settled<unknown>;
  try {
    s = { ok: true, value: spec.decode(e, got.output) };
  } catch (error) {
    s = { ok: false, error };
  }
  settle(ws[i]!, s);
  return i;
}

/** step.waitAll: the values of waits, in order. See Step.waitAll. */
export async function waitAll<W extends readonly unknown[]>(st: Invocation, waits: W): Promise<Values<W>> {
  const out: Settled<unknown>[] = new Array(waits.length);
  const record = (i: number, p: PromiseLike<unknown>) =>
    Promise.resolve(p).then(
      (value) => void (out[i] = { ok: true, value }),
      (error: unknown) => void (out[i] = { ok: false, error }),
    );

  // The step promises (and plain values) first: steps running in this process.
  await Promise.all(waits.map((w, i) => (w instanceof Wait ? undefined : record(i, w as PromiseLike<unknown>))));

  // Then every child run not started yet, at once.
  const children = waits.flatMap((w, i) => {
    if (!(w instanceof Wait)) return [];
    const { spec, settled, pending } = innerOf(w);
    return spec.role === "child" && !settled && !pending ? [i] : [];
  });
  if (children.length === 1) await record(children[0]!, waits[children[0]!] as Wait<unknown>);
  if (children.length > 1) await invokeAll(st, children.map((i) => waits[i] as Wait<unknown>));

  // Then the others, in the order given, each at its own seq.
  for (let i = 0; i < waits.length; i++) {
    if (waits[i] instanceof Wait) await record(i, waits[i] as Wait<unknown>);
  }
  const bad = out.find((s) => !s.ok);
  if (bad) throw (bad as { error: unknown }).error;
  return out.map((s) => (s as { value: unknown }).value) as Values<W>;
}

/**
 * Starts the child runs of children (2 or more) at once: one invoke_all await, whose
 * children take one seq each, all named by the first child's name. Each child is given
 * its outcome.
 */
async function invokeAll(st: Invocation, children: Wait<unknown>[]): Promise<void> {
  const first = innerOf(children[0]!).spec.name;
  if (children.length > MAX_INVOKE_ALL) {
    throw new NonRetryableError(`step: waitAll: ${children.length} child runs, more than the ${MAX_INVOKE_ALL} one waitAll starts at once`);
  }
  const calls: InvokeCall[] = children.map((c) => {
    const aw = innerOf(c).spec.await(0);
    const call: InvokeCall = { function: aw.function!, input: aw.input };
    if (aw.detached) call.detached = true;
    return call;
  });
  const n = st.next("invoke", first, children.length, true);
  if (!n) return never();
  const journaled = n.entries.filter((e) => e).length;
  if (journaled === 0) return st.halt(suspended({ type: "invoke_all", seq: n.seq, name: first, calls }));
  if (journaled < children.length) {
    return st.halt(retry("replay", `invoke_all ${q(first)}: ${journaled} of the ${children.length} children at seqs ${n.seq} to ${n.seq + children.length - 1} are journaled; the run is called again once all are`));
  }
  children.forEach((c, k) => {
    const e = n.entries[k]!;
    try {
      settle(c, { ok: true, value: innerOf(c).spec.decode(e, e.output) });
    } catch (error) {
      settle(c, { ok: false, error });
    }
  });
}
