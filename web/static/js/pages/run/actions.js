// The run's actions: cancel a run that has not ended, rerun one that has (from the start,
// or from one of its journal entries). Each asks first, and shows only when the token's
// roles allow it.

import { h, icon, navigate, TERMINAL } from "../../dom.js";
import { request, can } from "../../api.js";
import { confirmAction, toast } from "../../dialog.js";

/** runActions returns the buttons for r; onCancelled runs once the gateway cancelled it. */
export function runActions(r, { onCancelled }) {
  const actions = h("div", { class: "page-actions" });
  if (!TERMINAL.has(r.status) && can("runs:manage")) {
    actions.append(h("button", { type: "button", class: "btn danger-outline", "data-testid": "cancel-run", onclick: () => cancel(r, onCancelled) }, icon("stop", 13), "Cancel run"));
  }
  if (TERMINAL.has(r.status) && can("runs:invoke")) {
    actions.append(h("button", { type: "button", class: "btn", "data-testid": "rerun-run", onclick: () => rerun(r) }, icon("rerun", 14), "Rerun"));
  }
  return actions;
}

async function cancel(r, onCancelled) {
  const res = await confirmAction({
    title: "Cancel this run?",
    body: [
      h("p", null, "The run of ", h("strong", null, r.function), " becomes ", h("strong", null, "cancelled"), " at once."),
      childNote(r),
      h("p", { class: "muted" }, "A running invocation is fenced out (its checkpoints and answer are refused) and the function is not called again. This cannot be undone, but you can rerun it later."),
    ],
    confirmLabel: "Cancel run",
    cancelLabel: "Keep running",
    danger: true,
    action: () => request(`/v1/runs/${r.id}/cancel`, { method: "POST" }),
  });
  if (!res) return;
  toast("Run cancelled");
  onCancelled();
}

// childNote says that the run's children are cancelled with it: a run waits for one child
// at a time, so the one it waits for now (and what is below it) is the tree, unless that
// child was started detached.
function childNote(r) {
  const a = r.awaiting;
  if (a && a.kind === "invoke" && a.child_id) {
    return h("p", { "data-testid": "cancel-children" }, "It waits for a child run of ", h("strong", null, a.function || "a function"),
      " (", h("a", { href: `#/runs/${a.child_id}`, class: "mono" }, a.child_id.slice(-8)), "): that child, and the runs it started, are cancelled too unless it was started detached.");
  }
  return h("p", { "data-testid": "cancel-children" }, "Its child runs that have not finished, and theirs, are cancelled too, except those started detached.");
}

async function rerun(r) {
  const res = await confirmAction({
    title: "Rerun this run?",
    body: [
      h("p", null, "A new run of ", h("strong", null, r.function), " starts with this run's input, on the function's current revision, as you."),
      h("p", { class: "muted" }, "This run stays as it is, with its own identity; the new one links back to it."),
    ],
    confirmLabel: "Start rerun",
    action: () => request(`/v1/runs/${r.id}/rerun`, { method: "POST" }),
  });
  if (res && res.id) {
    toast("Rerun started");
    navigate(`#/runs/${res.id}`);
  }
}

/** mayRerun reports whether run r can be rerun by this token: it has ended, and the roles allow starting runs. */
export function mayRerun(r) {
  return TERMINAL.has(r.status) && can("runs:invoke");
}

/** rerunFrom asks, then reruns r from journal entry e: the entries before it are copied and replayed, e onwards runs again. */
export async function rerunFrom(r, e) {
  const res = await confirmAction({
    title: `Rerun from step ${e.seq}?`,
    body: [
      h("p", null, "A new run of ", h("strong", null, r.function), " starts with this run's input, on the function's current revision, as you."),
      h("p", null, "Its journal starts with copies of this run's entries before seq ", h("strong", null, String(e.seq)),
        ", which it replays without running them again; ", h("strong", null, e.name), " and what follows run again."),
      h("p", { class: "muted" }, "This run stays as it is; the new one links back to it, and marks its copied entries."),
    ],
    confirmLabel: `Rerun from ${e.seq}`,
    action: () => request(`/v1/runs/${r.id}/rerun`, { method: "POST", body: { from_seq: e.seq } }),
  });
  if (res && res.id) {
    toast(`Rerun from step ${e.seq} started`);
    navigate(`#/runs/${res.id}`);
  }
}
