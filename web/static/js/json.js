// A JSON viewer: syntax-highlighted, every object and array collapsible. Collapsed
// nodes build their children only when first opened, so large values stay cheap.

import { h, icon, copyButton } from "./dom.js";

/** jsonView renders value, opening nodes down to depth `open`. */
export function jsonView(value, { open = 2 } = {}) {
  const root = h("div", { class: "json", role: "tree" });
  root.append(node(value, undefined, 0, true, open));
  return root;
}

const punct = (s) => h("span", { class: "j-p" }, s);

function node(v, key, depth, last, open) {
  const keyEl = key === undefined ? null : [h("span", { class: "j-key" }, JSON.stringify(key)), punct(": ")];
  const comma = last ? null : punct(",");
  if (v === null || typeof v !== "object") return h("div", { class: "j-line" }, keyEl, scalar(v), comma);

  const isArray = Array.isArray(v);
  const entries = isArray ? v.map((x, i) => [undefined, x]) : Object.entries(v);
  const [o, c] = isArray ? ["[", "]"] : ["{", "}"];
  if (entries.length === 0) return h("div", { class: "j-line" }, keyEl, punct(o + c), comma);

  const n = entries.length;
  const count = isArray ? `${n} item${n === 1 ? "" : "s"}` : `${n} key${n === 1 ? "" : "s"}`;
  const d = h("details", { class: "j-node", open: depth < open });
  d.append(h("summary", { class: "j-line" }, keyEl, punct(o),
    h("span", { class: "j-folded" }, h("span", { class: "j-more" }, "…"), punct(c), comma, h("span", { class: "j-count" }, count))));
  const build = () => {
    const kids = h("div", { class: "j-kids", role: "group" });
    entries.forEach(([k, x], i) => kids.append(node(x, k, depth + 1, i === n - 1, open)));
    d.append(kids, h("div", { class: "j-line j-close" }, punct(c), comma));
  };
  if (d.open) build();
  else d.addEventListener("toggle", build, { once: true });
  return d;
}

function scalar(v) {
  switch (typeof v) {
    case "string": return h("span", { class: "j-str" }, JSON.stringify(v));
    case "number": return h("span", { class: "j-num" }, String(v));
    case "boolean": return h("span", { class: "j-bool" }, String(v));
    default: return h("span", { class: "j-null" }, "null");
  }
}

/** setOpen opens or folds every node under root, building folded ones as it goes. */
function setOpen(root, open) {
  for (;;) {
    const closed = [...root.querySelectorAll("details.j-node")].filter((d) => d.open !== open);
    if (closed.length === 0) return;
    for (const d of closed) {
      d.open = open;
      d.dispatchEvent(new Event("toggle")); // the toggle event is async; build children now
    }
    if (!open) return;
  }
}

/**
 * jsonPanel is a titled box with value as JSON, a copy button and expand/fold all.
 * With value undefined it shows `empty` instead.
 */
export function jsonPanel(title, value, { empty = "none", open = 2, testid } = {}) {
  const has = value !== undefined;
  const view = has ? jsonView(value, { open }) : h("div", { class: "json-empty" }, empty);
  const tools = has
    ? h("div", { class: "panel-tools" },
        typeof value === "object" && value !== null
          ? [
              h("button", { type: "button", class: "icon-btn", title: "Expand all", "aria-label": "Expand all", onclick: () => setOpen(view, true) }, icon("expand", 14)),
              h("button", { type: "button", class: "icon-btn", title: "Fold all", "aria-label": "Fold all", onclick: () => setOpen(view, false) }, icon("fold", 14)),
            ]
          : null,
        copyButton(() => JSON.stringify(value, null, 2), "Copy JSON"))
    : null;
  return h("section", { class: "panel json-panel", "data-testid": testid },
    h("header", { class: "panel-head" }, h("h3", null, title), tools),
    h("div", { class: "panel-body" }, view));
}
