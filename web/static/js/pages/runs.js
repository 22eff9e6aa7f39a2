// The runs list: filters, search, keyset pagination, and live updates from the stream.

import { h, icon, replace, badge, timeAgo, elapsed, shortID, isUUID, debounce, code, navigate, STATUSES, TERMINAL, ms } from "../dom.js";
import { request, query, streamRuns, can } from "../api.js";
import { errorBox } from "../dialog.js";
import { liveIndicator } from "./live.js";
import { cancelMatching } from "./runs_cancel.js";
import { redriveMatching } from "./runs_redrive.js";

const PAGE = 50; // runs a page; #/runs?limit=N asks for another size
const RANGES = [
  ["", "Any time"],
  ["15m", "Last 15 minutes"],
  ["1h", "Last hour"],
  ["24h", "Last 24 hours"],
  ["7d", "Last 7 days"],
  ["custom", "Custom range…"],
];
const RANGE_MS = { "15m": 15 * 60e3, "1h": 3600e3, "24h": 86400e3, "7d": 7 * 86400e3 };

/** runsPage mounts the runs list into el; it returns its cleanup. */
export function runsPage(el, params) {
  const f = {
    function: params.get("function") || "",
    status: params.get("status") || "",
    range: params.get("range") || "",
    after: params.get("after") || "", // datetime-local values, for the custom range
    before: params.get("before") || "",
    q: params.get("q") || "",
    group: params.get("error_group") || "", // a failure group (the Failures page's "Inspect")
    limit: Math.min(500, Math.max(1, Number(params.get("limit")) || PAGE)),
  };
  let runs = []; // newest first, as the API orders them
  const rows = new Map(); // run id → <tr>
  let cursor = null;
  let bounds = {}; // the created_after/before of the loaded pages
  let gen = 0; // discards answers of superseded loads
  let loading = false;
  let loadError = null;
  let functionsKnown = null; // null: unknown; else the count of registered functions

  // Controls.
  const search = h("input", {
    type: "search", class: "input search", placeholder: "Run id or idempotency key", value: f.q,
    "aria-label": "Search by run id or idempotency key", "data-testid": "search",
  });
  const fnSelect = h("select", { class: "input", "aria-label": "Function", "data-testid": "filter-function" },
    h("option", { value: "" }, "All functions"),
    f.function ? h("option", { value: f.function, selected: true }, f.function) : null);
  const statusSelect = h("select", { class: "input", "aria-label": "Status", "data-testid": "filter-status" },
    h("option", { value: "" }, "Any status"),
    STATUSES.map((s) => h("option", { value: s, selected: s === f.status }, s)));
  const rangeSelect = h("select", { class: "input", "aria-label": "Created", "data-testid": "filter-range" },
    RANGES.map(([v, label]) => h("option", { value: v, selected: v === f.range }, label)));
  const afterInput = h("input", { type: "datetime-local", class: "input", step: 1, value: f.after, "aria-label": "Created after" });
  const beforeInput = h("input", { type: "datetime-local", class: "input", step: 1, value: f.before, "aria-label": "Created before" });
  const custom = h("div", { class: "custom-range", hidden: f.range !== "custom" },
    h("span", { class: "muted" }, "from"), afterInput, h("span", { class: "muted" }, "to"), beforeInput);
  const clearBtn = h("button", { type: "button", class: "btn ghost", "data-testid": "clear-filters" }, icon("x", 14), "Clear");
  const refreshBtn = h("button", { type: "button", class: "btn", title: "Reload the list" }, icon("refresh", 14), h("span", null, "Refresh"));
  const live = liveIndicator();
  // Bulk cancel, for roles that may cancel, once a filter narrows the list.
  const cancelBtn = can("runs:manage")
    ? h("button", { type: "button", class: "btn danger-outline", "data-testid": "cancel-matching", hidden: true, onclick: () => askCancel() },
      icon("stop", 13), h("span", null, "Cancel matching…"))
    : null;
  // Bulk rerun, for roles that may rerun and manage runs, once a filter narrows the list
  // to finished runs (or to no status at all).
  const redriveBtn = can("runs:invoke") && can("runs:manage")
    ? h("button", { type: "button", class: "btn", "data-testid": "redrive-matching", hidden: true, onclick: () => askRedrive() },
      icon("rerun", 13), h("span", null, "Redrive…"))
    : null;
  const groupChip = h("span", { class: "tag", "data-testid": "filter-group", hidden: !f.group },
    "error group ", h("span", { class: "mono" }, f.group));

  const tbody = h("tbody", { "data-testid": "runs-body" });
  const table = h("table", { class: "table runs-table", "data-testid": "runs-table" },
    h("thead", null, h("tr", null,
      h("th", { class: "col-status" }, "Status"),
      h("th", null, "Function"),
      h("th", null, "Run"),
      h("th", null, "Started"),
      h("th", { class: "num" }, "Duration"),
      h("th", { class: "num", title: "Invocations of the run, and how many failed" }, "Invocations"))),
    tbody);
  const state = h("div", { class: "list-state" }); // loading, errors, empty states
  const foot = h("div", { class: "list-foot" });
  const note = h("div", { class: "note", hidden: true });

  replace(el,
    h("div", { class: "page-head" },
      h("div", { class: "page-title" }, h("h1", null, "Runs"), live.el),
      h("div", { class: "page-actions" }, redriveBtn, cancelBtn, refreshBtn)),
    h("div", { class: "toolbar" },
      h("label", { class: "search-wrap" }, icon("search", 14), search, h("kbd", { title: "press / to search" }, "/")),
      fnSelect, statusSelect, rangeSelect, custom, groupChip, clearBtn),
    note,
    h("div", { class: "card table-card" }, table, state),
    foot);

  // Filters live in the URL, so a filtered list can be linked and survives a reload.
  function syncURL() {
    const q = query({
      function: f.function, status: f.status, range: f.range, after: f.range === "custom" ? f.after : "",
      before: f.range === "custom" ? f.before : "", q: f.q, error_group: f.group, limit: f.limit === PAGE ? "" : f.limit,
    });
    history.replaceState(null, "", "#/runs" + q);
    clearBtn.hidden = !(f.function || f.status || f.range || f.q || f.group);
    groupChip.hidden = !f.group;
    if (redriveBtn) redriveBtn.hidden = !(f.function || f.range || f.group || TERMINAL.has(f.status)) || (f.status && !TERMINAL.has(f.status));
    if (cancelBtn) cancelBtn.hidden = !(f.function || f.range) && !(f.status && !TERMINAL.has(f.status)) || TERMINAL.has(f.status);
  }

  // askCancel cancels the runs matching the filters (not the search) in bulk.
  function askCancel() {
    const b = apiBounds();
    const filter = {};
    if (f.function) filter.function = f.function;
    if (f.status) filter.status = [f.status];
    if (b.created_after) filter.created_after = b.created_after;
    if (b.created_before) filter.created_before = b.created_before;
    const count = runs.filter((r) => matches(r) && !TERMINAL.has(r.status)).length;
    const g = gen;
    cancelMatching({ filter, count, more: !!cursor, onDone: () => { if (g === gen) load(); } }); // not once the page is left
  }

  // askRedrive reruns the finished runs matching the filters (not the search) in bulk.
  function askRedrive() {
    const b = apiBounds();
    const filter = {};
    if (f.function) filter.function = f.function;
    if (f.status) filter.status = [f.status];
    if (f.group) filter.error_group = f.group;
    if (b.created_after) filter.created_after = b.created_after;
    if (b.created_before) filter.created_before = b.created_before;
    const count = runs.filter((r) => matches(r) && TERMINAL.has(r.status)).length;
    const g = gen;
    redriveMatching({ filter, count, more: !!cursor, from: f.status === "failed" || f.group ? "failure" : "start",
      what: f.group ? h("span", null, "failed runs of error group ", h("strong", { class: "mono" }, f.group)) : null,
      onDone: () => { if (g === gen) load(); } });
  }

  function apiBounds() {
    if (f.range === "custom") {
      return {
        created_after: f.after ? new Date(f.after).toISOString() : "",
        created_before: f.before ? new Date(f.before).toISOString() : "",
      };
    }
    if (RANGE_MS[f.range]) return { created_after: new Date(Date.now() - RANGE_MS[f.range]).toISOString(), created_before: "" };
    return { created_after: "", created_before: "" };
  }

  // matches reports whether run belongs in the list under the server-side filters.
  function matches(run) {
    if (f.group && run.status !== "failed") return false;
    if (f.function && run.function !== f.function) return false;
    if (f.status && run.status !== f.status) return false;
    const t = ms(run.created_at);
    if (bounds.created_after && t < ms(bounds.created_after)) return false;
    if (bounds.created_before && t >= ms(bounds.created_before)) return false;
    return true;
  }

  // visible applies the search: an id prefix or a part of the idempotency key, among the
  // loaded runs; Enter asks the API for an exact idempotency key (see the keydown handler).
  function visible(run) {
    const q = f.q.trim().toLowerCase();
    if (!q) return true;
    return run.id.startsWith(q) || (run.idempotency_key || "").toLowerCase().includes(q);
  }

  function row(run) {
    const tags = [];
    if (run.rerun_of) tags.push(h("span", { class: "tag", title: `rerun of ${run.rerun_of}` }, icon("rerun", 11), "rerun"));
    if (run.parent_id) tags.push(h("span", { class: "tag", title: `child of ${run.parent_id}` }, "child"));
    const tr = h("tr", { class: "clickable", "data-run": run.id, "data-status": run.status },
      h("td", { class: "col-status" }, badge(run.status)),
      h("td", null, h("span", { class: "fn-name" }, run.function), h("span", { class: "rev", title: `revision ${run.revision}` }, `v${run.revision}`)),
      h("td", null,
        h("div", { class: "run-cell" },
          h("a", { href: `#/runs/${run.id}`, class: "mono run-link", title: run.id },
            h("span", { class: "id-full" }, run.id), h("span", { class: "id-short" }, "…" + shortID(run.id))),
          tags),
        run.idempotency_key ? h("div", { class: "sub mono", title: "idempotency key" }, icon("key", 11), run.idempotency_key) : null),
      h("td", null, timeAgo(run.started_at || run.created_at)),
      h("td", { class: "num" }, run.started_at ? elapsed(run.started_at, run.finished_at || (TERMINAL.has(run.status) ? run.created_at : "")) : h("span", { class: "muted" }, "—")),
      h("td", { class: "num", "data-testid": "invocations" }, String(run.invocations ?? 0),
        run.failed_invocations > 0 ? h("span", { class: "muted", title: "failed invocations" }, ` (${run.failed_invocations} failed)`) : null));
    tr.addEventListener("click", (ev) => {
      if (ev.target.closest("a") || getSelection().toString()) return;
      navigate(`#/runs/${run.id}`);
    });
    tr.hidden = !visible(run);
    return tr;
  }

  function render() {
    tbody.replaceChildren();
    rows.clear();
    for (const r of runs) {
      const tr = row(r);
      rows.set(r.id, tr);
      tbody.append(tr);
    }
    renderState();
  }

  function renderState() {
    const shown = runs.filter(visible).length;
    table.hidden = shown === 0;
    note.hidden = !f.q || isUUID(f.q);
    if (!note.hidden) {
      replace(note, icon("search", 13), h("span", null,
        `Showing loaded runs whose id starts with or whose idempotency key contains “${f.q}”; press Enter to look up that exact key. `,
        cursor ? "Load more to search further back." : ""));
    }
    if (loading && runs.length === 0) {
      replace(state, skeleton());
    } else if (loadError && runs.length === 0) {
      replace(state, h("div", { class: "pad" }, errorBox("Couldn't load the runs", loadError,
        h("button", { type: "button", class: "btn small", onclick: () => load() }, icon("refresh", 13), "Try again"))));
    } else if (runs.length === 0) {
      replace(state, f.function || f.status || f.range || f.group ? emptyFiltered() : emptyAll());
    } else if (shown === 0) {
      replace(state, h("div", { class: "empty" },
        h("h3", null, "No loaded run matches"),
        h("p", null, `No run on this page has an id starting with or an idempotency key containing “${f.q}”.`),
        h("p", null, "Paste a whole run id and press Enter to open it.")));
    } else {
      state.replaceChildren();
    }
    replace(foot,
      runs.length ? h("span", { class: "muted" }, `${shown} run${shown === 1 ? "" : "s"}${f.q ? ` of ${runs.length} loaded` : ""}`) : null,
      cursor ? h("button", { type: "button", class: "btn", "data-testid": "load-more", disabled: loading, onclick: loadMore }, loading ? "Loading…" : "Load more") : null,
      loadError && runs.length ? h("span", { class: "error-text" }, loadError.detail || String(loadError)) : null);
  }

  function emptyAll() {
    return h("div", { class: "empty", "data-testid": "empty-runs" },
      h("div", { class: "empty-icon" }, icon("runs", 22)),
      h("h3", null, "No runs yet"),
      functionsKnown === 0
        ? [h("p", null, "Register a function first:"),
           h("pre", { class: "cmd" }, "stepgate functions register NAME --url URL\n# or every function an app serves:\nstepgate apps sync URL")]
        : [h("p", null, "Start one from the ", h("a", { href: "#/functions" }, "Functions"), " page, or from a terminal:"),
           h("pre", { class: "cmd" }, "stepgate invoke hello --data '{\"name\":\"Ada\"}'")],
      h("p", { class: "muted" }, "New runs appear here as they start."));
  }

  function emptyFiltered() {
    return h("div", { class: "empty", "data-testid": "empty-runs" },
      h("h3", null, "No runs match these filters"),
      h("p", null, "New matching runs appear here as they start."),
      h("button", { type: "button", class: "btn", onclick: clearFilters }, "Clear filters"));
  }

  function skeleton() {
    return h("div", { class: "skeleton" }, Array.from({ length: 6 }, () => h("div", { class: "sk-row" }, h("i"), h("i"), h("i"), h("i"))));
  }

  let loaded = Promise.resolve(); // the load in flight
  let early = []; // events that came during it

  function load() {
    loaded = loadPage();
    return loaded;
  }

  async function loadPage() {
    const g = ++gen;
    loading = true;
    loadError = null;
    runs = [];
    cursor = null;
    bounds = apiBounds();
    render();
    early = [];
    try {
      const page = await request("/v1/runs" + query({ function: f.function, status: f.status, error_group: f.group, ...bounds, limit: f.limit }));
      if (g !== gen) return;
      runs = page.runs || [];
      cursor = page.next_cursor || null;
    } catch (e) {
      if (g !== gen) return;
      loadError = e;
    }
    loading = false;
    render();
    for (const r of early) upsert(r, true); // in order: a later event wins
    early = [];
    renderState();
  }

  async function loadMore() {
    const g = gen;
    loading = true;
    renderState();
    try {
      const page = await request("/v1/runs" + query({ function: f.function, status: f.status, error_group: f.group, ...bounds, limit: f.limit, cursor }));
      if (g !== gen) return;
      for (const r of page.runs || []) {
        if (rows.has(r.id)) continue; // it moved onto an earlier page meanwhile, say, by a rerun
        runs.push(r);
        const tr = row(r);
        rows.set(r.id, tr);
        tbody.append(tr);
      }
      cursor = page.next_cursor || null;
      loadError = null;
    } catch (e) {
      if (g !== gen) return;
      loadError = e;
    }
    loading = false;
    renderState();
  }

  // resync merges a fresh first page: the stream may have missed changes while it was
  // away. Rows beyond the first page stay as they are.
  async function resync() {
    const g = gen;
    await loaded; // a load that started before the stream opened must not overwrite this
    if (g !== gen) return; // the page was left meanwhile, or loaded afresh
    try {
      const page = await request("/v1/runs" + query({ function: f.function, status: f.status, error_group: f.group, ...bounds, limit: f.limit }));
      if (g !== gen) return;
      for (const r of page.runs || []) upsert(r, false);
      if (runs.length <= f.limit) cursor = page.next_cursor || null;
      loadError = null;
      renderState();
    } catch {} // the list stays as it is; the indicator says the stream is off
  }

  function newer(a, b) {
    const d = ms(a.created_at) - ms(b.created_at);
    return d !== 0 ? d > 0 : a.id > b.id;
  }

  // upsert puts a run in the list, or updates it in place; flash marks the change.
  function upsert(run, flash) {
    const i = runs.findIndex((r) => r.id === run.id);
    if (i >= 0) {
      const old = runs[i];
      if (TERMINAL.has(old.status) && !TERMINAL.has(run.status)) return; // a late event
      if (!matches(run)) {
        runs.splice(i, 1);
        rows.get(run.id)?.remove();
        rows.delete(run.id);
        return;
      }
      runs[i] = { ...old, ...run };
      const tr = row(runs[i]);
      if (flash && old.status !== run.status) tr.classList.add("flash");
      rows.get(run.id).replaceWith(tr);
      rows.set(run.id, tr);
      return;
    }
    if (!matches(run) || f.group) return; // a run's error group is the server's to tell
    const last = runs[runs.length - 1];
    if (cursor && last && !newer(run, last)) return; // it belongs to a page not loaded yet
    let j = runs.findIndex((r) => newer(run, r));
    if (j < 0) j = runs.length;
    runs.splice(j, 0, run);
    const tr = row(run);
    if (flash) tr.classList.add("flash", "new");
    const next = runs[j + 1] && rows.get(runs[j + 1].id);
    if (next) tbody.insertBefore(tr, next);
    else tbody.append(tr);
    rows.set(run.id, tr);
  }

  function onRun(run) {
    if (loading && runs.length === 0) { early.push(run); return; } // applied once the page is in
    upsert(run, true);
    renderState();
  }

  // The stream is filtered by function server-side; other filters apply here.
  let stopStream = () => {};
  function follow() {
    stopStream();
    stopStream = streamRuns(f.function ? { function: f.function } : {}, { onRun, onResync: resync, onState: live.set });
  }

  function changed(restream) {
    syncURL();
    load();
    if (restream) follow();
  }

  function clearFilters() {
    Object.assign(f, { function: "", status: "", range: "", after: "", before: "", q: "", group: "" });
    fnSelect.value = statusSelect.value = rangeSelect.value = search.value = "";
    custom.hidden = true;
    changed(true);
  }

  fnSelect.addEventListener("change", () => { f.function = fnSelect.value; changed(true); });
  statusSelect.addEventListener("change", () => { f.status = statusSelect.value; changed(false); });
  rangeSelect.addEventListener("change", () => {
    f.range = rangeSelect.value;
    custom.hidden = f.range !== "custom";
    if (f.range === "custom" && !f.after) {
      const d = new Date(Date.now() - 3600e3);
      f.after = afterInput.value = new Date(d - d.getTimezoneOffset() * 60e3).toISOString().slice(0, 19);
    }
    changed(false);
  });
  afterInput.addEventListener("change", () => { f.after = afterInput.value; changed(false); });
  beforeInput.addEventListener("change", () => { f.before = beforeInput.value; changed(false); });
  const applySearch = debounce(() => {
    syncURL();
    for (const r of runs) rows.get(r.id).hidden = !visible(r);
    renderState();
  }, 120);
  search.addEventListener("input", () => { f.q = search.value; applySearch(); });
  search.addEventListener("keydown", (ev) => {
    if (ev.key !== "Enter") return;
    ev.preventDefault();
    const q = search.value.trim();
    if (isUUID(q)) { navigate(`#/runs/${q.toLowerCase()}`); return; }
    const hits = runs.filter(visible);
    if (hits.length === 1) { navigate(`#/runs/${hits[0].id}`); return; }
    if (!q) return;
    // Not among the loaded runs: ask the API for the runs started with this exact key.
    request("/v1/runs" + query({ idempotency_key: q, limit: 2 })).then((page) => {
      const found = page.runs || [];
      if (found.length === 1) { navigate(`#/runs/${found[0].id}`); return; }
      if (found.length > 1) {
        runs = found;
        cursor = null;
        render();
      }
    }).catch(() => {}); // the loaded-runs filter above already says what it found
  });
  clearBtn.addEventListener("click", clearFilters);
  refreshBtn.addEventListener("click", () => load());

  // The function filter offers the registered functions.
  request("/v1/functions").then((list) => {
    const names = (list.functions || []).map((fn) => fn.name);
    functionsKnown = names.length;
    if (f.function && !names.includes(f.function)) names.push(f.function);
    replace(fnSelect, h("option", { value: "" }, "All functions"), names.sort().map((n) => h("option", { value: n, selected: n === f.function }, n)));
    if (!loading && runs.length === 0) renderState();
  }).catch(() => {}); // without functions:read the filter keeps what the URL named

  // "/" jumps to the search, as in most developer tools.
  const slash = (ev) => {
    if (ev.key !== "/" || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (ev.target.closest("input, textarea, select, [contenteditable]") || document.querySelector("dialog[open]")) return;
    ev.preventDefault();
    search.focus();
  };
  document.addEventListener("keydown", slash);

  syncURL();
  load();
  follow();
  return () => { gen++; stopStream(); applySearch.cancel(); document.removeEventListener("keydown", slash); };
}
