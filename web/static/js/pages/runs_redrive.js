// Bulk rerun (a redrive) from the runs list or the failures page: "Redrive…" asks first,
// stating the filter and where the new runs start; then it follows the operation's
// progress (see progress in runs_cancel.js) until it ends or is stopped.

import { h, fmtDateTime } from "../dom.js";
import { request } from "../api.js";
import { confirmAction } from "../dialog.js";
import { progress } from "./runs_cancel.js";

/**
 * redriveMatching asks to rerun the finished runs matching filter (the API's
 * CancelFilter) and shows the operation's progress. what describes the runs when the
 * filter alone would not (a failure group); count and more say how many loaded runs
 * match. onDone runs once the progress dialog closes.
 */
export async function redriveMatching({ filter, what, count, more, from = "failure", onDone }) {
  const criteria = [];
  if (what) criteria.push(h("li", null, what));
  if (filter.function) criteria.push(h("li", null, "function ", h("strong", null, filter.function)));
  criteria.push(h("li", null, "status ", h("strong", null, (filter.status || ["completed", "failed", "cancelled"]).join(", "))));
  if (filter.created_after) criteria.push(h("li", null, "created after ", h("strong", null, fmtDateTime(filter.created_after))));
  if (filter.created_before) criteria.push(h("li", null, "created before ", h("strong", null, fmtDateTime(filter.created_before))));
  const how = count == null ? null : more ? `At least ${count} run${count === 1 ? "" : "s"} match (more are not loaded).`
    : `${count} run${count === 1 ? "" : "s"} match now.`;
  const fromSelect = h("select", { class: "input", "aria-label": "Start each new run", "data-testid": "redrive-from" },
    h("option", { value: "failure", selected: from === "failure" }, "at the step where it failed"),
    h("option", { value: "start", selected: from === "start" }, "from the start"));
  const op = await confirmAction({
    title: "Redrive matching runs?",
    body: [
      h("p", null, "Every finished run of this tenant that matches and was created before now is ", h("strong", null, "rerun"),
        ": a new run on the function's current revision, with the same input, as you:"),
      h("ul", { "data-testid": "redrive-filter" }, criteria),
      how ? h("p", { "data-testid": "redrive-count" }, how) : null,
      h("label", { class: "field" }, h("span", null, "Start each new run "), fromSelect),
      h("p", { class: "muted" }, "The gateway reruns them in the background, 500 at a time; each run is rerun once."),
    ],
    confirmLabel: "Redrive",
    cancelLabel: "Never mind",
    action: () => request("/v1/runs/rerun", { method: "POST", body: { filter, from: fromSelect.value } }),
  });
  if (!op || !op.id) return;
  progress(op, onDone);
}
