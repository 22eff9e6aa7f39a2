// The charts of the functions page (all functions: GET /v1/stats/functions/series) and of
// a function's page (GET /v1/functions/{name}/stats), over the last hour or the last day
// (a toggle, remembered). They stay live as the runs page does: the runs' live stream
// (with runs:read) says when a run of theirs changes, and they are fetched again at most
// every 5 s after; a timer moves the window along (every 30 s for the hour, 5 min for
// the day), with or without the stream.

import { h, replace } from "../dom.js";
import { request, streamRuns, can } from "../api.js";
import { errorBox } from "../dialog.js";
import { seriesCharts } from "../charts.js";

const WINDOWS = [["1h", "Last hour"], ["1d", "Last day"]];
const TICK = { "1h": 30_000, "1d": 300_000 };
const MIN_GAP = 5_000; // between two fetches the stream asks for

function chosenWindow() {
  try {
    const w = localStorage.getItem("stepgate.chartsWindow");
    if (w === "1h" || w === "1d") return w;
  } catch {}
  return "1h";
}

/**
 * chartsPanel returns {el, stop}: the charts of the function name, or of all functions
 * when name is empty. stop ends its stream and timers.
 */
export function chartsPanel(name) {
  let win = chosenWindow();
  let stopped = false;
  let timer = 0, soon = 0, last = 0, seq = 0;
  const body = h("div", { class: "charts-body" }, h("div", { class: "skeleton" }, h("div", { class: "sk-row" }, h("i"), h("i"))));
  const buttons = WINDOWS.map(([w, text]) => h("button", {
    type: "button", class: "btn small ghost", "data-window": w, "aria-pressed": String(w === win),
    onclick: () => choose(w),
  }, text));
  const el = h("section", { class: "panel charts-panel", "data-testid": "charts-panel" },
    h("div", { class: "panel-head" }, h("h3", null, name ? "Activity" : "Activity of all functions"),
      h("div", { class: "panel-tools seg", role: "group", "aria-label": "Window" }, buttons)),
    body);

  function choose(w) {
    if (w === win) return;
    win = w;
    try { localStorage.setItem("stepgate.chartsWindow", w); } catch {}
    for (const b of buttons) b.setAttribute("aria-pressed", String(b.dataset.window === w));
    load();
  }

  async function load() {
    clearTimeout(timer);
    clearTimeout(soon);
    soon = 0;
    last = Date.now();
    const mine = ++seq, w = win;
    const path = name ? `/v1/functions/${encodeURIComponent(name)}/stats?window=${w}` : `/v1/stats/functions/series?window=${w}`;
    try {
      const series = await request(path);
      if (stopped || mine !== seq) return;
      replace(body, seriesCharts(series));
    } catch (e) {
      if (stopped || mine !== seq) return;
      replace(body, errorBox("Couldn't load the charts", e, null));
    }
    if (!stopped && mine === seq) timer = setTimeout(load, TICK[w]);
  }

  // changed fetches again once MIN_GAP has passed since the last fetch.
  function changed() {
    if (stopped || soon) return;
    soon = setTimeout(load, Math.max(0, last + MIN_GAP - Date.now()));
  }

  const stopStream = can("runs:read") ? streamRuns(name ? { function: name } : {}, { onRun: changed, onResync: changed }) : () => {};
  load();
  return {
    el,
    stop() {
      stopped = true;
      clearTimeout(timer);
      clearTimeout(soon);
      stopStream();
    },
  };
}
