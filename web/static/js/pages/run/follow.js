// Keeping one run up to date: it is fetched whole (every page of its journal), and again
// on each stream event about it, and now and then while it runs.

import { debounce } from "../../dom.js";
import { request, streamRuns } from "../../api.js";

/** fetchRun returns run id with its whole journal; stopped() ends the paging early. */
export async function fetchRun(id, stopped = () => false) {
  const url = `/v1/runs/${encodeURIComponent(id)}`;
  const r = await request(url);
  // The journal comes a page at a time; a run's journal is bounded, and so is this.
  for (let pages = 1; r.journal_next_cursor && pages < 50 && !stopped(); pages++) {
    const next = await request(`${url}?journal_cursor=${encodeURIComponent(r.journal_next_cursor)}`);
    r.journal.push(...next.journal);
    r.failures.push(...next.failures);
    r.journal_next_cursor = next.journal_next_cursor;
  }
  return r;
}

/**
 * followRun loads run id and reloads it when the stream says it changed. It calls onRun
 * with each version that differs from the last, onError with each failed load, and
 * onState with the stream's states. It returns {reload, stop}.
 */
export function followRun(id, { onRun, onError, onState }) {
  let stopped = false;
  let last = "";
  let run = null;
  let poll = 0;
  // The status the stream last said, and how many loads in a row have not shown it: a
  // load may read a replica a little behind the primary (STEPGATE_DATABASE_READ_URL),
  // so one that shows another status is done again shortly, a few times.
  let said = "";
  let behind = 0;

  async function load() {
    clearTimeout(poll);
    try {
      const r = await fetchRun(id, () => stopped);
      if (stopped) return;
      const j = JSON.stringify(r);
      if (j !== last) {
        last = j;
        run = r;
        onRun(r);
      }
    } catch (e) {
      if (stopped) return;
      onError(e, run);
    }
    if (stopped || !run) return;
    if (said && run.status !== said && behind < 8) {
      behind++;
      poll = setTimeout(load, 250);
      return;
    }
    behind = 0;
    // Steps finish without a status change (and so without an event); while the run is
    // running, look again now and then.
    if (run.status === "running") poll = setTimeout(load, 2000);
  }
  const refresh = debounce(load, 60);

  load();
  const stopStream = streamRuns({ run: id }, {
    onRun: (r) => {
      if (r.id !== id) return;
      said = r.status || "";
      behind = 0;
      refresh();
    },
    onResync: refresh,
    onState,
  });
  return {
    reload: () => load(),
    stop() {
      stopped = true;
      stopStream();
      refresh.cancel();
      clearTimeout(poll);
    },
  };
}
