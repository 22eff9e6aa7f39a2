// One run: its facts, a waterfall of its journal, its input, output and identity, and the
// cancel and rerun actions. It follows the run's stream and refetches on each change.
//
// This file frames the page and renders it; the parts are in run/: follow.js (loading and
// live updates), actions.js, waiting.js, facts.js, timeline.js (with entry.js and row.js
// for its rows), panels.js, outputs.js (its values and streams) and requests.js (its
// requests and their replies).

import { h, icon, replace, badge, copyButton, shortID, TERMINAL } from "../dom.js";
import { request, APIError } from "../api.js";
import { errorBox, toast, errorMessage } from "../dialog.js";
import { liveIndicator } from "./live.js";
import { followRun } from "./run/follow.js";
import { runActions } from "./run/actions.js";
import { waiting } from "./run/waiting.js";
import { facts } from "./run/facts.js";
import { timeline, layout } from "./run/timeline.js";
import { errorCallout, dataPanels, identity } from "./run/panels.js";
import { outputs } from "./run/outputs.js";
import { requests } from "./run/requests.js";

/** runPage mounts run id into el; it returns its cleanup. */
export function runPage(el, id) {
  let run = null;
  let fn = null; // the function's current revision, to tell whether the run is on it
  let gone = false;
  let clock = 0;
  const open = new Set(); // timeline rows the reader opened, kept across refreshes
  const live = liveIndicator();
  const published = outputs(id); // kept across renders: its streams stay open
  const asked = requests(id);
  const body = h("div", { class: "run-page" }, h("div", { class: "skeleton tall" }, h("div", { class: "sk-row" }, h("i"), h("i"))));
  const crumb = h("span", { class: "crumb-here" }, h("span", { class: "mono" }, shortID(id)));
  replace(el,
    h("nav", { class: "crumbs", "aria-label": "Breadcrumb" },
      h("a", { href: "#/runs" }, icon("arrowLeft", 14), "Runs"),
      h("span", { class: "sep" }, "/"),
      crumb),
    body);

  const follow = followRun(id, {
    onRun(r) {
      run = r;
      render();
      if (!fn) loadFunction();
    },
    onError(e) {
      if (!run) replace(body, loadError(id, e, follow.reload));
      else toast(`Couldn't refresh the run: ${errorMessage(e)}`, "error");
    },
    onState: live.set,
  });

  async function loadFunction() {
    try {
      fn = await request(`/v1/functions/${encodeURIComponent(run.function)}`);
      if (!gone && fn.revision !== run.revision) render();
    } catch {
      fn = { revision: run.revision }; // deleted, or no functions:read: nothing to compare
    }
  }

  function render() {
    const r = run;
    replace(crumb,
      h("a", { href: `#/runs?function=${encodeURIComponent(r.function)}` }, r.function),
      h("span", { class: "sep" }, "/"),
      h("span", { class: "mono" }, shortID(r.id)));
    const tl = timeline(r, open);
    replace(body,
      head(r, live, runActions(r, { onCancelled: follow.reload })),
      waiting(r),
      asked.el,
      r.error ? errorCallout("The run failed", r.error) : null,
      facts(r, fn),
      tl,
      published.el,
      dataPanels(r),
      identity(r.identity));
    layout(tl, r);
    published.update();
    asked.update();
    clearInterval(clock);
    if (!TERMINAL.has(r.status)) clock = setInterval(() => layout(tl, r), 1000);
  }

  return () => {
    gone = true;
    follow.stop();
    published.stop();
    asked.stop();
    clearInterval(clock);
  };
}

// head is the page's title: the function, the status (live while it may change), the
// run's id, and the actions.
function head(r, live, actions) {
  return h("div", { class: "page-head run-head" },
    h("div", null,
      h("div", { class: "page-title" },
        h("h1", null, r.function),
        h("span", { "data-testid": "run-status" }, badge(r.status)),
        TERMINAL.has(r.status) ? null : live.el),
      h("div", { class: "run-id" }, h("span", { class: "mono", "data-testid": "run-id" }, r.id), copyButton(r.id, "Copy run id"))),
    actions);
}

// loadError explains why run id could not be shown; retry tries again.
function loadError(id, e, retry) {
  if (e instanceof APIError && (e.status === 404 || e.status === 400)) {
    return h("div", { class: "empty", "data-testid": "run-not-found" },
      h("h2", null, "Run not found"),
      h("p", null, "There is no run ", h("code", null, id), " in your tenant."),
      h("p", null, h("a", { href: "#/runs" }, "Back to the runs")));
  }
  return errorBox("Couldn't load this run", e, h("button", { type: "button", class: "btn small", onclick: retry }, icon("refresh", 13), "Try again"));
}
