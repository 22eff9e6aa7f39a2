// The indicator of the live stream's state, shown next to a page's title.

import { h, replace } from "../dom.js";
import { errorMessage } from "../dialog.js";

const TEXT = { connecting: "Connecting…", live: "Live", retrying: "Reconnecting…", unavailable: "Live updates off" };

/** liveIndicator returns {el, set}; set takes the states streamRuns reports. */
export function liveIndicator() {
  const text = h("span", { class: "live-text" }, TEXT.connecting);
  const el = h("span", { class: "live", "data-state": "connecting", "data-testid": "live" }, h("i", { class: "live-dot" }), text);
  return {
    el,
    set(state, err) {
      el.dataset.state = state;
      replace(text, TEXT[state] || state);
      el.title = state === "live"
        ? "New runs and status changes appear as they happen."
        : state === "unavailable" && err
          ? `${errorMessage(err)} Reload to see changes.`
          : "";
      if (state === "unavailable" && err) text.append(h("span", { class: "live-detail" }, ": " + (err.detail || err.title)));
    },
  };
}
