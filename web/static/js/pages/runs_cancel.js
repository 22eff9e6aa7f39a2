// Bulk cancel from the runs list: "Cancel matching…" asks first, stating the filter and,
// when every matching run is loaded, how many; then it follows the operation's progress
// (GET /v1/operations/{id}, polled) until it ends.

import { h, icon, replace, fmtDateTime } from "../dom.js";
import { request } from "../api.js";
import { confirmAction, modal, errorBox, toast } from "../dialog.js";

const POLL_MS = 500;

/**
 * cancelMatching asks to cancel the runs matching filter (the API's CancelFilter) and
 * shows the operation's progress. count is how many loaded runs match, exact when all
 * are loaded (more false). onDone runs once the operation ended.
 */
export async function cancelMatching({ filter, count, more, onDone }) {
  const criteria = [];
  if (filter.function) criteria.push(h("li", null, "function ", h("strong", null, filter.function)));
  criteria.push(h("li", null, "status ", h("strong", null, (filter.status || ["scheduled", "queued", "running", "suspended"]).join(", "))));
  if (filter.created_after) criteria.push(h("li", null, "created after ", h("strong", null, fmtDateTime(filter.created_after))));
  if (filter.created_before) criteria.push(h("li", null, "created before ", h("strong", null, fmtDateTime(filter.created_before))));
  const how = more ? `At least ${count} run${count === 1 ? "" : "s"} match (more are not loaded).`
    : `${count} run${count === 1 ? "" : "s"} match now.`;
  const op = await confirmAction({
    title: "Cancel matching runs?",
    body: [
      h("p", null, "Every run of this tenant that matches, has not finished, and was created before now becomes ", h("strong", null, "cancelled"), ", with its child runs (except detached ones):"),
      h("ul", { "data-testid": "cancel-filter" }, criteria),
      h("p", { "data-testid": "cancel-count" }, how),
      h("p", { class: "muted" }, "The gateway cancels them in the background, 1,000 at a time. This cannot be undone."),
    ],
    confirmLabel: "Cancel matching runs",
    cancelLabel: "Keep them",
    danger: true,
    action: () => request("/v1/runs/cancel", { method: "POST", body: filter }),
  });
  if (!op || !op.id) return;
  progress(op, onDone);
}

/**
 * progress shows a bulk operation's progress (a cancel or a rerun), polling it until it
 * ends; its Stop button cancels the operation. onDone runs once the dialog closes.
 */
export function progress(op, onDone) {
  const rerun = op.kind === "rerun";
  const verb = rerun ? "rerun" : "cancelled";
  const bar = h("progress", { max: 1, value: 0, "data-testid": "operation-progress" });
  const text = h("p", { "data-testid": "operation-text" });
  const errors = h("ul", { class: "muted", "data-testid": "operation-errors" });
  const err = h("div");
  const stop = h("button", { type: "button", class: "btn danger-outline", "data-testid": "operation-stop", onclick: () => stopIt() },
    icon("stop", 13), h("span", null, "Stop"));
  let timer = 0;
  let closed = false;
  const dlg = modal({
    title: rerun ? "Rerunning runs" : "Cancelling runs",
    content: h("div", { class: "dialog-body", "data-testid": "operation" }, bar, text, errors, err, h("footer", null, stop)),
    onClose: () => { closed = true; clearTimeout(timer); if (onDone) onDone(); },
  });
  const done = (o) => (rerun ? o.done : o.cancelled) || 0;
  const show = (o) => {
    const total = o.matched ?? null;
    const n = done(o);
    const failed = o.failed || 0;
    bar.max = Math.max(total || 0, n + failed, 1);
    bar.value = n + failed;
    const of = total === null ? "" : ` of ${total}`;
    const nf = failed ? `, ${failed} could not be` : "";
    text.textContent = o.status === "running"
      ? `${n}${of} ${verb} so far${nf} (${o.batches} batches)…`
      : o.status === "completed"
        ? `Done: ${n} run${n === 1 ? "" : "s"} ${verb}${nf}.`
        : o.status === "cancelled"
          ? `Stopped after ${n} run${n === 1 ? "" : "s"} ${verb}${nf}.`
          : `Failed after ${n} runs: ${o.error || "unknown error"}`;
    text.dataset.status = o.status;
    stop.hidden = o.status !== "running";
    replace(errors, (o.errors || []).slice(0, 5).map((e) => h("li", null, h("a", { href: `#/runs/${e.run_id}`, class: "mono" }, "…" + e.run_id.slice(-8)), " ", e.error)));
  };
  const poll = async () => {
    try {
      const o = await request(`/v1/operations/${op.id}`);
      if (closed) return;
      show(o);
      if (o.status === "running") {
        timer = setTimeout(poll, POLL_MS);
      } else if (o.status === "completed") {
        toast(`${done(o)} runs ${verb}`);
      }
    } catch (e) {
      if (!closed) err.replaceChildren(errorBox("Couldn't read the operation's progress", e));
    }
  };
  async function stopIt() {
    stop.disabled = true;
    try {
      show(await request(`/v1/operations/${op.id}/cancel`, { method: "POST" }));
    } catch (e) {
      err.replaceChildren(errorBox("Couldn't stop the operation", e));
    }
    stop.disabled = false;
  }
  show(op);
  poll();
  return dlg;
}
