// What a scheduled or suspended run waits on (its start, a retry, a sleep, a child run,
// an event, a message),
// and when it wakes: the run's `awaiting`, as the gateway stored it.

import { h, icon, fmtTime, fmtDateTime, countdown } from "../../dom.js";

/** waiting returns the "waiting on" callout for r, or null when r waits on nothing. */
export function waiting(r) {
  if (r.status !== "suspended" && r.status !== "scheduled") return null;
  const wake = r.wake_at;
  return h("div", { class: "callout waiting", "data-testid": "waiting" },
    icon("clock", 16),
    h("div", null, waitsOn(r),
      wake ? h("span", { class: "muted" }, " · wakes at ", h("time", { datetime: wake, title: fmtDateTime(wake) }, fmtTime(wake)), " (", countdown(wake), ")") : null));
}

// waitsOn names what r waits on.
function waitsOn(r) {
  if (r.status === "scheduled") return "Scheduled to start";
  const a = r.awaiting;
  switch (a && a.kind) {
    case "retry":
      return h("span", null, "Retrying step ", h("strong", null, a.name), ` (attempt ${(a.attempt || 0) + 1})`);
    case "sleep":
      return h("span", null, "Sleeping in ", h("strong", null, a.name));
    case "invoke":
      return h("span", null, "Waiting for the child run ", h("a", { href: `#/runs/${a.child_id}`, class: "mono" }, a.function),
        " of ", h("strong", null, a.name));
    case "wait_event":
      return h("span", { "data-testid": "waiting-event" }, "Waiting in ", h("strong", null, a.name), " for the event ",
        h("span", { class: "mono" }, a.event), ...matchText(a.match), " (times out)");
    case "receive":
      return h("span", null, "Waiting for a message on topic ", h("strong", { class: "mono" }, a.topic || a.name));
    default:
      return "Waiting";
  }
}

// matchText says which fields an awaited event must hold: " where data.id = "o-17" and …".
function matchText(match) {
  const pairs = Object.entries(match || {});
  if (!pairs.length) return [];
  const out = [" where "];
  pairs.forEach(([path, v], i) => {
    if (i) out.push(" and ");
    out.push(h("span", { class: "mono" }, path), " = ", h("span", { class: "mono" }, JSON.stringify(v)));
  });
  return out;
}
