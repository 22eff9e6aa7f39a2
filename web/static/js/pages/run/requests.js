// The run's requests (POST /v1/runs/{id}/requests), newest first: the pending ones first
// and prominent (sent, and not replied to yet: in the run's mailbox, or taken by the
// run), then the answered ones with their reply, or their error (an error reply, or
// no_reply for a request the run ended without replying to). Reloaded with the run.

import { h, replace, fmtRelative } from "../../dom.js";
import { runRequests } from "../../api.js";
import { jsonView } from "../../json.js";

/**
 * requests returns {el, update(), stop()}: el is the panel of run id's requests (hidden
 * while it has none), update reloads them for a newer version of the run.
 */
export function requests(id) {
  const body = h("div", { class: "panel-body" });
  const el = h("section", { class: "panel requests", hidden: true, "data-testid": "run-requests" },
    h("header", { class: "panel-head" }, h("h3", null, "Requests"),
      h("span", { class: "muted small" }, "sent to the run, answered by its replies (newest first)")),
    body);
  let stopped = false;
  let loading = false;
  let again = false;

  async function update() {
    if (loading) { again = true; return; }
    loading = true;
    try {
      const page = await runRequests(id);
      if (stopped) return;
      render(page.requests, Boolean(page.next_cursor));
    } catch {
      // no runs:read, or a passing failure: the next update tries again
    } finally {
      loading = false;
      if (again && !stopped) { again = false; update(); }
    }
  }

  function render(rs, more) {
    el.hidden = rs.length === 0;
    const pending = rs.filter((r) => r.status === "pending");
    const answered = rs.filter((r) => r.status !== "pending");
    replace(body,
      pending.length ? h("div", { class: "callout waiting requests-pending", "data-testid": "run-requests-pending" },
        h("div", null,
          h("strong", null, `${pending.length} pending request${pending.length === 1 ? "" : "s"}`),
          h("ul", { class: "plain" }, pending.map(pendingItem)))) : null,
      answered.length ? h("table", { class: "table" },
        h("thead", null, h("tr", null, h("th", null, "Request"), h("th", null, "Name"), h("th", null, "Status"), h("th", null, "Data"), h("th", null, "Reply"), h("th", null, "Replied"))),
        h("tbody", null, answered.map(answeredRow))) : null,
      more ? h("p", { class: "muted small" }, "Older requests: see the API (GET /v1/runs/{id}/requests with cursor).") : null);
  }

  return {
    el,
    update,
    stop() { stopped = true; },
  };
}

// pendingItem is a pending request: its name and data, and whether the run has taken it.
function pendingItem(r) {
  return h("li", { "data-testid": "run-request", "data-id": r.id, "data-status": r.status },
    h("span", { class: "tag warn" }, "pending"), " ",
    h("strong", { class: "mono" }, r.name), " ",
    h("span", { class: "mono muted" }, r.id), " ",
    h("span", { class: "muted" }, r.received ? "taken by the run, not replied to yet" : "waiting in the run's mailbox"),
    " · sent ", h("span", { title: r.sent_at }, fmtRelative(r.sent_at)),
    r.data !== undefined ? h("div", { "data-testid": "run-request-data" }, value(r.data)) : null);
}

// answeredRow is a replied or failed request, with its reply or its error.
function answeredRow(r) {
  return h("tr", { "data-testid": "run-request", "data-id": r.id, "data-status": r.status },
    h("td", { class: "mono" }, r.id),
    h("td", { class: "mono" }, r.name),
    h("td", null, h("span", { class: r.status === "failed" || r.error ? "tag err" : "tag" }, r.status)),
    h("td", null, r.data !== undefined ? value(r.data) : h("span", { class: "muted" }, "—")),
    h("td", null, r.error
      ? h("span", { "data-testid": "run-request-error" }, h("span", { class: "tag err" }, r.error.type), " ", h("span", { class: "mono wrap" }, r.error.message))
      : h("span", { "data-testid": "run-request-reply" }, r.reply !== undefined ? value(r.reply) : h("span", { class: "muted" }, "null"))),
    h("td", { class: "muted small", title: r.replied_at || "" }, r.replied_at ? fmtRelative(r.replied_at) : "—"));
}

function value(v) {
  return v !== null && typeof v === "object" ? jsonView(v, { open: 1 }) : h("span", { class: "mono" }, JSON.stringify(v));
}
