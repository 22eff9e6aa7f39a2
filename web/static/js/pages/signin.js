// The sign-in page: nothing else is shown without a token.

import { h, icon, replace, code } from "../dom.js";
import { claims, checkToken } from "../api.js";
import { errorMessage } from "../dialog.js";

/** signIn is the sign-in form; onSignedIn gets a token the gateway accepted. */
export function signIn({ message, onSignedIn }) {
  const input = h("textarea", {
    id: "token", name: "token", class: "input", rows: 5, required: true, spellcheck: "false", autocomplete: "off",
    autocapitalize: "off", placeholder: "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9…", "aria-describedby": "token-help",
  });
  const err = h("div", { class: "form-error", role: "alert", hidden: !message }, message ? [icon("alert", 14), h("span", null, message)] : null);
  const submit = h("button", { type: "submit", class: "btn primary block", "data-testid": "sign-in" }, "Sign in");
  const fail = (text) => {
    replace(err, icon("alert", 14), h("span", null, text));
    err.hidden = false;
    submit.disabled = false;
    submit.classList.remove("busy");
  };
  const form = h("form", { class: "signin-form", novalidate: true },
    h("label", { for: "token" }, "Access token"),
    input,
    h("p", { id: "token-help", class: "hint" }, "A JWT this gateway accepts, the same you use with the API. It stays in this browser until you sign out."),
    err,
    submit);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const t = input.value.trim().replace(/^Bearer\s+/i, "");
    if (!/^[\w-]+\.[\w-]+\.[\w-]*$/.test(t)) return fail("That is not a JWT: a token is three base64url parts separated by dots.");
    const c = claims(t);
    if (!c) return fail("That token's payload is not readable JSON.");
    if (typeof c.exp === "number" && c.exp * 1000 < Date.now()) return fail(`That token expired on ${new Date(c.exp * 1000).toLocaleString()}.`);
    submit.disabled = true;
    submit.classList.add("busy");
    const e = await checkToken(t);
    if (e) return fail(e.status === 401 ? `The gateway rejected this token: ${e.detail}.` : errorMessage(e));
    onSignedIn(t);
  });
  input.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey) { ev.preventDefault(); form.requestSubmit(); }
  });
  queueMicrotask(() => input.focus());
  return h("div", { class: "signin" },
    h("div", { class: "signin-card" },
      h("div", { class: "signin-brand" }, h("img", { src: "/favicon.svg", alt: "", width: 36, height: 36 }), h("span", null, "stepgate")),
      h("h1", null, "Sign in to the dashboard"),
      h("p", { class: "muted" }, "Inspect every run step by step, live."),
      form,
      h("div", { class: "signin-foot" },
        h("p", null, "No token? Create one with ", code("stepgate token create --sub you --role admin"), "."),
        h("p", null, "Running ", code("stepgate dev"), "? Open the dashboard link it prints: it signs you in."))));
}
