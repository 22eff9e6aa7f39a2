// What a scheduled or suspended run waits on (its start, a retry, a sleep, a child run,
// an event, a message, a request, a callback), and when it wakes: the run's `awaiting`, as the
// gateway stored it. A callback can be approved or rejected from here by roles with
// runs:manage, who may also read its whole URL to hand it on.

import { h, icon, replace, fmtTime, fmtDateTime, countdown, copyButton } from "../../dom.js";
import { request, can, APIError } from "../../api.js";
import { confirmAction, toast, modal, errorBox } from "../../dialog.js";

/** waiting returns the "waiting on" callout for r, or null when r waits on nothing. */
export function waiting(r) {
  if (r.status !== "suspended" && r.status !== "scheduled") return null;
  const wake = r.wake_at;
  return h("div", { class: "callout waiting", "data-testid": "waiting" },
    icon("clock", 16),
    h("div", null, waitsOn(r),
      wake ? h("span", { class: "muted" }, " · wakes at ", h("time", { datetime: wake, title: fmtDateTime(wake) }, fmtTime(wake)), " (", countdown(wake), ")") : null),
    callbackActions(r));
}

// callbackActions returns the Approve and Reject buttons of a run waiting for a
// callback, for roles with runs:manage; null otherwise.
function callbackActions(r) {
  const w = r.awaiting;
  // A callback awaited alone, or as one of the alternatives of a wait_any.
  const a = w && (w.kind === "await_callback" ? w : (w.of || []).find((o) => o.kind === "await_callback"));
  if (r.status !== "suspended" || !a || !can("runs:manage")) return null;
  const path = `/v1/runs/${r.id}/callbacks/${encodeURIComponent(a.name)}`;
  return h("div", { class: "page-actions" },
    h("button", { type: "button", class: "btn primary small", "data-testid": "approve-callback", onclick: () => approve(a, path) }, icon("check", 12), "Approve"),
    h("button", { type: "button", class: "btn danger-outline small", "data-testid": "reject-callback", onclick: () => reject(a, path) }, "Reject"),
    h("button", { type: "button", class: "btn small", "data-testid": "show-callback-url", onclick: () => showURL(r.id, a.name) }, "URL"));
}

// showURL shows the whole URL of the run's open callback named name (the latest of that
// name), from GET /v1/runs/{id}/callbacks, which needs runs:manage: every other read
// masks its token.
function showURL(id, name) {
  const body = h("div", { class: "dialog-body stack", "data-testid": "callback-url-dialog", style: "padding: 12px 20px 20px" }, h("div", { class: "skeleton" }, h("div", { class: "sk-row" }, h("i"), h("i"))));
  modal({ title: `URL of ${name}`, content: body });
  request(`/v1/runs/${id}/callbacks`).then((list) => {
    const cb = list.callbacks.filter((c) => c.name === name).pop();
    if (!cb) {
      replace(body, h("p", { class: "muted" }, "The callback is not open any more: it was resolved, it expired, or its run finished."));
      return;
    }
    replace(body,
      h("p", null, "Whoever holds this URL resolves the callback with a POST (", h("code", null, "…/reject"), " rejects it), with no account: hand it only to whom should answer. It expires at ",
        h("time", { datetime: cb.expires_at }, fmtDateTime(cb.expires_at)), "."),
      h("div", { class: "run-id" },
        h("input", { class: "input code", readonly: true, value: cb.url, "data-testid": "callback-url", style: "width:100%" }),
        copyButton(cb.url, "Copy URL")));
  }, (e) => replace(body, errorBox("Couldn't load the callback's URL", e, null)));
}

