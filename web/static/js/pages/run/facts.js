// The facts card: the run's function and revision, its times, its counts (invocations,
// failed invocations, recoveries), and where it
// came from (idempotency key, parent, rerun, who cancelled it).

import { h, fmtTime, fmtDateTime, elapsed, shortID, countdown } from "../../dom.js";

const ENDED = new Set(["completed", "failed", "cancelled"]);

/**
 * facts returns the facts card of r. fn is the function's current revision ({revision}),
 * or null until it is known; a run on an older one says so.
 */
export function facts(r, fn) {
  const rows = [
    ["Function", h("span", null, h("a", { href: `#/runs?function=${encodeURIComponent(r.function)}` }, r.function))],
    ["Revision", h("span", null, h("span", { class: "mono" }, `v${r.revision}`),
      fn && fn.revision !== r.revision ? h("span", { class: "muted" }, ` (current: v${fn.revision})`) : null)],
    ["Created", time(r.created_at)],
    ["Started", r.started_at ? time(r.started_at) : h("span", { class: "muted" }, "not yet")],
    ["Finished", r.finished_at ? time(r.finished_at) : h("span", { class: "muted" }, "—")],
    ["Duration", r.started_at ? elapsed(r.started_at, r.finished_at) : h("span", { class: "muted" }, "—")],
    ["Invocations", h("span", { class: "num", "data-testid": "invocations",
      title: "Times the gateway called the function for this run: one to start, one more after each " +
        "sleep, wait, child run or step retry, failed invocation or recovery." }, String(r.invocations))],
    ["Failed invocations", h("span", { class: "num", "data-testid": "failed-invocations",
      title: "Invocations that failed as a whole: no answer (connection, timeout), an HTTP status other than 200, " +
        "or an answer or checkpoint that cannot be applied. Not a step's failed attempts, not recoveries." },
      String(r.failed_invocations))],
  ];
  if (r.priority && r.priority !== 2) {
    rows.push(["Priority", h("span", { class: "num", "data-testid": "priority",
      title: "1 runs first, 4 last (2 is the default)." }, String(r.priority))]);
  }
  if (r.held && !ENDED.has(r.status)) {
    rows.push(["Held", h("span", { "data-testid": "held",
      title: "Why the run has not started yet: flow control holds it back." }, r.held)]);
  }
  if (r.deadline) {
    rows.push(["Deadline", h("span", { "data-testid": "deadline",
      title: "Past it the run fails with deadline_exceeded, whatever it is doing." }, time(r.deadline),
      ENDED.has(r.status) ? null : h("span", { class: "muted" }, " (", countdown(r.deadline), ")"))]);
  }
  if (r.recoveries > 0) {
    rows.push(["Recoveries", h("span", { class: "num", "data-testid": "recoveries",
      title: "Times the run's gateway died, stopped or lost the database during its invocation, " +
        "and another gateway took it over, in the run's lifetime. Not failed invocations." }, String(r.recoveries))]);
  }
  if (r.idempotency_key) rows.push(["Idempotency key", h("span", { class: "mono wrap" }, r.idempotency_key)]);
  if (r.parent_id) {
    rows.push(["Parent run", h("span", null, runLink(r.parent_id),
      r.parent_name ? h("span", { class: "muted" }, ` · step ${r.parent_seq} ${r.parent_name}`) : null)]);
  }
  if (r.rerun_of) {
    rows.push(["Rerun of", h("span", { "data-testid": "rerun-of" }, runLink(r.rerun_of),
      h("span", { class: "muted" }, ` · by ${r.identity.subject}`))]);
  }
  if (r.cancelled_by) {
    rows.push(["Cancelled by", h("span", { "data-testid": "cancelled-by", class: "mono" }, r.cancelled_by.subject,
      h("span", { class: "muted" }, ` (${(r.cancelled_by.roles || []).join(", ") || "no roles"})`))]);
  }
  return h("dl", { class: "facts card" }, rows.map(([k, v]) => h("div", { class: "fact" }, h("dt", null, k), h("dd", null, v))));
}

function time(t) {
  return h("span", { title: fmtDateTime(t) }, fmtTime(t));
}

function runLink(id) {
  return h("a", { href: `#/runs/${id}`, class: "mono" }, shortID(id));
}
