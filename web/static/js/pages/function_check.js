// A function's last check of new code against its live runs (FunctionLastCheck, from
// POST /v1/apps?check=true): when and by whom, whether the sync registered the code,
// the counts, and each run the code would break, with where it diverges or how its
// replay failed. Every name here comes from a function's code: it is shown as text.

import { h, icon, timeAgo, fmtDateTime, shortID } from "../dom.js";

/** verdict says what the sync that made the check did: its word, tag class and title. */
export function verdict(lc) {
  const ok = (lc.check.broken || []).length === 0;
  if (lc.registered && lc.forced) {
    return { id: "forced", text: "registered with force", cls: "warn", title: "The sync registered the new code although it would break live runs (force=true)." };
  }
  if (lc.registered) return { id: "registered", text: "registered", cls: "ok", title: "Every live run checked replayed cleanly; the sync registered the new code." };
  if (!ok) return { id: "refused", text: "refused · not registered", cls: "err", title: "The new code would break live runs: the sync registered nothing." };
  return { id: "clean-unregistered", text: "clean · not registered", cls: "", title: "This function's runs replayed cleanly, but nothing was registered: a dry run, or a sync refused for another function of the app." };
}

/**
 * lastCheck returns the panel of the last check lc of the function f (its current
 * revision): it says so when the check was made for another revision than f's.
 */
export function lastCheck(lc, f) {
  const c = lc.check;
  const broken = c.broken || [];
  const v = verdict(lc);
  const count = (id, label, n, title) => h("div", { class: "fact" },
    h("dt", null, label), h("dd", null, h("span", { class: "num", "data-testid": `check-${id}`, title }, String(n))));
  return h("section", { class: "panel last-check", "data-testid": "last-check", "data-verdict": v.id },
    h("header", { class: "panel-head" },
      h("h3", null, "Last check against live runs"),
      h("span", { class: `tag ${v.cls}`, "data-testid": "check-verdict", title: v.title }, v.text),
      h("span", { class: "muted small check-when", "data-testid": "check-when" },
        h("span", { title: fmtDateTime(lc.checked_at) }, timeAgo(lc.checked_at)),
        lc.subject ? [" by ", h("span", { class: "mono", "data-testid": "check-subject" }, lc.subject)] : null)),
    h("div", { class: "panel-body" },
      h("dl", { class: "facts check-counts" },
        count("live", "Live runs", c.more ? `${c.live}+` : c.live, "Runs not ended, with a journal"),
        count("checked", "Checked", c.checked, "Live runs replayed against the new code"),
        count("clean", "Clean", c.clean, "Replayed as their journal says"),
        count("broken", "Broken", broken.length, "The new code would break them")),
      c.url ? h("p", { class: "muted small" }, "New code at ", h("span", { class: "mono wrap", "data-testid": "check-url" }, c.url)) : null,
      stale(c, f),
      broken.length
        ? h("table", { class: "table", "data-testid": "check-broken" },
          h("thead", null, h("tr", null, h("th", null, "Run"), h("th", null, "Revision"), h("th", null, "Why it would break"))),
          h("tbody", null, broken.map(brokenRow)))
        : null));
}

// stale says, when the check c was made for another revision than the function f's
// current one (a revision registered since, without a check), which revision and URL
// it was made for: the counts above are not the current code's.
function stale(c, f) {
  if (!f || c.revision === undefined || c.revision === f.revision) return null;
  return h("p", { class: "small", "data-testid": "check-stale" },
    h("span", { class: "warn-text" }, icon("alert", 12), " Checked against ",
      h("span", { class: "mono", "data-testid": "check-stale-revision" }, `revision ${c.revision}`)),
    c.url ? [" (", h("span", { class: "mono wrap" }, c.url), ")"] : null,
    `, not the current revision ${f.revision}`,
    f.url && f.url !== c.url ? [" (", h("span", { class: "mono wrap" }, f.url), ")"] : null,
    ": it says nothing of the current code.");
}

function brokenRow(b) {
  return h("tr", { "data-run": b.run_id },
    h("td", null, h("a", { href: `#/runs/${encodeURIComponent(b.run_id)}`, class: "mono", title: b.run_id, "data-testid": "broken-run" }, shortID(b.run_id))),
    h("td", null, h("span", { class: "mono" }, `v${b.revision}`)),
    h("td", { "data-testid": "broken-why" }, b.divergence ? divergence(b.divergence) : null, b.error ? failure(b.error) : null));
}

// divergence says where the replay left the journal: at seq N the journal holds one
// thing and the new code asks for another.
function divergence(d) {
  return h("div", { class: "divergence" },
    icon("alert", 12), " ",
    `at seq ${d.seq} the journal holds `, what(d.journal), ", the new code asks for ", what(d.asked));
}

// what names a journal entry or what code asks for: `step "charge"`, or the run's end.
function what(s) {
  if (!s) return h("span", { class: "muted" }, "nothing");
  if (s.kind === "end") return h("span", null, `the run's end (${s.name})`);
  return h("span", null, `${s.kind.replace(/_/g, " ")} `, h("code", { class: "wrap" }, `"${s.name}"`));
}

function failure(e) {
  return h("div", null, h("span", { class: "tag err" }, e.type), " ", h("span", { class: "mono wrap" }, e.message));
}
