// The dashboard: sign-in, the frame (navigation, theme, identity) and hash routing.
//   #/runs?function=&status=&range=   the runs list
//   #/runs/<id>                      one run
//   #/failures?since=&all=            failed runs grouped by function and error
//   #/functions                      the functions
//   #/functions/<name>               one function, with its last check against live runs
//   #token=<jwt>                     signs in with the token and strips it from the URL
//                                    (the link `stepgate dev` prints)

import { h, icon, replace } from "./dom.js";
import { getToken, setToken, claims, roles, handleUnauthorized, startSession, endSession } from "./api.js";
import { toast, errorMessage, confirmAction } from "./dialog.js";
import { signIn } from "./pages/signin.js";
import { runsPage } from "./pages/runs.js";
import { runPage } from "./pages/run.js";
import { functionsPage } from "./pages/functions.js";
import { functionPage } from "./pages/function.js";
import { failuresPage } from "./pages/failures.js";

const app = document.getElementById("app");
let cleanup = () => {};
let view = null;

function parseHash() {
  const raw = location.hash.replace(/^#/, "") || "/runs";
  const [path, qs] = raw.split("?");
  return { parts: path.split("/").filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(qs || "") };
}

function route() {
  if (!getToken()) return showSignIn();
  if (!view || !view.isConnected) frame();
  cleanup();
  cleanup = () => {};
  for (const d of document.querySelectorAll("dialog[open]")) d.close(); // they belong to the page left
  const { parts, query } = parseHash();
  const page = parts[0] || "runs";
  for (const a of document.querySelectorAll("[data-nav]")) a.classList.toggle("active", a.dataset.nav === page);
  const el = h("div", { class: "page" });
  replace(view, el);
  window.scrollTo(0, 0);
  if (page === "runs" && parts.length === 1) cleanup = runsPage(el, query) || cleanup;
  else if (page === "runs" && parts.length === 2) cleanup = runPage(el, parts[1]) || cleanup;
  else if (page === "functions" && parts.length === 1) cleanup = functionsPage(el, query) || cleanup;
  else if (page === "functions" && parts.length === 2) cleanup = functionPage(el, parts[1]) || cleanup;
  else if (page === "failures" && parts.length === 1) cleanup = failuresPage(el, query) || cleanup;
  else {
    replace(el, h("div", { class: "empty" },
      h("h2", null, "Nothing here"),
      h("p", null, "This page does not exist. ", h("a", { href: "#/runs" }, "Go to the runs"), ".")));
  }
  document.title = (page === "functions" ? (parts[1] ? "Function" : "Functions") : page === "failures" ? "Failures" : page === "runs" && parts[1] ? "Run" : "Runs") + " · stepgate";
}

function showSignIn(message) {
  cleanup();
  cleanup = () => {};
  view = null;
  document.title = "Sign in · stepgate";
  replace(app, signIn({
    message,
    onSignedIn: (t) => {
      setToken(t);
      route();
    },
  }));
}

function signOut(message) {
  setToken("");
  endSession();
  if (!message) history.replaceState(null, "", location.pathname + location.search + "#/runs"); // an expired token returns to where it was
  showSignIn(message);
}

// The theme: the system's, or a chosen light or dark, remembered.
const THEMES = ["system", "light", "dark"];

function currentTheme() {
  return document.documentElement.dataset.theme || "system";
}

function themeIcon(t) {
  return icon(t === "light" ? "sun" : t === "dark" ? "moon" : "monitor", 16);
}

function themeButton() {
  const b = h("button", { type: "button", class: "icon-btn", "data-testid": "theme" });
  const show = () => {
    const t = currentTheme();
    b.title = `Theme: ${t} (click to change)`;
    b.setAttribute("aria-label", b.title);
    replace(b, themeIcon(t));
  };
  b.addEventListener("click", () => {
    const next = THEMES[(THEMES.indexOf(currentTheme()) + 1) % THEMES.length];
    if (next === "system") delete document.documentElement.dataset.theme;
    else document.documentElement.dataset.theme = next;
    try {
      if (next === "system") localStorage.removeItem("stepgate.theme");
      else localStorage.setItem("stepgate.theme", next);
    } catch {}
    show();
  });
  show();
  return b;
}

function frame() {
  const c = claims() || {};
  const rs = roles(c);
  const who = c.sub || "signed in";
  const river = h("a", { href: "/river", target: "_blank", rel: "noopener", "data-testid": "river", title: "River UI: the job queue underneath, for job-level debugging" },
    icon("river"), h("span", null, "River UI"), icon("external", 12));
  // The session cookie signs River UI in; it says whether this token may open it.
  startSession(getToken()).then((s) => {
    if (s && s.river === false) river.hidden = true;
    river.dataset.session = s ? "ok" : "none";
  });
  view = h("main", { id: "view" });
  replace(app,
    h("header", { class: "topbar" },
      h("a", { class: "brand", href: "#/runs", "aria-label": "stepgate home" }, h("img", { src: "/favicon.svg", alt: "", width: 22, height: 22 }), h("span", null, "stepgate")),
      h("nav", { class: "nav", "aria-label": "Main" },
        h("a", { href: "#/runs", "data-nav": "runs" }, icon("runs"), h("span", null, "Runs")),
        h("a", { href: "#/functions", "data-nav": "functions" }, icon("functions"), h("span", null, "Functions")),
        h("a", { href: "#/failures", "data-nav": "failures", "data-testid": "nav-failures" }, icon("alert"), h("span", null, "Failures")),
        river),
      h("div", { class: "topbar-end" },
        h("div", { class: "who", title: `subject ${who}\ntenant ${c.tenant || "default"}\nroles ${rs.join(", ") || "—"}`, "data-testid": "who" },
          h("span", { class: "avatar" }, (who[0] || "?").toUpperCase()),
          h("span", { class: "who-text" }, h("span", { class: "who-sub" }, who), h("span", { class: "who-tenant" }, c.tenant || "default"))),
        themeButton(),
        h("button", { type: "button", class: "icon-btn", title: "Sign out", "aria-label": "Sign out", "data-testid": "sign-out", onclick: () => signOut() }, icon("logout")))),
    view);
}

// `#token=<jwt>`: sign in with it, keep it, and take it out of the address bar and history.
// A link that would sign in as someone else than the signed-in identity (another
// subject or tenant) asks first: a link sent by somebody must not switch the tenant one
// works in without one noticing.
async function takeFragmentToken() {
  const m = location.hash.match(/^#token=([^&]+)(?:&next=(.*))?$/);
  if (!m) return;
  const t = decodeURIComponent(m[1]);
  const next = m[2] ? decodeURIComponent(m[2]) : "/runs";
  history.replaceState(null, "", location.pathname + location.search + "#" + (next.startsWith("/") ? next : "/runs"));
  const current = getToken() ? claims() : null;
  const offered = claims(t) || {};
  if (current && (current.sub !== offered.sub || (current.tenant || "") !== (offered.tenant || ""))) {
    const ok = await confirmAction({
      title: "Sign in as someone else?",
      body: [
        h("p", null, "This link signs you in as ", h("strong", { "data-testid": "offered-identity" }, `${offered.sub || "?"} (tenant ${offered.tenant || "?"})`),
          ". You are signed in as ", h("strong", null, `${current.sub || "?"} (tenant ${current.tenant || "?"})`), "."),
        h("p", { class: "muted" }, "Only switch if you expected this link."),
      ],
      confirmLabel: "Switch",
      cancelLabel: "Stay signed in",
      action: async () => true,
    });
    if (!ok) return;
  }
  setToken(t);
  view = null; // a new identity gets a new frame
}

function expired() {
  const c = claims();
  return c && typeof c.exp === "number" && c.exp * 1000 < Date.now();
}

// A bug in the dashboard says so in words; the details stay in the console.
window.addEventListener("error", (ev) => toast(`Something went wrong in the dashboard: ${ev.message}`, "error"));
window.addEventListener("unhandledrejection", (ev) => toast(errorMessage(ev.reason), "error"));

handleUnauthorized((err) => {
  if (getToken()) signOut(`The gateway rejected your token: ${err.detail}. Sign in again.`);
});

// One hash change at a time: a sign-in link's question must not be closed by the route
// of the change before it.
let handling = Promise.resolve();
window.addEventListener("hashchange", () => {
  handling = handling.then(async () => {
    if (location.hash.startsWith("#token=")) await takeFragmentToken();
    route();
  });
});
takeFragmentToken().then(() => {
  if (getToken() && expired()) signOut("Your token has expired. Sign in with a new one.");
  else route();
});
