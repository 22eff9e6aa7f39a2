// The run's data: its error, its input and output (or error), and the identity it runs as.

import { h, icon, TERMINAL } from "../../dom.js";
import { jsonPanel, jsonView } from "../../json.js";

/** errorCallout returns the callout of a run's error e under title. */
export function errorCallout(title, e) {
  return h("div", { class: "callout error", "data-testid": "run-error-callout" },
    icon("alert", 16),
    h("div", null,
      h("strong", null, title), " ", h("span", { class: "tag err" }, e.type),
      e.retryable === false ? h("span", { class: "tag" }, "not retryable") : null,
      h("p", { class: "mono wrap" }, e.message)));
}

/** dataPanels returns r's input beside its output, or its error when it has no output. */
export function dataPanels(r) {
  return h("div", { class: "grid-2" },
    jsonPanel("Input", r.input, { testid: "run-input" }),
    r.error && r.output === undefined
      ? h("section", { class: "panel", "data-testid": "run-error" },
          h("header", { class: "panel-head" }, h("h3", null, "Error")),
          h("div", { class: "panel-body" }, jsonView(r.error)))
      : jsonPanel("Output", r.output, { testid: "run-output", empty: TERMINAL.has(r.status) ? "no output" : "not finished yet" }));
}

/** identity returns the panel of who started the run, or null when id is missing. */
export function identity(id) {
  if (!id) return null;
  const claims = id.claims && Object.keys(id.claims).length ? id.claims : undefined;
  return h("section", { class: "panel identity", "data-testid": "identity" },
    h("header", { class: "panel-head" }, h("h3", null, "Identity"), h("span", { class: "muted small" }, "who started the run; sent to the function on every invocation")),
    h("div", { class: "panel-body" },
      h("dl", { class: "kv wide" },
        h("div", null, h("dt", null, "Subject"), h("dd", { class: "mono" }, icon("user", 13), " ", id.subject)),
        h("div", null, h("dt", null, "Tenant"), h("dd", { class: "mono" }, id.tenant)),
        h("div", null, h("dt", null, "Roles"), h("dd", null, id.roles && id.roles.length ? id.roles.map((r) => h("span", { class: "tag" }, r)) : h("span", { class: "muted" }, "none")))),
      claims ? h("div", { class: "claims" }, h("div", { class: "label" }, "Claims"), jsonView(claims)) : null));
}
