// The waterfall: one row for the run, one per journal entry or step awaiting a retry,
// and one for failed invocations, each bar on a shared time axis.

import { h, icon, fmtDuration, fmtTime, countdown, elapsed, TERMINAL, ms } from "../../dom.js";
import { pendingRetries } from "./pending.js";
import { entryRow } from "./entry.js";
import { item, bar, marker, failureTable, kv } from "./row.js";

/**
 * timeline returns the waterfall of r. open holds the keys of the rows the reader
 * opened; it is kept up to date, so that a refresh keeps them open. Call layout to
 * place the bars.
 */
export function timeline(r, open) {
  const failuresOf = (seq) => r.failures.filter((f) => f.seq === seq);
  const items = [];
  for (const e of r.journal) items.push({ seq: e.seq, key: `e${e.seq}`, entry: e, failures: failuresOf(e.seq) });
  for (const p of pendingRetries(r)) items.push({ seq: p.seq, key: `p${p.seq}`, pending: p, failures: p.failures });
  items.sort((a, b) => a.seq - b.seq);
  const invocationFailures = failuresOf(0);

  const rows = [runRow(r)];
  for (const it of items) rows.push(it.entry ? entryRow(r, it) : pendingRow(r, it));
  if (invocationFailures.length) rows.push(invocationRow(invocationFailures));
  for (const d of rows) remember(d, open);

  const ticks = h("div", { class: "wf-ticks" }, [0, 1, 2, 3, 4].map((i) => h("span", { class: "wf-tick", style: `left:${i * 25}%` })));
  const empty = r.journal.length === 0 && r.failures.length === 0
    ? h("div", { class: "wf-empty muted" }, TERMINAL.has(r.status) ? "This run journaled no steps." : r.started_at ? "No step has finished yet." : "Waiting for a worker to start this run.")
    : null;
  const toggleAll = (on) => {
    for (const d of rows) {
      d.open = on;
      if (on) open.add(d.dataset.key);
      else open.delete(d.dataset.key);
    }
  };
  return h("section", { class: "card timeline", "data-testid": "timeline" },
    h("header", { class: "panel-head" },
      h("h3", null, "Timeline"),
      h("div", { class: "legend" },
        legend("ok", "step"), legend("err", "failed"), legend("sleep", "sleep"), legend("mark", "failed attempt"), legend("wait", "waiting")),
      h("div", { class: "panel-tools" },
        h("button", { type: "button", class: "btn ghost small", onclick: () => toggleAll(true) }, "Expand all"),
        h("button", { type: "button", class: "btn ghost small", onclick: () => toggleAll(false) }, "Collapse"))),
    h("div", { class: "wf" },
      h("div", { class: "wf-row wf-axis" }, h("div", { class: "wf-label muted" }, "Step"), h("div", { class: "wf-track" }, ticks), h("div", { class: "wf-dur muted" }, "Duration")),
      rows,
      empty));
}

/**
 * layout places every bar, marker and tick of timeline el (of run r) on the axis from
 * the run's creation to its end (or now, or the wake time if later). A run that has not
 * ended needs it again each second.
 */
export function layout(el, r) {
  const now = Date.now();
  const t = (s) => (s === "now" ? now : ms(s));
  const els = el.querySelectorAll(".wf [data-a]");
  const t0 = ms(r.created_at);
  let t1 = r.finished_at ? ms(r.finished_at) : now;
  for (const e of els) {
    const a = t(e.dataset.a);
    const b = e.dataset.b ? t(e.dataset.b) : a;
    if (Number.isFinite(a)) t1 = Math.max(t1, a);
    if (Number.isFinite(b)) t1 = Math.max(t1, b);
  }
  const span = Math.max(t1 - t0, 1);
  const pct = (v) => Math.min(100, Math.max(0, ((v - t0) / span) * 100));
  for (const e of els) {
    const a = pct(t(e.dataset.a));
    e.style.left = a + "%";
    if (e.dataset.b) e.style.width = Math.max(0, pct(t(e.dataset.b)) - a) + "%";
  }
  el.querySelectorAll(".wf-tick").forEach((tick, i) => {
    tick.textContent = i === 0 ? "0" : "+" + fmtDuration((span * i) / 4);
    tick.classList.toggle("end", i === 4);
  });
}

