// A function's flow control: its limits as configured, and its queue as the gateway sees
// it now (GET /v1/functions/{name}/queue): runs queued, running and held, per
// concurrency key, and why held runs have not started.

import { h, icon, replace } from "../dom.js";
import { request } from "../api.js";
import { errorBox, modal } from "../dialog.js";

/** flowBadges returns the badges of a function config's flow control, or null. */
export function flowBadges(cfg) {
  const out = [];
  for (const c of cfg.concurrency || []) {
    out.push(h("span", { class: "tag", title: "At most this many runs running at once" + (c.key ? `, per ${c.key}` : "") },
      `≤${c.limit} running${c.key ? ` per ${keyName(c.key)}` : ""}`));
  }
  if (cfg.throttle) out.push(rateBadge("throttle", cfg.throttle, "Starts past the rate are queued", 0));
  if (cfg.rate_limit) out.push(rateBadge("rate limit", cfg.rate_limit, "Starts past the rate are refused (429)", cfg.rate_limit.limit - 1));
  if (cfg.debounce) {
    out.push(h("span", { class: "tag", title: "Starts within the period collapse into one run with the last input" },
      `debounce ${cfg.debounce.period}${cfg.debounce.key ? ` per ${keyName(cfg.debounce.key)}` : ""}`));
  }
  if (cfg.priority && cfg.priority !== 2) out.push(h("span", { class: "tag", title: "1 runs first, 4 last" }, `priority ${cfg.priority}`));
  return out.length ? h("div", { class: "sub", "data-testid": "flow-badges" }, out) : null;
}

// rateBadge shows a throttle's or a rate limit's rate; its title says how many starts
// pass at once after a quiet spell: 1 + burst, whose default (defaultBurst) is a rate
// limit's limit - 1 and a throttle's 0.
function rateBadge(what, r, title, defaultBurst) {
  const atOnce = 1 + (r.burst ?? defaultBurst);
  title += atOnce === 1 ? "; starts are spaced evenly" : `; up to ${atOnce} at once after a quiet spell`;
  return h("span", { class: "tag", title }, `${what} ${r.limit}/${r.period}${r.key ? ` per ${keyName(r.key)}` : ""}`);
}

function keyName(key) {
  return key.replace(/^input\./, "").replace(/^identity\./, "");
}

/** queueDialog shows the queue of the function name. */
export function queueDialog(name) {
  const body = h("div", { class: "stack", "data-testid": "queue-dialog" }, h("div", { class: "skeleton" }, h("div", { class: "sk-row" }, h("i"), h("i"))));
  modal({ title: `Queue of ${name}`, content: body, wide: true });
  request(`/v1/functions/${encodeURIComponent(name)}/queue`).then((q) => {
    replace(body,
      h("div", { class: "facts" },
        fact("Queued", q.queued), fact("Running", q.running), fact("Held back", q.held)),
      q.keys.length
        ? h("table", { class: "table", "data-testid": "queue-keys" },
          h("thead", null, h("tr", null, h("th", null, "Concurrency key"), h("th", { class: "num" }, "Running"),
            h("th", { class: "num" }, "Limit"), h("th", { class: "num" }, "Waiting"))),
          h("tbody", null, q.keys.map((k) => h("tr", null,
            h("td", { class: "mono" }, k.key || h("span", { class: "muted" }, "the whole function")),
            h("td", { class: "num" }, String(k.running)), h("td", { class: "num" }, k.limit ? String(k.limit) : "—"),
            h("td", { class: "num" }, String(k.held))))))
        : h("p", { class: "muted" }, "No concurrency key has runs running or waiting."),
      q.reasons.length
        ? h("div", null, h("h3", null, "Why runs wait"),
          h("ul", { "data-testid": "queue-reasons" }, q.reasons.map((r) => h("li", null, h("span", { class: "num" }, `${r.runs} `), r.reason))))
        : null);
  }, (e) => replace(body, errorBox("Couldn't load the queue", e, null)));
}

function fact(k, v) {
  return h("div", { class: "fact" }, h("dt", null, k), h("dd", null, h("span", { class: "num" }, String(v))));
}
