// step.waitFirst and step.waitAll: several waits (wait.ts) at once, or the first of
// several parallel steps.
import { toMs } from "./duration.js";
import { NonRetryableError, TimedOutError } from "./errors.js";
import { type Invocation, never, q, retry, suspended } from "./invocation.js";
import type { Await, InvokeCall, JournalEntry } from "./protocol.js";
import { innerOf, settle, type Settled, Wait, type WaitSpec } from "./wait.js";

/**
 * The most waits one waitFirst gives the gateway (journal.MaxAlternatives): timers do not
 * count, and receives of one topic count once.
 */
export const MAX_ALTERNATIVES = 8;

/** The most child runs one waitAll starts at once (journal.MaxInvokeAll). */
export const MAX_INVOKE_ALL = 64;

/**
 * The wait_any timeout of a waitFirst with no deadline among its waits: the longest the
 * gateway allows (invoker.MaxSleep, 10 years).
 */
export const NO_TIMER_TIMEOUT = "87600h";

/** NO_TIMER_TIMEOUT in milliseconds. */
const MAX_TIMEOUT_MS = 87600 * 3_600_000;

/** The values of waits, in order. */
export type Values<W extends readonly unknown[]> = { -readonly [K in keyof W]: Awaited<W[K]> };

/**
 * When a wait among a waitFirst's comes by itself: a timer passes, or a wait's own
 * timeout ends it. after counts (ms) from when the wait is stored (step.sleep, a timeout
 * option); at is a time (ms since the epoch, step.sleepUntil).
 */
interface Deadline {
  i: number;
  after?: number;
  at?: number;
}

/** The deadline of spec, the wait at index i, if it has one. */
function deadlineOf(i: number, spec: WaitSpec<unknown>): Deadline | undefined {
  if (spec.role === "timer") {
    const aw = spec.await(0);
    if (aw.until !== undefined) return { i, at: Date.parse(aw.until) };
    return { i, after: toMs(aw.duration ?? 0, `sleep ${q(spec.name)}: duration`) };
  }
  if (spec.timeout !== undefined) return { i, after: toMs(spec.timeout, `${spec.kind} ${q(spec.name)}: timeout`) };
  return undefined;
}

/**
 * The deadline of ds (not empty) that passes first when the wait is stored at from (ms
 * since the epoch), the first in order on a tie. All durations, or all times, compare
 * alike whatever from is.
 */
function earliest(ds: readonly Deadline[], from: number): Deadline {
  const when = (d: Deadline) => d.at ?? from + d.after!;
  return ds.reduce((first, d) => (when(d) < when(first) ? d : first));
}

/**
 * step.waitFirst: the index of the first of waits to come. See Step.waitFirst.
 * journal runs pick as a step called name (lazy: its checkpoint may wait for the answer)
 * and gives its journaled value: a step promise race's chosen index, or the time a
 * waitFirst of durations and times waits from.
 */