// remember opens row d if the reader had, and records when the reader opens or closes it.
function remember(d, open) {
  const key = d.dataset.key;
  d.open = open.has(key);
  d.addEventListener("toggle", () => { if (d.open) open.add(key); else open.delete(key); });
}

function legend(cls, text) {
  return h("span", { class: "legend-item" }, h("i", { class: `lg ${cls}` }), text);
}

// runRow is the run's own row: queued, then running until it ends, and its wake time.
function runRow(r) {
  const end = r.finished_at || "now";
  const track = [];
  if (r.started_at) {
    track.push(bar("queued", r.created_at, r.started_at, `queued ${fmtDuration(ms(r.started_at) - ms(r.created_at))}`));
    track.push(bar(`run s-${r.status}`, r.started_at, end, `${r.status}`));
  } else {
    track.push(bar("queued", r.created_at, end, "queued"));
  }
  if (r.wake_at && !TERMINAL.has(r.status)) track.push(h("div", { class: "wf-wake", "data-a": r.wake_at, title: `wakes at ${fmtTime(r.wake_at)}` }));
  return item("run", {
    cls: "wf-run",
    testid: "wf-run",
    label: h("span", { class: "wf-name" }, h("strong", null, "run"), h("span", { class: "muted" }, ` · ${r.status}`)),
    track,
    dur: r.started_at ? elapsed(r.started_at, r.finished_at) : h("span", { class: "muted" }, "—"),
    detail: h("dl", { class: "kv" },
      kv("Created", fmtTime(r.created_at)),
      kv("Queued for", r.started_at ? fmtDuration(ms(r.started_at) - ms(r.created_at)) : "still queued"),
      kv("Started", r.started_at ? fmtTime(r.started_at) : "—"),
      kv("Finished", r.finished_at ? fmtTime(r.finished_at) : "—"),
      kv("Invocations", String(r.invocations)),
      kv("Failed invocations", String(r.failed_invocations)),
      r.wake_at ? kv("Wakes at", fmtTime(r.wake_at)) : null),
  });
}

// pendingRow is a step that failed and awaits its next attempt (or never got one).
function pendingRow(r, { key, pending: p, failures }) {
  const track = failures.map(marker);
  const lastFail = failures[failures.length - 1];
  const retrying = !TERMINAL.has(r.status);
  if (retrying && r.wake_at) track.unshift(h("div", { class: "wf-bar wait", "data-a": lastFail.created_at, "data-b": r.wake_at, title: `next attempt at ${fmtTime(r.wake_at)}` }));
  return item(key, {
    testid: `step-${p.name}`,
    cls: "is-pending",
    label: h("span", { class: "wf-name" },
      h("span", { class: "seq" }, String(p.seq)), icon("zap", 13), h("span", { class: "name" }, p.name),
      h("span", { class: "tag warn" }, retrying ? "retrying" : `${failures.length} failed`)),
    track,
    dur: retrying && r.wake_at ? h("span", { class: "wake" }, "retry ", countdown(r.wake_at)) : h("span", { class: "muted" }, "—"),
    detail: [
      h("p", { class: "muted" }, retrying
        ? `Attempt ${p.attempt} failed; attempt ${p.attempt + 1} ${r.wake_at ? "runs at " + fmtTime(r.wake_at) : "is due"}.`
        : "The run ended before this step succeeded."),
      failureTable(failures),
    ],
  });
}

// invocationRow gathers the invocations that failed as a whole.
function invocationRow(failures) {
  return item("inv", {
    testid: "invocation-failures",
    cls: "is-failed",
    label: h("span", { class: "wf-name" }, icon("alert", 13), h("span", { class: "name" }, "invocation"), h("span", { class: "tag err" }, `${failures.length} failed`)),
    track: failures.map(marker),
    dur: h("span", { class: "muted" }, "—"),
    detail: [h("p", { class: "muted" }, "Invocations that failed as a whole (the function answered wrongly, timed out or was unreachable)."), failureTable(failures)],
  });
}
