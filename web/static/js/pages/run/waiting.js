// What a scheduled or suspended run waits on (its start, a retry, a sleep, a child run),
// and when it wakes.

import { h, icon, fmtTime, fmtDateTime, countdown, ms } from "../../dom.js";
import { pendingRetries } from "./pending.js";

/** waiting returns the "waiting on" callout for r, or null when r waits on nothing. */
export function waiting(r) {
  if (r.status !== "suspended" && r.status !== "scheduled") return null;
  const last = r.journal[r.journal.length - 1];
  const wake = r.wake_at || (last && last.kind === "sleep" ? last.until : null);
  return h("div", { class: "callout waiting", "data-testid": "waiting" },
    icon("clock", 16),
    h("div", null, waitsOn(r, last),
      wake ? h("span", { class: "muted" }, " · wakes at ", h("time", { datetime: wake, title: fmtDateTime(wake) }, fmtTime(wake)), " (", countdown(wake), ")") : null));
}

// waitsOn names what r waits on; last is its last journal entry, if any.
function waitsOn(r, last) {
  const pending = pendingRetries(r)[0];
  if (r.status === "scheduled") return "Scheduled to start";
  if (pending) return h("span", null, "Retrying step ", h("strong", null, pending.name), ` (attempt ${pending.attempt + 1})`);
  if (last && last.kind === "sleep" && last.until && ms(last.until) > ms(r.created_at)) {
    return h("span", null, "Sleeping in ", h("strong", null, last.name));
  }
  if (r.status === "suspended" && !r.wake_at) return "Waiting for a child run to end";
  return "Waiting";
}
