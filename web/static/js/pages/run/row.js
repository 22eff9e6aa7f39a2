// The parts of a waterfall row. Every bar and marker carries its times in data-a and
// data-b ("now" for an open end); the timeline's layout places them on the run's axis.

import { h, icon, fmtTime, fmtDateTime } from "../../dom.js";

/**
 * item returns one collapsible row under key: a summary line (label, track, dur) and its
 * detail. The timeline keeps which rows are open.
 */
export function item(key, { label, track, dur, detail, testid, cls }) {
  return h("details", { class: ["wf-item", cls], "data-key": key, "data-testid": testid },
    h("summary", { class: "wf-row" },
      h("div", { class: "wf-label" }, h("span", { class: "wf-caret" }, icon("chevron", 12)), label),
      h("div", { class: "wf-track" }, track),
      h("div", { class: "wf-dur" }, dur)),
    h("div", { class: "wf-detail" }, detail));
}

/** bar returns a bar from a to b, with text inside if given. */
export function bar(cls, a, b, title, text) {
  return h("div", { class: `wf-bar ${cls}`, "data-a": a, "data-b": b, title }, text ? h("span", { class: "wf-bar-text" }, text) : null);
}

/** marker returns the mark of failure f at its time. */
export function marker(f) {
  return h("div", {
    class: "wf-mark", "data-a": f.created_at,
    title: `attempt ${f.attempt} failed at ${fmtTime(f.created_at)}: ${f.error.type}: ${f.error.message}`,
  });
}

/** failureTable returns the table of failed attempts. */
export function failureTable(failures) {
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

/** kv returns one term and its value, for a <dl class="kv">. */
export function kv(k, v) {
  return h("div", null, h("dt", null, k), h("dd", null, v));
}