export async function waitFirst(
  st: Invocation,
  name: string,
  waits: readonly PromiseLike<unknown>[],
  journal: (pick: () => unknown, lazy?: boolean) => Promise<unknown>,
): Promise<number> {
  const what = `step: waitFirst ${q(name)}`;
  if (waits.length === 0) throw new NonRetryableError(`${what}: no waits: give it 1 or more`);
  const gateway = waits.map((w) => w instanceof Wait);
  if (!gateway.some((g) => g)) {
    // Parallel steps, running in this process: the first to settle, journaled.
    return (await journal(() => Promise.race(waits.map((p, i) => Promise.resolve(p).then(() => i, () => i))))) as number;
  }
  const step = gateway.indexOf(false);
  if (step >= 0) {
    throw new NonRetryableError(
      `${what}: waits[${step}] is a promise (a step running in this process) and waits[${gateway.indexOf(true)}] a wait the gateway keeps (a sleep, an event, a message, a callback): one waitFirst cannot take the first of both, as the gateway resumes the run for its waits only after the invocation has answered: await the steps first`,
    );
  }
  const ws = waits as readonly Wait<unknown>[];
  const alts: number[] = []; // the waits in the wait_any's of, by index in waits
  const ds: Deadline[] = [];
  const topics = new Set<string>();
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
    const d = deadlineOf(i, spec);
    if (d) ds.push(d);
    if (spec.role === "timer") continue;
    const aw = spec.await(0);
    if (aw.type === "receive" && aw.topic !== undefined) {
      if (topics.has(aw.topic)) continue; // the first receive of the topic is its alternative
      topics.add(aw.topic);
    }
    alts.push(i);
  }
  if (alts.length > MAX_ALTERNATIVES) {
    throw new NonRetryableError(`${what}: ${alts.length} waits besides timers (receives of one topic counted once), more than the gateway's limit of ${MAX_ALTERNATIVES}`);
  }
  // The deadlines are compared from a time: any one when they are all durations from the
  // wait or all times (0), the journaled time it waits from when both.
  const durations = ds.some((d) => d.at === undefined);
  const times = ds.some((d) => d.at !== undefined);
  const from = durations && times ? Date.parse((await journal(() => new Date().toISOString(), true)) as string) : 0;
  if (alts.length === 0) {
    const first = earliest(ds, from).i; // timers alone: the earliest's wait
    await ws[first]!;
    return first;
  }

  const n = st.next("wait_any", name, 1, true);
  if (!n) return never();
  const e = n.entries[0];
  if (!e) {
    const of: Await[] = alts.map((i) => {
      const aw: Await = { ...innerOf(ws[i]!).spec.await(n.seq), name };
      delete aw.timeout; // an alternative has the wait_any's
      return aw;
    });
    let timeout = NO_TIMER_TIMEOUT;
    if (ds.length > 0) {
      const d = earliest(ds, from);
      const left = d.at !== undefined ? d.at - Date.now() : times ? from + d.after! - Date.now() : d.after!;
      if (left < MAX_TIMEOUT_MS) timeout = `${Math.max(1000, Math.ceil(left))}ms`;
    }
    return st.halt(suspended({ type: "wait_any", seq: n.seq, name, of, timeout }));
  }
  return chosen(st, e, ws, alts, ds.length > 0 ? earliest(ds, from).i : -1);
}

/** w's outcome from out, the output its own entry would hold, journaled in e. */
function decoded(w: Wait<unknown>, e: JournalEntry, out: unknown): Settled<unknown> {
  try {
    return { ok: true, value: innerOf(w).spec.decode(e, out) };
  } catch (error) {
    return { ok: false, error };
  }
}

/**
 * Which wait the wait_any journaled at e chose, given its outcome; first is the index of
 * the earliest deadline (-1: none), the one chosen when the wait timed out.
 */
function chosen(st: Invocation, e: JournalEntry, ws: readonly Wait<unknown>[], alts: number[], first: number): Promise<number> | number {
  const got = (e.output ?? {}) as { timed_out?: boolean; index?: number; kind?: string; output?: unknown };
  if (got.timed_out) {
    if (first < 0) throw new TimedOutError(e.seq, e.name); // after NO_TIMER_TIMEOUT
    const w = ws[first]!;
    // A timer passed; a wait's own timeout ends it as it would alone.
    settle(w, innerOf(w).spec.role === "timer" ? { ok: true, value: undefined } : decoded(w, e, { timed_out: true }));
    return first;
  }
  const i = alts[got.index ?? -1];
  const spec = i === undefined ? undefined : innerOf(ws[i]!).spec;
  if (i === undefined || !spec || got.kind !== spec.kind) {
    const msg = `step ${e.seq}: code waits for the first of ${alts.length} waits in wait_any ${q(e.name)} but the journal holds alternative ${got.index} (${got.kind})`;
    return st.halt(st.diverged(e.seq, { kind: got.kind ?? e.kind, name: e.name }, { kind: spec?.kind ?? e.kind, name: e.name }, msg));
  }
  settle(ws[i]!, decoded(ws[i]!, e, got.output));
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
