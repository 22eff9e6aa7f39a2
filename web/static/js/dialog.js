// Modal dialogs (native <dialog>, so they trap focus and close on Escape) and toasts.

import { h, icon, replace } from "./dom.js";
import { APIError } from "./api.js";

/**
 * errorMessage turns an error into one readable sentence: a problem's detail, with a
 * hint for the statuses people can act on. Never a stack trace.
 */
export function errorMessage(err) {
  if (err instanceof APIError) {
    const d = err.detail || err.title;
    switch (err.status) {
      case 0: return "The gateway did not answer. Is it running?";
      case 403: return `Not allowed: ${d}.`;
      case 501: return `${capitalize(d)} on this gateway.`;
      default: return capitalize(d) + (/[.!?]$/.test(d) ? "" : ".");
    }
  }
  return "Something went wrong in the dashboard: " + (err && err.message ? err.message : String(err));
}

function capitalize(s) {
  return s ? s[0].toUpperCase() + s.slice(1) : s;
}

/** errorBox is a callout saying what failed and why. */
export function errorBox(title, err, ...extra) {
  return h("div", { class: "callout error", role: "alert" },
    icon("alert", 16),
    h("div", null, h("strong", null, title), h("p", null, errorMessage(err)), extra));
}

/**
 * confirmAction asks before doing something. It shows title and body with a cancel and a
 * confirm button; confirming runs action with the dialog kept open (the button shows
 * progress), and an error from action is shown in the dialog so one can read it and
 * retry or dismiss. It resolves with action's result, or undefined when dismissed.
 */
export function confirmAction({ title, body, confirmLabel, cancelLabel = "Never mind", danger = false, action }) {
  return new Promise((resolve) => {
    const err = h("div", { class: "dialog-error", hidden: true });
    const ok = h("button", { type: "submit", class: ["btn", danger ? "danger" : "primary"], "data-testid": "confirm" }, confirmLabel);
    const no = h("button", { type: "button", class: "btn", "data-testid": "dismiss" }, cancelLabel);
    const form = h("form", { method: "dialog" },
      h("h2", null, title),
      h("div", { class: "dialog-body" }, body),
      err,
      h("footer", null, no, ok));
    const dlg = h("dialog", { class: "dialog", "aria-label": title }, form);
    let result;
    no.addEventListener("click", () => dlg.close());
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      ok.disabled = no.disabled = true;
      ok.classList.add("busy");
      err.hidden = true;
      try {
        result = await action();
        dlg.close();
      } catch (e) {
        replace(err, icon("alert", 14), h("span", null, errorMessage(e)));
        err.hidden = false;
        ok.disabled = no.disabled = false;
        ok.classList.remove("busy");
      }
    });
    dlg.addEventListener("close", () => { dlg.remove(); resolve(result); });
    document.body.append(dlg);
    dlg.showModal();
    no.focus();
  });
}

/** modal shows content in a dialog; it returns the dialog, closed with .close(). */
export function modal({ title, content, wide = false, onClose }) {
  const close = h("button", { type: "button", class: "icon-btn", "aria-label": "Close", onclick: () => dlg.close() }, icon("x", 16));
  const dlg = h("dialog", { class: ["dialog", wide && "wide"], "aria-label": title },
    h("div", { class: "dialog-head" }, h("h2", null, title), close),
    content);
  dlg.addEventListener("close", () => { dlg.remove(); if (onClose) onClose(); });
  document.body.append(dlg);
  dlg.showModal();
  return dlg;
}

let toasts;

/** toast shows a short message for a few seconds. kind: "ok" or "error". */
export function toast(message, kind = "ok") {
  if (!toasts || !toasts.isConnected) {
    toasts = h("div", { class: "toasts", role: "status" });
    document.body.append(toasts);
  }
  const t = h("div", { class: `toast ${kind}` }, icon(kind === "error" ? "alert" : "check", 14), h("span", null, message));
  toasts.append(t);
  setTimeout(() => { t.classList.add("out"); setTimeout(() => t.remove(), 300); }, kind === "error" ? 6000 : 3000);
}
