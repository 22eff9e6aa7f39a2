// One journal entry's row of the waterfall: a step (with its failed attempts before
// it), a sleep, a child run's outcome, or a message sent or received (with its sender).

import { h, icon, fmtDuration, fmtTime, countdown, TERMINAL, ms } from "../../dom.js";
import { jsonPanel, jsonView } from "../../json.js";
import { item, bar, marker, failureTable, kv } from "./row.js";
import { mayRerun, rerunFrom } from "./actions.js";

/** entryRow returns the row of journal entry e of run r; failures are e's failed attempts. */
export function entryRow(r, { key, entry: e, failures }) {
  const start = e.started_at || e.finished_at;
  const track = [];
  if (failures.length && start) {
    track.push(h("div", { class: "wf-retries", "data-a": failures[0].created_at, "data-b": start, title: `${failures.length} failed attempt${failures.length === 1 ? "" : "s"} before this outcome` }));
  }
  const { bars, dur } = e.kind === "sleep" ? sleepBar(r, e) : stepBar(e, start);
  track.push(...bars, ...failures.map(marker));
  return item(key, {
    testid: `step-${e.name}`,
    cls: e.error ? "is-failed" : "",
    label: label(e, failures),
    track,
    dur,
    detail: detail(r, e, failures),
  });
}

// sleepBar is a sleep's bar, active while the run sleeps in it, and its duration.
function sleepBar(r, e) {
  const from = e.started_at || e.finished_at || r.created_at;
  const sleeping = !TERMINAL.has(r.status) && e.until && ms(e.until) > Date.now();
  return {
    bars: [bar(`sleep${sleeping ? " active" : ""}`, from, e.until || from, `sleep until ${fmtTime(e.until)}`)],
    dur: sleeping ? h("span", { class: "wake" }, "wakes ", countdown(e.until)) : h("span", { class: "num" }, fmtDuration(ms(e.until) - ms(from))),
  };
}

// stepBar is a step's bar from start, and its duration.
function stepBar(e, start) {
  if (!start) return { bars: [], dur: h("span", { class: "muted" }, "—") };
  return {
    bars: [bar(e.error ? "err" : "ok", start, e.finished_at || start, `${e.name}: ${fmtDuration(ms(e.finished_at) - ms(start))}`)],
    dur: h("span", { class: "num" }, e.finished_at && e.started_at ? fmtDuration(ms(e.finished_at) - ms(e.started_at)) : "—"),
  };
}

// messageFacts are the facts of the message a receive entry took, or of a send's target.
function messageFacts(e) {
  const m = e.kind === "receive" && e.output && e.output.message;
  if (m) {
    const who = m.identity ? `${m.identity.subject} (tenant ${m.identity.tenant}${(m.identity.roles || []).length ? `, roles ${m.identity.roles.join(", ")}` : ""})` : "—";
    return [kv("Message", m.id), kv("Topic", m.topic), kv("Sender", who), m.sent_at ? kv("Sent", fmtTime(m.sent_at)) : null];
  }
  if (e.kind === "send" && e.output && e.output.run_id) {
    return [kv("To run", h("a", { href: `#/runs/${e.output.run_id}`, class: "mono" }, e.output.run_id)), kv("Topic", e.output.topic)];
  }
  return [];
}

function label(e, failures) {
  const isSleep = e.kind === "sleep";
  const attempt = e.attempt || 1;
  return h("span", { class: "wf-name" },
    h("span", { class: "seq" }, String(e.seq)),
    icon(isSleep ? "moonSleep" : "zap", 13),
    h("span", { class: "name", title: e.name }, e.name),
    isSleep ? h("span", { class: "tag sleep" }, "sleep") : null,
    e.kind === "invoke" ? h("span", { class: "tag", title: "the outcome of a child run" }, "invoke") : null,
    e.kind === "wait_event" ? waitTag(e) : null,
    e.kind === "value" ? h("span", { class: "tag", title: "a value the run published" }, "value") : null,
    e.kind === "event" ? h("span", { class: "tag", title: "an event the run sent" }, "event") : null,
    e.kind === "send" ? h("span", { class: "tag", title: "a message this run sent to another run" }, "send") : null,
    e.kind === "receive" ? h("span", { class: "tag", title: "a message this run received" }, "receive") : null,
    e.kind === "reply" ? h("span", { class: "tag", "data-testid": "entry-reply", title: "the run's reply to a request (named after the request's id)" }, "reply") : null,
    e.kind === "callback" ? h("span", { class: "tag", title: "a callback the run made (its token is not shown)" }, "callback") : null,
    e.kind === "await_callback" ? callbackTag(e) : null,
    e.kind === "wait_any" ? anyTag(e) : null,
    e.kind === "patch" ? h("span", { class: "tag", title: "a patch marker: the run took the patched code path (step.Patched)" }, "patch") : null,
    e.copied ? h("span", { class: "tag", "data-testid": "entry-copied", title: "copied from the rerun run, replayed without running again" }, "copied") : null,
    sender(e),
    attempt > 1 || failures.length ? h("span", { class: "tag warn", title: `${failures.length} failed attempt(s)` }, `attempt ${attempt}`) : null,
    e.error ? h("span", { class: "tag err" }, "failed") : null);
}

