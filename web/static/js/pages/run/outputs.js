// What the run publishes while it runs: its values (the latest of each key) and its
// streams, shown live. Values are reloaded with the run; each stream is read over
// server-sent events, every chunk once, until it ends.

import { h, replace, fmtRelative } from "../../dom.js";
import { request, streamChunks } from "../../api.js";
import { jsonView } from "../../json.js";

const maxStreams = 10; // streams shown; a run may have more (see the API)

/**
 * outputs returns {el, update(run), stop()}: el is the panel of run id's values and
 * streams (hidden while it has none), update reloads them for a newer version of the
 * run, stop closes the streams.
 */
export function outputs(id) {
  const valuesEl = h("div", { "data-testid": "run-values" });
  const streamsEl = h("div", { "data-testid": "run-streams" });
  const el = h("section", { class: "panel outputs", hidden: true, "data-testid": "run-outputs" },
    h("header", { class: "panel-head" }, h("h3", null, "Published"), h("span", { class: "muted small" }, "values and streams the run writes while it runs")),
    h("div", { class: "panel-body" }, valuesEl, streamsEl));
  const streams = new Map(); // key -> {stop, body, state}
  let stopped = false;
  let loading = false;
  let again = false;

  async function update() {
    if (loading) { again = true; return; }
    loading = true;
    try {
      const [vs, ss] = await Promise.all([
        request(`/v1/runs/${encodeURIComponent(id)}/values`),
        request(`/v1/runs/${encodeURIComponent(id)}/streams`),
      ]);
      if (stopped) return;
      renderValues(vs.values);
      for (const s of ss.streams.slice(0, maxStreams)) if (!streams.has(s.key)) openStream(s.key);
      el.hidden = vs.values.length === 0 && streams.size === 0;
    } catch {
      // no runs:read, or a passing failure: the next update tries again
    } finally {
      loading = false;
      if (again && !stopped) { again = false; update(); }
    }
  }

  function renderValues(values) {
    replace(valuesEl, values.length === 0 ? null :
      h("table", { class: "table values" },
        h("thead", null, h("tr", null, h("th", null, "Key"), h("th", null, "Value"), h("th", null, "Version"), h("th", null, "Set"))),
        h("tbody", null, values.map((v) =>
          h("tr", { "data-testid": "run-value", "data-key": v.key },
            h("td", { class: "mono" }, v.key),
            h("td", { "data-testid": "run-value-value" }, v.value !== null && typeof v.value === "object" ? jsonView(v.value, { open: 1 }) : h("span", { class: "mono" }, JSON.stringify(v.value))),
            h("td", { class: "mono muted" }, String(v.version)),
            h("td", { class: "muted small", title: v.set_at }, fmtRelative(v.set_at)))))));
  }

  function openStream(key) {
    const body = h("pre", { class: "mono wrap stream-body", "data-testid": "run-stream-body" });
    const state = h("span", { class: "tag" }, "live");
    streamsEl.append(h("div", { class: "stream", "data-testid": "run-stream", "data-key": key },
      h("div", { class: "label" }, h("span", { class: "mono" }, key), " ", state),
      body));
    const stop = streamChunks(id, key, {
      // Text chunks are joined as they come (tokens); other values one per line.
      onChunk: (_, v) => body.append(typeof v === "string" ? v : JSON.stringify(v) + "\n"),
      onEnd: (end) => replace(state, end.reason === "closed" ? "closed" : "run finished", ` · ${end.length} chunks`),
    });
    streams.set(key, { stop });
  }

  return {
    el,
    update,
    stop() {
      stopped = true;
      for (const s of streams.values()) s.stop();
    },
  };
}
