// Steps that failed and have not succeeded since: journaled failures with no entry yet.

/**
 * pendingRetries returns r's steps that failed and have no journal entry, by seq: each
 * {seq, name, attempt (the last failed one), failures}. Invocation failures (seq 0) are
 * not steps, and are left out.
 */
export function pendingRetries(r) {
  const done = new Set(r.journal.map((e) => e.seq));
  const by = new Map();
  for (const f of r.failures) {
    if (f.seq === 0 || done.has(f.seq)) continue;
    const p = by.get(f.seq) || { seq: f.seq, name: f.name || `step ${f.seq}`, attempt: 0, failures: [] };
    p.attempt = Math.max(p.attempt, f.attempt);
    p.failures.push(f);
    by.set(f.seq, p);
  }
  return [...by.values()].sort((a, b) => a.seq - b.seq);
}