// waitTag says how a wait for an event ended: the event received, or its timeout.
function waitTag(e) {
  const ev = e.output && e.output.event;
  if (!ev) return h("span", { class: "tag warn", "data-testid": "wait-timed-out" }, "timed out");
  const who = ev.identity && ev.identity.subject;
  return h("span", { class: "tag", "data-testid": "wait-received", title: `event ${ev.id}${who ? ` sent by ${who}` : ""}` },
    "event", who ? ` from ${who}` : "");
}

// callbackTag says how a wait for a callback ended: resolved or rejected, by whom, or its
// timeout.
function callbackTag(e) {
  const o = e.output || {};
  if (o.timed_out) return h("span", { class: "tag warn", "data-testid": "callback-timed-out" }, "timed out");
  const who = o.resolved_by ? o.resolved_by.subject : "the URL's holder";
  return h("span", { class: o.error ? "tag err" : "tag", "data-testid": "callback-resolved", title: `${o.error ? "rejected" : "resolved"} by ${who}` },
    o.error ? "rejected" : "resolved", ` by ${who}`);
}

// anyTag says which alternative of a wait_any came first, tagged as its own entry would
// be, or that none came in time.
function anyTag(e) {
  const o = e.output || {};
  if (o.timed_out) return h("span", { class: "tag warn", "data-testid": "any-timed-out" }, "timed out");
  const inner = { ...e, kind: o.kind, output: o.output };
  const tag = { wait_event: waitTag, await_callback: callbackTag }[o.kind];
  return h("span", { "data-testid": "any-chosen", title: `alternative ${o.index} came first` },
    h("span", { class: "tag" }, `first: ${o.kind}`), tag ? tag(inner) : sender(inner));
}

// sender names who sent the message a receive entry holds, or null.
function sender(e) {
  const m = e.kind === "receive" && e.output && e.output.message;
  if (!m) return null;
  const who = (m.identity && m.identity.subject) || "?";
  return h("span", { class: "muted", "data-testid": "message-sender", title: m.source_run_id ? `sent by run ${m.source_run_id}` : "sent through the API" },
    "from ", h("strong", null, who),
    m.source_run_id ? h("span", null, " (run ", h("a", { href: `#/runs/${m.source_run_id}`, class: "mono" }, m.source_run_id.slice(0, 8)), ")") : null);
}

function detail(r, e, failures) {
  const isSleep = e.kind === "sleep";
  const out = [
    h("dl", { class: "kv" },
      kv("Seq", String(e.seq)),
      kv("Kind", e.kind),
      e.started_at ? kv("Started", fmtTime(e.started_at)) : null,
      e.finished_at ? kv("Finished", fmtTime(e.finished_at)) : null,
      isSleep ? kv("Until", e.until ? fmtTime(e.until) : "—") : kv("Attempt", String(e.attempt || 1)),
      ...messageFacts(e)),
  ];
  // A sleep has no output; its wake time is the whole story.
  if (!isSleep && e.error) {
    out.push(h("div", { class: "step-error", "data-testid": "step-error" }, h("div", { class: "label" }, "Error"), jsonView(e.error)));
  } else if (!isSleep) {
    out.push(jsonPanel("Output", e.output, { testid: "step-output", empty: "no output (null)", open: 3 }));
  }
  if (failures.length) out.push(failureTable(failures));
  if (mayRerun(r)) {
    out.push(h("div", { class: "page-actions" },
      h("button", { type: "button", class: "btn small", "data-testid": `rerun-from-${e.seq}`, title: "a new run that replays the entries before this one and runs this one onwards again", onclick: () => rerunFrom(r, e) },
        icon("rerun", 12), "Rerun from here")));
  }
  return out;
}
