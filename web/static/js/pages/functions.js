// The functions: their URL, revision and config, last hour's stats, and a form to invoke one;
// above them, what the tenant stores against its storage quotas (GET /v1/usage), and
// charts of all their runs over the last hour or day (charts_panel.js).

import { h, icon, replace, timeAgo, fmtDuration, navigate } from "../dom.js";
import { request, can, APIError } from "../api.js";
import { errorBox, errorMessage, modal } from "../dialog.js";
import { flowBadges, queueDialog } from "./function_queue.js";
import { chartsPanel } from "./charts_panel.js";

/** functionsPage mounts the functions list into el; it returns its cleanup. */
export function functionsPage(el, params) {
  let gone = false;
  let charts = null;
  const content = h("div", { class: "stack" }, h("div", { class: "card" }, h("div", { class: "skeleton" }, Array.from({ length: 4 }, () => h("div", { class: "sk-row" }, h("i"), h("i"), h("i"), h("i"))))));
  const invokeBtn = can("runs:invoke")
    ? h("button", { type: "button", class: "btn primary", "data-testid": "invoke-open", disabled: true }, icon("play", 13), "Invoke a function")
    : null;
  replace(el,
    h("div", { class: "page-head" },
      h("div", null, h("div", { class: "page-title" }, h("h1", null, "Functions")), h("p", { class: "muted sub-title" }, "Registered functions at their current revision, with their runs over the last hour.")),
      h("div", { class: "page-actions" }, invokeBtn)),
    content);

  async function load() {
    const [list, stats, usage] = await Promise.allSettled([request("/v1/functions"), request("/v1/stats/functions?window=1h"),
      can("runs:read") ? request("/v1/usage") : Promise.reject(new Error("no runs:read"))]);
    if (gone) return;
    if (list.status === "rejected") {
      replace(content, errorBox("Couldn't load the functions", list.reason,
        h("button", { type: "button", class: "btn small", onclick: load }, icon("refresh", 13), "Try again")));
      return;
    }
    const fns = (list.value.functions || []).slice().sort((a, b) => a.name.localeCompare(b.name));
    const byName = new Map();
    if (stats.status === "fulfilled") for (const s of stats.value.functions || []) byName.set(s.name, s);
    if (invokeBtn) {
      invokeBtn.disabled = fns.length === 0;
      invokeBtn.onclick = () => invokeDialog(fns, fns[0]?.name);
    }
    if (fns.length === 0) {
      replace(content, h("div", { class: "card" }, h("div", { class: "empty", "data-testid": "empty-functions" },
        h("div", { class: "empty-icon" }, icon("functions", 22)),
        h("h3", null, "No functions registered yet"),
        h("p", null, "A function is any HTTP endpoint. Register one with"),
        h("pre", { class: "cmd" }, "stepgate functions register NAME --url URL"),
        h("p", null, "or every function an app serves, from its manifest, with"),
        h("pre", { class: "cmd" }, "stepgate apps sync URL"),
        h("p", { class: "muted" }, "Then invoke it from here."))));
      return;
    }
    replace(content,
      usage.status === "fulfilled" ? usageStrip(usage.value) : null,
      stats.status === "rejected"
        ? h("div", { class: "note" }, icon("alert", 13), h("span", null, `Run statistics are unavailable: ${errorMessage(stats.reason)}`))
        : null,
      (charts ??= chartsPanel("")).el,
      h("div", { class: "card table-card" },
        h("table", { class: "table fn-table", "data-testid": "functions-table" },
          h("thead", null, h("tr", null,
            h("th", null, "Function"),
            h("th", null, "Revision"),
            h("th", null, "Config"),
            h("th", { class: "num" }, "Runs (1h)"),
            h("th", null, "Success"),
            h("th", { class: "num" }, "p50"),
            h("th", null, "Last run"),
            h("th", { class: "actions" }, ""))),
          h("tbody", null, fns.map((f) => row(f, byName.get(f.name), stats.status === "fulfilled", fns))))));
    const want = params.get("invoke");
    if (want && invokeBtn && fns.some((f) => f.name === want)) invokeDialog(fns, want);
  }

  function row(f, s, haveStats, fns) {
    const cfg = f.config || {};
    const r = cfg.retries || {};
    const runsLink = `#/runs?function=${encodeURIComponent(f.name)}`;
    const rate = s && typeof s.success_rate === "number" ? s.success_rate : null;
    return h("tr", { "data-function": f.name },
      h("td", null,
        h("a", { href: `#/functions/${encodeURIComponent(f.name)}`, class: "fn-name strong", title: "The function, with its last check against live runs" }, f.name),
        h("div", { class: "sub mono", title: f.url }, f.url)),
      h("td", null, h("span", { class: "mono" }, `v${f.revision}`), h("div", { class: "sub" }, timeAgo(f.created_at))),
      h("td", null,
        h("div", { class: "cfg" },
          h("span", { title: "invocation timeout" }, icon("clock", 12), cfg.timeout || h("span", { class: "muted" }, "5m")),
          h("span", { title: retryTitle(r) }, icon("rerun", 12), `${r.max_attempts ?? 3} attempts`)),
        cfg.invoke_roles && cfg.invoke_roles.length
          ? h("div", { class: "sub" }, "invoke: ", cfg.invoke_roles.map((x) => h("span", { class: "tag" }, x)))
          : null,
        flowBadges(cfg)),
      h("td", { class: "num" }, haveStats ? h("span", null, String(s ? s.runs : 0), s && s.running ? h("div", { class: "sub" }, `${s.running} running`) : null) : dash()),
      h("td", null, rate === null ? dash() : meter(rate)),
      h("td", { class: "num" }, s && typeof s.p50_ms === "number" ? fmtDuration(s.p50_ms) : dash()),
      h("td", null, s && s.last_run_at ? timeAgo(s.last_run_at) : dash()),
      h("td", { class: "actions" },
        can("runs:invoke") ? h("button", { type: "button", class: "btn small", "data-testid": `invoke-${f.name}`, onclick: () => invokeDialog(fns, f.name) }, icon("play", 11), "Invoke") : null,
        h("button", { type: "button", class: "btn small ghost", "data-testid": `queue-${f.name}`, onclick: () => queueDialog(f.name) }, "Queue"),
        h("a", { href: runsLink, class: "btn small ghost" }, "Runs", icon("chevron", 12))));
  }

  load();
  return () => { gone = true; charts?.stop(); };
}