async function approve(a, path) {
  const data = h("textarea", { class: "input code", rows: 6, spellcheck: "false", "data-testid": "callback-data", value: "{}", style: "width:100%" });
  const res = await confirmAction({
    title: `Approve ${a.name}?`,
    body: [
      h("p", null, "The run's callback ", h("strong", null, a.name), " is resolved with this data, as you, and the run goes on."),
      h("p", null, h("label", null, "Data (JSON)")), data,
    ],
    confirmLabel: "Approve",
    action: () => {
      const text = data.value.trim() || "null";
      try {
        JSON.parse(text);
      } catch (e) {
        throw new APIError(400, "Bad Request", `the data is not valid JSON: ${e.message}`);
      }
      return request(path, { method: "POST", body: text, raw: true });
    },
  });
  if (res) toast(`Callback ${a.name} approved`);
}

async function reject(a, path) {
  const message = h("textarea", { class: "input", rows: 3, "data-testid": "callback-message", placeholder: "why", style: "width:100%" });
  const res = await confirmAction({
    title: `Reject ${a.name}?`,
    body: [
      h("p", null, "The run's callback ", h("strong", null, a.name), " is rejected with this message, as you: the run gets an error of type ", h("code", null, "rejected"), "."),
      h("p", null, h("label", null, "Message")), message,
    ],
    confirmLabel: "Reject",
    danger: true,
    action: () => {
      if (!message.value.trim()) throw new APIError(400, "Bad Request", "a rejection needs a message");
      return request(path + "/reject", { method: "POST", body: { message: message.value.trim() } });
    },
  });
  if (res) toast(`Callback ${a.name} rejected`);
}

// waitsOn names what r waits on.
function waitsOn(r) {
  if (r.status === "scheduled") return "Scheduled to start";
  const a = r.awaiting;
  // Awaiting nothing: a continue (the function stopped early to stay under its time
  // limit), or a step the gateway gave up on; the run is called again at once.
  if (!a) return h("span", { "data-testid": "waiting-continue" }, "Due again at once, in a new invocation");
  if (a && a.kind === "wait_any") {
    const out = [];
    (a.of || []).forEach((o, i) => out.push(i ? " or " : "", awaitText(o)));
    return h("span", { "data-testid": "waiting-any" }, "Waiting in ", h("strong", null, a.name), " for the first of: ", ...out);
  }
  return awaitText(a);
}

// requestTopicPrefix begins the topic of every request (journal.RequestTopicPrefix).
const requestTopicPrefix = "request:";

// awaitText names one await.
function awaitText(a) {
  switch (a && a.kind) {
    case "retry":
      return h("span", null, "Retrying step ", h("strong", null, a.name), ` (attempt ${(a.attempt || 0) + 1})`);
    case "sleep":
      return h("span", null, "Sleeping in ", h("strong", null, a.name));
    case "invoke":
      return h("span", null, "Waiting for the child run ", h("a", { href: `#/runs/${a.child_id}`, class: "mono" }, a.function),
        " of ", h("strong", null, a.name));
    case "invoke_all":
      return h("span", { "data-testid": "waiting-children" }, `Waiting for ${a.count} child runs of `, h("strong", null, a.name),
        ` (seqs ${a.seq} to ${a.seq + a.count - 1}; the children list shows them)`);
    case "wait_event":
      return h("span", { "data-testid": "waiting-event" }, "Waiting in ", h("strong", null, a.name), " for the event ",
        h("span", { class: "mono" }, a.event), ...matchText(a.match), " (times out)");
    case "receive": {
      const topic = a.topic || a.name;
      // The topic "request:<name>" is reserved for requests (step.ReceiveRequest).
      if (topic.startsWith(requestTopicPrefix)) {
        return h("span", { "data-testid": "waiting-request" }, "Waiting for a request named ",
          h("strong", { class: "mono" }, topic.slice(requestTopicPrefix.length)));
      }
      return h("span", null, "Waiting for a message on topic ", h("strong", { class: "mono" }, topic));
    }
    case "await_callback":
      return h("span", { "data-testid": "waiting-callback" }, "Waiting for the callback ", h("strong", null, a.name), " (approval or webhook)");
    case "await_run":
      return h("span", { "data-testid": "waiting-run" }, "Waiting in ", h("strong", null, a.name), " for the end of the run ",
        h("a", { href: `#/runs/${a.run_id}`, class: "mono" }, a.run_id), " (times out)");
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
