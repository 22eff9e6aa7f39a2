// An in-memory journal with the gateway's rules for a checkpoint: shared by the public
// test harness (testing.ts) and the SDK's own fake gateway (test/gateway.ts).
import { toMs } from "./duration.js";
import type { JournalEntry } from "./protocol.js";

/** What appendEntry needs besides the entry: the clock, and a callback's output. */
export interface AppendContext {
  /** The time now, in milliseconds (a sleep's wake time counts from it). */
  now: number;
  /** The output journaled for a callback entry at seq (its url, token and expiry). */
  callbackOutput(e: JournalEntry): unknown;
}

/**
 * Journals e in j (kept sorted by seq) as the gateway does, and answers 200, or the code
 * and problem body of an entry it refuses: 409 (type nondeterminism) for another entry
 * at its seq, 400 for a seq out of order under its window. An entry already journaled
 * at its seq with its kind and name is accepted again and changes nothing. A sleep is
 * journaled with its wake time (its until, or now plus its output's duration) and no
 * output; a callback with callbackOutput's.
 */
export function appendEntry(j: JournalEntry[], e: JournalEntry, ctx: AppendContext): [number, string] {
  const have = j.find((x) => x.seq === e.seq);
  if (have) {
    if (have.kind !== e.kind || have.name !== e.name) {
      return [409, JSON.stringify({ type: "nondeterminism", detail: `the journal holds ${have.kind} ${have.name}` })];
    }
    return [200, ""];
  }
  // The gateway's window rule: in order (window 1), right after seq - 1 and not into a
  // hole below later entries; with a window W, one of the W seqs below it journaled, or
  // seq <= W.
  const w = e.window ?? 1;
  const ok = w === 1
    ? (e.seq === 1 || j.some((x) => x.seq === e.seq - 1)) && !j.some((x) => x.seq > e.seq)
    : e.seq <= w || j.some((x) => x.seq >= e.seq - w && x.seq < e.seq);
  if (!ok) return [400, JSON.stringify({ detail: `seq ${e.seq} is out of order (window ${w})` })];
  const stored = { ...e };
  delete stored.window;
  if (e.kind === "sleep") {
    const d = (e.output as { duration?: string } | undefined)?.duration;
    stored.until = e.until ?? new Date(ctx.now + (d ? toMs(d, "duration") : 0)).toISOString();
    delete stored.output;
  }
  if (e.kind === "callback") stored.output = ctx.callbackOutput(e);
  j.push(stored);
  j.sort((a, b) => a.seq - b.seq);
  return [200, ""];
}