function dash() {
  return h("span", { class: "muted" }, "—");
}

function retryTitle(r) {
  const parts = [`${r.max_attempts ?? 3} attempts in all`];
  if (r.initial_interval) parts.push(`backoff from ${r.initial_interval}`);
  if (r.max_interval) parts.push(`up to ${r.max_interval}`);
  return parts.join(", ");
}

function meter(rate) {
  const pct = Math.round(rate * 1000) / 10;
  const cls = rate >= 0.95 ? "good" : rate >= 0.8 ? "fair" : "poor";
  return h("div", { class: `meter ${cls}`, title: `${pct}% of finished runs completed` },
    h("div", { class: "meter-bar" }, h("i", { style: `width:${pct}%` })),
    h("span", { class: "num" }, `${pct}%`));
}

const INPUT_KEY = "stepgate.input.";

/** invokeDialog is the form that starts a run with JSON input and opens it. */
function invokeDialog(fns, name) {
  const select = h("select", { class: "input", id: "invoke-fn", "data-testid": "invoke-function" },
    fns.map((f) => h("option", { value: f.name, selected: f.name === name }, f.name)));
  const saved = (n) => { try { return localStorage.getItem(INPUT_KEY + n); } catch { return null; } };
  const input = h("textarea", {
    class: "input code", id: "invoke-input", rows: 10, spellcheck: "false", "data-testid": "invoke-input",
    value: saved(name) || "{}",
  });
  const key = h("input", { class: "input", id: "invoke-key", placeholder: "optional: the same key returns the same run", maxlength: 255 });
  const status = h("div", { class: "json-status" });
  const err = h("div", { class: "dialog-error", hidden: true });
  const submit = h("button", { type: "submit", class: "btn primary", "data-testid": "invoke-submit" }, icon("play", 12), "Start run");
  const format = h("button", { type: "button", class: "btn ghost small" }, "Format");

  function validate() {
    const text = input.value.trim();
    if (!text) {
      replace(status, icon("alert", 12), "Input is required: a run's input is a JSON value, {} for none.");
      status.className = "json-status bad";
      submit.disabled = true;
      return null;
    }
    try {
      const v = JSON.parse(text);
      replace(status, icon("check", 12), "Valid JSON");
      status.className = "json-status ok";
      submit.disabled = false;
      return { v, text };
    } catch (e) {
      replace(status, icon("alert", 12), jsonError(text, e));
      status.className = "json-status bad";
      submit.disabled = true;
      return null;
    }
  }
  input.addEventListener("input", validate);
  select.addEventListener("change", () => { input.value = saved(select.value) || "{}"; validate(); });
  format.addEventListener("click", () => { const ok = validate(); if (ok) input.value = JSON.stringify(ok.v, null, 2); });

  const form = h("form", { class: "invoke-form" },
    h("label", { for: "invoke-fn" }, "Function"), select,
    h("div", { class: "label-row" }, h("label", { for: "invoke-input" }, "Input (JSON)"), format),
    input, status,
    h("label", { for: "invoke-key" }, "Idempotency key"), key,
    err,
    h("footer", null, h("button", { type: "button", class: "btn", onclick: () => dlg.close() }, "Cancel"), submit));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const ok = validate();
    if (!ok) return;
    submit.disabled = true;
    submit.classList.add("busy");
    err.hidden = true;
    try {
      const headers = key.value.trim() ? { "Idempotency-Key": key.value.trim() } : {};
      const res = await request(`/v1/functions/${encodeURIComponent(select.value)}/runs`, { method: "POST", body: ok.text, raw: true, headers });
      try { localStorage.setItem(INPUT_KEY + select.value, ok.text); } catch {}
      dlg.close();
      navigate(`#/runs/${res.id}`);
    } catch (e) {
      replace(err, icon("alert", 14), h("span", null, e instanceof APIError ? errorMessage(e) : String(e)));
      err.hidden = false;
      submit.disabled = false;
      submit.classList.remove("busy");
    }
  });
  const dlg = modal({ title: "Invoke a function", content: form, wide: true });
  validate();
  input.focus();
}

