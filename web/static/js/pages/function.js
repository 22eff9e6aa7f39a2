// One function (GET /v1/functions/{name}): its current revision, URL and config, charts of
// its runs over the last hour or day (charts_panel.js), and its last check against its
// live runs (POST /v1/apps?check=true), when it has one.

import { h, icon, replace, timeAgo, fmtDateTime } from "../dom.js";
import { request, can, APIError } from "../api.js";
import { errorBox } from "../dialog.js";
import { flowBadges, queueDialog } from "./function_queue.js";
import { lastCheck } from "./function_check.js";
import { chartsPanel } from "./charts_panel.js";

/** functionPage mounts the function name into el; it returns its cleanup. */
export function functionPage(el, name) {
  let gone = false;
  let charts = null;
  const runsLink = `#/runs?function=${encodeURIComponent(name)}`;
  const body = h("div", { class: "stack" }, h("div", { class: "card" }, h("div", { class: "skeleton" }, h("div", { class: "sk-row" }, h("i"), h("i"), h("i")))));
  replace(el,
    h("nav", { class: "crumbs", "aria-label": "Breadcrumb" },
      h("a", { href: "#/functions" }, icon("arrowLeft", 14), "Functions"),
      h("span", { class: "sep" }, "/"),
      h("span", { class: "crumb-here" }, name)),
    h("div", { class: "page-head" },
      h("div", null, h("div", { class: "page-title" }, h("h1", { "data-testid": "function-name" }, name))),
      h("div", { class: "page-actions" },
        can("runs:invoke") ? h("a", { class: "btn", href: `#/functions?invoke=${encodeURIComponent(name)}` }, icon("play", 13), "Invoke") : null,
        h("button", { type: "button", class: "btn ghost", onclick: () => queueDialog(name) }, "Queue"),
        h("a", { class: "btn ghost", href: runsLink }, "Runs", icon("chevron", 12)))),
    body);

  async function load() {
    let f;
    try {
      f = await request(`/v1/functions/${encodeURIComponent(name)}`);
    } catch (e) {
      if (gone) return;
      if (e instanceof APIError && e.status === 404) {
        replace(body, h("div", { class: "empty", "data-testid": "function-not-found" },
          h("h2", null, "Function not found"),
          h("p", null, "There is no function ", h("code", null, name), " in your tenant."),
          h("p", null, h("a", { href: "#/functions" }, "Back to the functions"))));
        return;
      }
      replace(body, errorBox("Couldn't load the function", e, h("button", { type: "button", class: "btn small", onclick: load }, icon("refresh", 13), "Try again")));
      return;
    }
    if (gone) return;
    charts?.stop();
    charts = chartsPanel(name);
    replace(body, facts(f), charts.el, f.last_check ? lastCheck(f.last_check, f) : null);
  }

  load();
  return () => { gone = true; charts?.stop(); };
}

// facts is the card of the function's current revision.
function facts(f) {
  const cfg = f.config || {};
  const r = cfg.retries || {};
  const rows = [
    ["Revision", h("span", { class: "mono", "data-testid": "function-revision" }, `v${f.revision}`)],
    ["Registered", h("span", { title: fmtDateTime(f.created_at) }, timeAgo(f.created_at))],
    ["Timeout", h("span", null, cfg.timeout || "5m")],
    ["Attempts", h("span", { class: "num", title: "A step's attempts in all" }, String(r.max_attempts ?? 3))],
  ];
  if (cfg.invoke_roles && cfg.invoke_roles.length) rows.push(["Invoke roles", h("span", null, cfg.invoke_roles.map((x) => h("span", { class: "tag" }, x)))]);
  const flow = flowBadges(cfg);
  if (flow) rows.push(["Flow control", flow]);
  return h("dl", { class: "facts card", "data-testid": "function-facts" },
    h("div", { class: "fact fact-wide" }, h("dt", null, "URL"), h("dd", { class: "mono wrap", title: f.url }, f.url)),
    rows.map(([k, v]) => h("div", { class: "fact" }, h("dt", null, k), h("dd", null, v))));
}
