// The dead-letter view: the tenant's failed runs grouped by function and error (type and
// message shape, GET /v1/failures), with, for each group, Inspect (the runs page filtered
// to the group), Redrive (a bulk rerun of the group) and Dismiss (hidden until it fails again).
// Each group says how many of its runs were redriven and how many of those completed;
// "Hide redriven" leaves out the groups every run of which was redriven successfully
// (hide_redriven), until one of their runs fails again.

import { h, icon, replace, timeAgo, fmtDateTime, shortID } from "../dom.js";
import { request, query, can } from "../api.js";
import { errorBox, confirmAction, toast } from "../dialog.js";
import { redriveMatching } from "./runs_redrive.js";

const WINDOWS = [["1h", "Last hour"], ["24h", "Last 24 hours"], ["7d", "Last 7 days"]];

/** failuresPage mounts the failures view into el; it returns its cleanup. */
export function failuresPage(el, params) {
  let gone = false;
  const f = { since: params.get("since") || "7d", all: params.get("all") === "1", hide: params.get("hide") === "1" };
  const sinceSelect = h("select", { class: "input", "aria-label": "Failed within", "data-testid": "failures-since" },
    WINDOWS.map(([v, label]) => h("option", { value: v, selected: v === f.since }, label)));
  const allBox = h("input", { type: "checkbox", checked: f.all, "data-testid": "failures-all" });
  const hideBox = h("input", { type: "checkbox", checked: f.hide, "data-testid": "failures-hide-redriven" });
  const refreshBtn = h("button", { type: "button", class: "btn", title: "Reload" }, icon("refresh", 14), h("span", null, "Refresh"));
  const content = h("div", { class: "card table-card" }, h("div", { class: "skeleton" }, Array.from({ length: 4 }, () => h("div", { class: "sk-row" }, h("i"), h("i"), h("i"), h("i")))));
  const mayRedrive = can("runs:invoke") && can("runs:manage");
  const mayDismiss = can("runs:manage");
  replace(el,
    h("div", { class: "page-head" },
      h("div", null, h("div", { class: "page-title" }, h("h1", null, "Failures")),
        h("p", { class: "muted sub-title" }, "Runs that failed for good, grouped by function and error. Numbers, ids and quoted strings in messages are shown as <num>, <uuid>, <hex> and <str>.")),
      h("div", { class: "page-actions" }, refreshBtn)),
    h("div", { class: "toolbar" }, sinceSelect, h("label", { class: "check" }, allBox, h("span", null, "Show dismissed")),
      h("label", { class: "check", title: "Leave out the groups every run of which was redriven successfully, until one fails again" }, hideBox, h("span", null, "Hide redriven"))),
    content);

  function syncURL() {
    history.replaceState(null, "", "#/failures" + query({ since: f.since === "7d" ? "" : f.since, all: f.all ? "1" : "", hide: f.hide ? "1" : "" }));
  }

  async function load() {
    let list;
    try {
      list = await request("/v1/failures" + query({ since: f.since, include_dismissed: f.all ? "true" : "", hide_redriven: f.hide ? "true" : "" }));
    } catch (e) {
      if (!gone) replace(content, h("div", { class: "pad" }, errorBox("Couldn't load the failures", e,
        h("button", { type: "button", class: "btn small", onclick: load }, icon("refresh", 13), "Try again"))));
      return;
    }
    if (gone) return;
    const groups = list.groups || [];
    if (groups.length === 0) {
      replace(content, h("div", { class: "empty", "data-testid": "empty-failures" },
        h("div", { class: "empty-icon" }, icon("check", 22)),
        h("h3", null, "No failed runs"),
        h("p", null, `Nothing failed since ${fmtDateTime(list.since)}${f.all ? "" : ", or every group is dismissed"}${f.hide ? ", or every run was redriven successfully" : ""}.`)));
      return;
    }
    replace(content,
      h("table", { class: "table", "data-testid": "failures-table" },
        h("thead", null, h("tr", null,
          h("th", null, "Function"), h("th", null, "Error"), h("th", { class: "num" }, "Runs"),
          h("th", { class: "num", title: "Runs rerun (a redrive, or one by one), and of those, the ones with a rerun that completed" }, "Redriven"),
          h("th", null, "First seen"), h("th", null, "Last seen"), h("th", null, "Latest run"), h("th", null, ""))),
        h("tbody", null, groups.map(row))),
      list.truncated ? h("p", { class: "muted pad" }, "More groups failed than are shown: narrow the window.") : null);
  }

  function row(g) {
    const redriven = g.redriven || 0, completed = g.redriven_completed || 0;
    const closed = g.count > 0 && completed === g.count;
    const inspect = h("a", { class: "btn small", href: "#/runs" + query({ status: "failed", error_group: g.group }), "data-testid": "failure-inspect" }, icon("search", 12), "Inspect");
    const redrive = mayRedrive
      ? h("button", { type: "button", class: "btn small", "data-testid": "failure-redrive", onclick: () => redriveGroup(g) }, icon("rerun", 12), "Redrive…")
      : null;
    const dismiss = mayDismiss && !g.dismissed_at
      ? h("button", { type: "button", class: "btn small ghost", "data-testid": "failure-dismiss", onclick: () => dismissGroup(g) }, icon("x", 12), "Dismiss")
      : null;
    return h("tr", { "data-group": g.group, "data-testid": "failure-group" },
      h("td", null, h("span", { class: "fn-name", "data-fn": g.function }, g.function)),
      h("td", null,
        h("div", null, h("span", { class: "tag" }, g.error_type || "error"), " ", h("span", { class: "mono", "data-testid": "failure-message", title: g.sample_message || "" }, g.message)),
        g.dismissed_at ? h("div", { class: "sub muted" }, `dismissed ${timeAgo(g.dismissed_at)}`) : null,
        closed ? h("div", { class: "sub muted", "data-testid": "failure-closed" }, "every run redriven successfully") : null),
      h("td", { class: "num", "data-testid": "failure-count" }, String(g.count)),
      h("td", { class: "num", "data-testid": "failure-redriven", "data-redriven": String(redriven), "data-completed": String(completed) },
        redriven === 0 ? h("span", { class: "muted" }, "0")
          : [h("div", null, String(redriven)), h("div", { class: "sub muted" }, `${completed} completed`)]),
      h("td", null, timeAgo(g.first_seen)),
      h("td", null, timeAgo(g.last_seen)),
      h("td", null, h("a", { href: `#/runs/${g.sample_run_id}`, class: "mono", title: g.sample_run_id }, "…" + shortID(g.sample_run_id))),
      h("td", { class: "actions" }, inspect, redrive, dismiss));
  }

  function redriveGroup(g) {
    redriveMatching({
      filter: { error_group: g.group },
      what: h("span", null, "failed runs of ", h("strong", null, g.function), " with ", h("span", { class: "mono" }, `${g.error_type}: ${g.message}`)),
      count: g.count, more: false, from: "failure", onDone: () => { if (!gone) load(); },
    });
  }

  async function dismissGroup(g) {
    const done = await confirmAction({
      title: "Dismiss this group?",
      body: [
        h("p", null, h("strong", null, `${g.count} failed run${g.count === 1 ? "" : "s"}`), ` of ${g.function}: `, h("span", { class: "mono" }, g.message)),
        h("p", { class: "muted" }, "The group is hidden until one of its runs fails again. The runs stay, until retention."),
      ],
      confirmLabel: "Dismiss",
      action: () => request(`/v1/failures/${g.group}/dismiss`, { method: "POST" }),
    });
    if (!done || gone) return;
    toast("Group dismissed");
    load();
  }

  sinceSelect.addEventListener("change", () => { f.since = sinceSelect.value; syncURL(); load(); });
  allBox.addEventListener("change", () => { f.all = allBox.checked; syncURL(); load(); });
  hideBox.addEventListener("change", () => { f.hide = hideBox.checked; syncURL(); load(); });
  refreshBtn.addEventListener("click", load);
  syncURL();
  load();
  return () => { gone = true; };
}