// jsonError says where the JSON is wrong, by line and column when the engine tells.
function jsonError(text, e) {
  const m = /position (\d+)/.exec(e.message);
  let where = "";
  if (m) {
    const before = text.slice(0, Number(m[1]));
    const line = before.split("\n").length;
    const col = before.length - before.lastIndexOf("\n");
    where = ` (line ${line}, column ${col})`;
  }
  const msg = e.message.replace(/^JSON\.parse: /, "").replace(/ in JSON at position \d+.*$/, "").replace(/\s*\(line \d+ column \d+\)$/, "");
  return `Not valid JSON${where}: ${msg}`;
}


/** fmtBytes formats a byte count for people: 980 B, 1.5 KiB, 10 GiB. */
function fmtBytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${i === 0 ? n : Number(n.toFixed(n < 10 ? 1 : 0))} ${units[i]}`;
}

/** usageStrip shows the tenant's storage against its quotas: a write past one is refused. */
function usageStrip(u) {
  const item = (id, label, used, max, fmt, title) => {
    const pct = max > 0 ? Math.min(100, (used / max) * 100) : 0;
    return h("span", { class: "usage-item" + (pct >= 90 ? " near" : ""), "data-testid": `usage-${id}`, title,
      "data-used": String(used), "data-max": String(max) },
      h("span", { class: "muted" }, label), " ", h("strong", null, fmt(used)), h("span", { class: "muted" }, ` / ${fmt(max)}`));
  };
  const count = (n) => n.toLocaleString();
  return h("div", { class: "note usage", "data-testid": "usage" },
    icon("functions", 13),
    h("span", null, `Storage of tenant ${u.tenant}:`),
    item("runs", "runs stored", u.runs, u.max_runs, count, "Runs not yet deleted by retention (STEPGATE_MAX_TENANT_RUNS)"),
    item("stream-bytes", "streams", u.stream_bytes, u.max_stream_bytes, fmtBytes, "Bytes of all runs' streams (STEPGATE_MAX_TENANT_STREAM_BYTES)"),
    item("mailbox-bytes", "mailboxes", u.mailbox_bytes, u.max_mailbox_bytes, fmtBytes, "Bytes of messages not yet received (STEPGATE_MAX_TENANT_MAILBOX_BYTES)"),
    item("event-bytes", "events", u.event_bytes, u.max_event_bytes, fmtBytes, "Bytes of events' data not yet deleted by retention (STEPGATE_MAX_TENANT_EVENT_BYTES)"),
    item("journal-bytes", "journals", u.journal_bytes, u.max_journal_bytes, fmtBytes, "Bytes of finished runs' journals not yet deleted by retention, counted as each run finishes (STEPGATE_MAX_TENANT_JOURNAL_BYTES)"));
}
