// One run: its facts, a waterfall of its journal, its input, output and identity, and the
// cancel and rerun actions. It follows the run's stream and refetches on each change.

import {
  h, icon, replace, badge, copyButton, fmtDuration, fmtTime, fmtDateTime, countdown, elapsed,
  shortID, navigate, debounce, TERMINAL, ms,
} from "../dom.js";
import { request, streamRuns, can, APIError } from "../api.js";
import { jsonPanel, jsonView } from "../json.js";
import { errorBox, confirmAction, toast, errorMessage } from "../dialog.js";
import { liveIndicator } from "./live.js";

/** runPage mounts run id into el; it returns its cleanup. */
export function runPage(el, id) {
  let run = null;
  let last = "";
  let fn = null; // the function's current revision, to tell whether the run is on it
  let gone = false;
  let poll = 0;
  let clock = 0;
  const open = new Set(); // timeline rows the reader opened, kept across refreshes
  const live = liveIndicator();
  const body = h("div", { class: "run-page" }, h("div", { class: "skeleton tall" }, h("div", { class: "sk-row" }, h("i"), h("i"))));

  const crumb = h("span", { class: "crumb-here" }, h("span", { class: "mono" }, shortID(id)));
  replace(el,
    h("nav", { class: "crumbs", "aria-label": "Breadcrumb" },
      h("a", { href: "#/runs" }, icon("arrowLeft", 14), "Runs"),
      h("span", { class: "sep" }, "/"),
      crumb),
    body);

  async function load() {
    clearTimeout(poll);
    try {
      const r = await request(`/v1/runs/${encodeURIComponent(id)}`);
      // The journal comes a page at a time; a run's journal is bounded, and so is this.
      for (let pages = 1; r.journal_next_cursor && pages < 50 && !gone; pages++) {
        const next = await request(`/v1/runs/${encodeURIComponent(id)}?journal_cursor=${encodeURIComponent(r.journal_next_cursor)}`);
        r.journal.push(...next.journal);
        r.failures.push(...next.failures);
        r.journal_next_cursor = next.journal_next_cursor;
      }
      if (gone) return;
      const j = JSON.stringify(r);
      if (j !== last) {
        last = j;
        run = r;
        render();
        if (!fn) loadFunction();
      }
    } catch (e) {
      if (gone) return;
      if (!run) replace(body, loadError(e));
      else toast(`Couldn't refresh the run: ${errorMessage(e)}`, "error");
    }
    // Steps finish without a status change (and so without an event); while the run is
    // running, look again now and then.
    if (run && run.status === "running") poll = setTimeout(load, 2000);
  }
  const refresh = debounce(load, 60);

  async function loadFunction() {
    try {
      fn = await request(`/v1/functions/${encodeURIComponent(run.function)}`);
      if (!gone && fn.revision !== run.revision) render();
    } catch {
      fn = { revision: run.revision }; // deleted, or no functions:read: nothing to compare
    }
  }

  function loadError(e) {
    if (e instanceof APIError && (e.status === 404 || e.status === 400)) {
      return h("div", { class: "empty", "data-testid": "run-not-found" },
        h("h2", null, "Run not found"),
        h("p", null, "There is no run ", h("code", null, id), " in your tenant."),
        h("p", null, h("a", { href: "#/runs" }, "Back to the runs")));
    }
    return errorBox("Couldn't load this run", e, h("button", { type: "button", class: "btn small", onclick: load }, icon("refresh", 13), "Try again"));
  }

  function render() {
    const r = run;
    replace(crumb,
      h("a", { href: `#/runs?function=${encodeURIComponent(r.function)}` }, r.function),
      h("span", { class: "sep" }, "/"),
      h("span", { class: "mono" }, shortID(r.id)));
    const actions = h("div", { class: "page-actions" });
    if (!TERMINAL.has(r.status) && can("runs:manage")) {
      actions.append(h("button", { type: "button", class: "btn danger-outline", "data-testid": "cancel-run", onclick: cancel }, icon("stop", 13), "Cancel run"));
    }
    if (TERMINAL.has(r.status) && can("runs:invoke")) {
      actions.append(h("button", { type: "button", class: "btn", "data-testid": "rerun-run", onclick: rerun }, icon("rerun", 14), "Rerun"));
    }
    replace(body,
      h("div", { class: "page-head run-head" },
        h("div", null,
          h("div", { class: "page-title" },
            h("h1", null, r.function),
            h("span", { "data-testid": "run-status" }, badge(r.status)),
            TERMINAL.has(r.status) ? null : live.el),
          h("div", { class: "run-id" }, h("span", { class: "mono", "data-testid": "run-id" }, r.id), copyButton(r.id, "Copy run id"))),
        actions),
      waiting(r),
      r.error ? errorCallout("The run failed", r.error) : null,
      facts(r),
      timeline(r),
      h("div", { class: "grid-2" },
        jsonPanel("Input", r.input, { testid: "run-input" }),
        r.error && r.output === undefined
          ? h("section", { class: "panel", "data-testid": "run-error" },
              h("header", { class: "panel-head" }, h("h3", null, "Error")),
              h("div", { class: "panel-body" }, jsonView(r.error)))
          : jsonPanel("Output", r.output, { testid: "run-output", empty: TERMINAL.has(r.status) ? "no output" : "not finished yet" })),
      identity(r.identity));
    layout();
    clearInterval(clock);
    if (!TERMINAL.has(r.status)) clock = setInterval(layout, 1000);
  }

  // waiting says what a scheduled or suspended run waits on, and when it wakes.
  function waiting(r) {
    if (r.status !== "suspended" && r.status !== "scheduled") return null;
    const lastEntry = r.journal[r.journal.length - 1];
    const pending = pendingRetries(r)[0];
    let what;
    if (r.status === "scheduled") what = "Scheduled to start";
    else if (pending) what = h("span", null, "Retrying step ", h("strong", null, pending.name), ` (attempt ${pending.attempt + 1})`);
    else if (lastEntry && lastEntry.kind === "sleep" && lastEntry.until && ms(lastEntry.until) > ms(r.created_at)) {
      what = h("span", null, "Sleeping in ", h("strong", null, lastEntry.name));
    } else if (r.status === "suspended" && !r.wake_at) what = "Waiting for a child run to end";
    else what = "Waiting";
    const wake = r.wake_at || (lastEntry && lastEntry.kind === "sleep" ? lastEntry.until : null);
    return h("div", { class: "callout waiting", "data-testid": "waiting" },
      icon("clock", 16),
      h("div", null, what,
        wake ? h("span", { class: "muted" }, " · wakes at ", h("time", { datetime: wake, title: fmtDateTime(wake) }, fmtTime(wake)), " (", countdown(wake), ")") : null));
  }

  function errorCallout(title, e) {
    return h("div", { class: "callout error", "data-testid": "run-error-callout" },
      icon("alert", 16),
      h("div", null,
        h("strong", null, title), " ", h("span", { class: "tag err" }, e.type),
        e.retryable === false ? h("span", { class: "tag" }, "not retryable") : null,
        h("p", { class: "mono wrap" }, e.message)));
  }

  function facts(r) {
    const link = (rid) => h("a", { href: `#/runs/${rid}`, class: "mono" }, shortID(rid));
    const rows = [
      ["Function", h("span", null, h("a", { href: `#/runs?function=${encodeURIComponent(r.function)}` }, r.function))],
      ["Revision", h("span", null, h("span", { class: "mono" }, `v${r.revision}`),
        fn && fn.revision !== r.revision ? h("span", { class: "muted" }, ` (current: v${fn.revision})`) : null)],
      ["Created", h("span", { title: fmtDateTime(r.created_at) }, fmtTime(r.created_at))],
      ["Started", r.started_at ? h("span", { title: fmtDateTime(r.started_at) }, fmtTime(r.started_at)) : h("span", { class: "muted" }, "not yet")],
      ["Finished", r.finished_at ? h("span", { title: fmtDateTime(r.finished_at) }, fmtTime(r.finished_at)) : h("span", { class: "muted" }, "—")],
      ["Duration", r.started_at ? elapsed(r.started_at, r.finished_at) : h("span", { class: "muted" }, "—")],
      ["Attempts", h("span", { class: "num" }, String(r.attempts))],
    ];
    if (r.recoveries > 0) {
      rows.push(["Recoveries", h("span", { class: "num", "data-testid": "recoveries",
        title: "Times in a row the run's gateway died, stopped or lost the database during its invocation, " +
          "and another gateway took it over. Not failed attempts." }, String(r.recoveries))]);
    }
    if (r.idempotency_key) rows.push(["Idempotency key", h("span", { class: "mono wrap" }, r.idempotency_key)]);
    if (r.parent_id) {
      rows.push(["Parent run", h("span", null, link(r.parent_id),
        r.parent_name ? h("span", { class: "muted" }, ` · step ${r.parent_seq} ${r.parent_name}`) : null)]);
    }
    if (r.rerun_of) {
      rows.push(["Rerun of", h("span", { "data-testid": "rerun-of" }, link(r.rerun_of),
        h("span", { class: "muted" }, ` · by ${r.identity.subject}`))]);
    }
    if (r.cancelled_by) {
      rows.push(["Cancelled by", h("span", { "data-testid": "cancelled-by", class: "mono" }, r.cancelled_by.subject,
        h("span", { class: "muted" }, ` (${(r.cancelled_by.roles || []).join(", ") || "no roles"})`))]);
    }
    return h("dl", { class: "facts card" }, rows.map(([k, v]) => h("div", { class: "fact" }, h("dt", null, k), h("dd", null, v))));
  }

  // ---- The waterfall ----
  // Every bar carries its times in data-a/data-b ("now" for an open end); layout() places
  // them on the run's axis, and runs each second while the run is not finished.
  let axis = null;

  function pendingRetries(r) {
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

  function timeline(r) {
    const failuresOf = (seq) => r.failures.filter((f) => f.seq === seq);
    const items = [];
    for (const e of r.journal) items.push({ seq: e.seq, key: `e${e.seq}`, entry: e, failures: failuresOf(e.seq) });
    for (const p of pendingRetries(r)) items.push({ seq: p.seq, key: `p${p.seq}`, pending: p, failures: p.failures });
    items.sort((a, b) => a.seq - b.seq);
    const invocationFailures = failuresOf(0);

    const rows = [runRow(r)];
    for (const it of items) rows.push(it.entry ? entryRow(r, it) : pendingRow(r, it));
    if (invocationFailures.length) rows.push(invocationRow(invocationFailures));

    const ticks = h("div", { class: "wf-ticks" }, [0, 1, 2, 3, 4].map((i) => h("span", { class: "wf-tick", style: `left:${i * 25}%` })));
    axis = { ticks };
    const empty = r.journal.length === 0 && r.failures.length === 0
      ? h("div", { class: "wf-empty muted" }, TERMINAL.has(r.status) ? "This run journaled no steps." : r.started_at ? "No step has finished yet." : "Waiting for a worker to start this run.")
      : null;
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

  function legend(cls, text) {
    return h("span", { class: "legend-item" }, h("i", { class: `lg ${cls}` }), text);
  }

  function toggleAll(on) {
    for (const d of body.querySelectorAll(".wf-item")) {
      d.open = on;
      if (on) open.add(d.dataset.key);
      else open.delete(d.dataset.key);
    }
  }

  function bar(cls, a, b, title, text) {
    return h("div", { class: `wf-bar ${cls}`, "data-a": a, "data-b": b, title }, text ? h("span", { class: "wf-bar-text" }, text) : null);
  }

  function marker(f) {
    return h("div", {
      class: "wf-mark", "data-a": f.created_at,
      title: `attempt ${f.attempt} failed at ${fmtTime(f.created_at)}: ${f.error.type}: ${f.error.message}`,
    });
  }

  // item is one collapsible row: a summary line (label, track, duration) and its detail.
  function item(key, { label, track, dur, detail, testid, cls }) {
    const d = h("details", { class: ["wf-item", cls], "data-key": key, "data-testid": testid, open: open.has(key) },
      h("summary", { class: "wf-row" },
        h("div", { class: "wf-label" }, h("span", { class: "wf-caret" }, icon("chevron", 12)), label),
        h("div", { class: "wf-track" }, track),
        h("div", { class: "wf-dur" }, dur)),
      h("div", { class: "wf-detail" }, detail));
    d.addEventListener("toggle", () => { if (d.open) open.add(key); else open.delete(key); });
    return d;
  }

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
        kv("Invocation attempts", String(r.attempts)),
        r.wake_at ? kv("Wakes at", fmtTime(r.wake_at)) : null),
    });
  }

  function entryRow(r, { key, entry: e, failures }) {
    const isSleep = e.kind === "sleep";
    const failed = !!e.error;
    const start = e.started_at || e.finished_at;
    const track = [];
    if (failures.length && start) {
      track.push(h("div", { class: "wf-retries", "data-a": failures[0].created_at, "data-b": start, title: `${failures.length} failed attempt${failures.length === 1 ? "" : "s"} before this outcome` }));
    }
    let dur;
    if (isSleep) {
      const from = e.started_at || e.finished_at || r.created_at;
      const sleeping = !TERMINAL.has(r.status) && e.until && ms(e.until) > Date.now();
      track.push(bar(`sleep${sleeping ? " active" : ""}`, from, e.until || from, `sleep until ${fmtTime(e.until)}`));
      dur = sleeping ? h("span", { class: "wake" }, "wakes ", countdown(e.until)) : h("span", { class: "num" }, fmtDuration(ms(e.until) - ms(from)));
    } else if (start) {
      track.push(bar(failed ? "err" : "ok", start, e.finished_at || start, `${e.name}: ${fmtDuration(ms(e.finished_at) - ms(start))}`));
      dur = h("span", { class: "num" }, e.finished_at && e.started_at ? fmtDuration(ms(e.finished_at) - ms(e.started_at)) : "—");
    } else {
      dur = h("span", { class: "muted" }, "—");
    }
    for (const f of failures) track.push(marker(f));

    const attempt = e.attempt || 1;
    const label = h("span", { class: "wf-name" },
      h("span", { class: "seq" }, String(e.seq)),
      icon(isSleep ? "moonSleep" : "zap", 13),
      h("span", { class: "name", title: e.name }, e.name),
      isSleep ? h("span", { class: "tag sleep" }, "sleep") : null,
      e.kind === "invoke" ? h("span", { class: "tag", title: "the outcome of a child run" }, "invoke") : null,
      attempt > 1 || failures.length ? h("span", { class: "tag warn", title: `${failures.length} failed attempt(s)` }, `attempt ${attempt}`) : null,
      failed ? h("span", { class: "tag err" }, "failed") : null);

    const detail = [
      h("dl", { class: "kv" },
        kv("Seq", String(e.seq)),
        kv("Kind", e.kind),
        e.started_at ? kv("Started", fmtTime(e.started_at)) : null,
        e.finished_at ? kv("Finished", fmtTime(e.finished_at)) : null,
        isSleep ? kv("Until", e.until ? fmtTime(e.until) : "—") : kv("Attempt", String(attempt))),
    ];
    if (isSleep) {
      // A sleep has no output; its wake time is the whole story.
    } else if (failed) {
      detail.push(h("div", { class: "step-error", "data-testid": "step-error" }, h("div", { class: "label" }, "Error"), jsonView(e.error)));
    } else {
      detail.push(jsonPanel("Output", e.output, { testid: "step-output", empty: "no output (null)", open: 3 }));
    }
    if (failures.length) detail.push(failureTable(failures));
    return item(key, { testid: `step-${e.name}`, cls: failed ? "is-failed" : "", label, track, dur, detail });
  }

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

  function failureTable(failures) {
    return h("div", { class: "failures" },
      h("div", { class: "label" }, "Failed attempts"),
      h("table", { class: "table compact" },
        h("thead", null, h("tr", null, h("th", null, "Attempt"), h("th", null, "At"), h("th", null, "Type"), h("th", null, "Message"))),
        h("tbody", null, failures.map((f) => h("tr", null,
          h("td", { class: "tabular" }, String(f.attempt)),
          h("td", { class: "nowrap", title: fmtDateTime(f.created_at) }, fmtTime(f.created_at)),
          h("td", null, h("span", { class: "tag err" }, f.error.type)),
          h("td", { class: "mono wrap" }, f.error.message))))));
  }

  function kv(k, v) {
    return h("div", null, h("dt", null, k), h("dd", null, v));
  }

  // layout places every bar, marker and tick on the axis from the run's creation to its
  // end (or now, or the wake time if later).
  function layout() {
    if (!run || !axis) return;
    const now = Date.now();
    const t = (s) => (s === "now" ? now : ms(s));
    const els = body.querySelectorAll(".wf [data-a]");
    const t0 = ms(run.created_at);
    let t1 = run.finished_at ? ms(run.finished_at) : now;
    for (const el of els) {
      const a = t(el.dataset.a);
      const b = el.dataset.b ? t(el.dataset.b) : a;
      if (Number.isFinite(a)) t1 = Math.max(t1, a);
      if (Number.isFinite(b)) t1 = Math.max(t1, b);
    }
    const span = Math.max(t1 - t0, 1);
    const pct = (v) => Math.min(100, Math.max(0, ((v - t0) / span) * 100));
    for (const el of els) {
      const a = pct(t(el.dataset.a));
      el.style.left = a + "%";
      if (el.dataset.b) el.style.width = Math.max(0, pct(t(el.dataset.b)) - a) + "%";
    }
    axis.ticks.querySelectorAll(".wf-tick").forEach((tick, i) => {
      tick.textContent = i === 0 ? "0" : "+" + fmtDuration((span * i) / 4);
      tick.classList.toggle("end", i === 4);
    });
  }

  async function cancel() {
    await confirmAction({
      title: "Cancel this run?",
      body: [
        h("p", null, "The run of ", h("strong", null, run.function), " becomes ", h("strong", null, "cancelled"), " at once."),
        h("p", { class: "muted" }, "A running invocation is fenced out (its checkpoints and answer are refused) and the function is not called again. This cannot be undone, but you can rerun it later."),
      ],
      confirmLabel: "Cancel run",
      cancelLabel: "Keep running",
      danger: true,
      action: () => request(`/v1/runs/${id}/cancel`, { method: "POST" }),
    }).then((res) => {
      if (!res) return;
      toast("Run cancelled");
      load();
    });
  }

  async function rerun() {
    const res = await confirmAction({
      title: "Rerun this run?",
      body: [
        h("p", null, "A new run of ", h("strong", null, run.function), " starts with this run's input, on the function's current revision, as you."),
        h("p", { class: "muted" }, "This run stays as it is, with its own identity; the new one links back to it."),
      ],
      confirmLabel: "Start rerun",
      action: () => request(`/v1/runs/${id}/rerun`, { method: "POST" }),
    });
    if (res && res.id) {
      toast("Rerun started");
      navigate(`#/runs/${res.id}`);
    }
  }

  load();
  const stop = streamRuns({ run: id }, {
    onRun: (r) => { if (r.id === id) refresh(); },
    onResync: refresh,
    onState: live.set,
  });
  return () => {
    gone = true;
    stop();
    refresh.cancel();
    clearTimeout(poll);
    clearInterval(clock);
  };
}

function identity(id) {
  if (!id) return null;
  const claims = id.claims && Object.keys(id.claims).length ? id.claims : undefined;
  return h("section", { class: "panel identity", "data-testid": "identity" },
    h("header", { class: "panel-head" }, h("h3", null, "Identity"), h("span", { class: "muted small" }, "who started the run; sent to the function on every invocation")),
    h("div", { class: "panel-body" },
      h("dl", { class: "kv wide" },
        h("div", null, h("dt", null, "Subject"), h("dd", { class: "mono" }, icon("user", 13), " ", id.subject)),
        h("div", null, h("dt", null, "Tenant"), h("dd", { class: "mono" }, id.tenant)),
        h("div", null, h("dt", null, "Roles"), h("dd", null, id.roles && id.roles.length ? id.roles.map((r) => h("span", { class: "tag" }, r)) : h("span", { class: "muted" }, "none")))),
      claims ? h("div", { class: "claims" }, h("div", { class: "label" }, "Claims"), jsonView(claims)) : null));
}
