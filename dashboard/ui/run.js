// tasklock dashboard: the run page, #/run/ID, where ID is a run's "id"
// from /api/runs (GET api/run?id=ID). It shows one run record whole: its
// status, tick, lateness (start − tick), duration, node, fence, error and
// all of its stored output (the head and the tail of a long one, with
// schedule's "… N bytes cut …" line between), the other attempts of the
// same tick and shard, and its lock: the key, the fence, who holds the key
// now, and the lock's events as the record shows them.
//
// Stable ids and classes for browser tests: #run-page[data-status]
// [data-attempt], #run-summary tr[data-key], #run-output (pre),
// #run-output-size, #run-output-cut (present when bytes were cut),
// #run-attempts tr.attempt-row[data-attempt][data-status] a.run-link,
// #run-lock[data-key][data-fence] tr.lock-event[data-event],
// #run-actions button.action-cancel / button.action-retry (act.js).
"use strict";

async function runPage(id) {
  const data = await api("api/run?" + new URLSearchParams({ id: id }));
  const r = data.run;
  const jobLink = el("a", { href: "#/job/" + encodeURIComponent(r.job) }, r.job);
  const rows = [];
  const row = (key, label, ...value) => rows.push(el("tr", { "data-key": key }, el("th", {}, label), el("td", {}, ...value)));
  row("status", "Status", statusBadge(r.status), r.tick_status && r.shards > 1 ? [" tick: ", statusBadge(r.tick_status)] : null);
  row("tick", "Tick", timeEl(r.tick), el("span", { class: "muted" }, " " + fmtTime(r.tick)), r.trigger ? el("span", { class: "muted" }, " (trigger " + r.trigger + ")") : null);
  if (r.shards > 1) row("shard", "Shard", r.shard + " of " + r.shards);
  row("attempt", "Attempt", String(r.attempt));
  row("node", "Node", r.node || "—");
  row("fence", "Fence", r.fence ? String(r.fence) : "—");
  row("start", "Started", timeEl(r.start), r.start ? el("span", { class: "muted" }, " " + fmtTime(r.start)) : null);
  const interrupted = noticedElsewhere(r);
  row("end", interrupted ? "Found interrupted" : "Ended", timeEl(r.end), r.end ? el("span", { class: "muted" }, " " + fmtTime(r.end)) : null);
  row("lateness", "Lateness", data.lateness_ms === null ? "—" : fmtMS(data.lateness_ms), el("span", { class: "muted" }, " (start − tick)"));
  row("duration", "Duration", data.duration_ms === null ? (r.status === "running" ? "running" : "—")
    : interrupted ? ["≤ " + fmtMS(data.duration_ms), el("span", { class: "muted" }, " (its node stopped mid-run; this is until another node noticed, and the command ran for an unknown part of it)")]
      : fmtMS(data.duration_ms));
  if (r.error) row("error", "Error", el("pre", { class: "run-error", id: "run-error" }, r.error));

  const out = r.output || "";
  const cut = out.match(/\n?… (\d+) bytes cut …\n/);
  const size = new TextEncoder().encode(out).length;
  const output = el("section", { id: "run-output-section" },
    el("h2", {}, "Output"),
    el("p", { class: "muted" },
      el("span", { id: "run-output-size" }, size + " bytes stored"),
      cut ? el("span", { id: "run-output-cut", "data-cut": cut[1] }, ": the head and the tail; " + cut[1] + " bytes in between were not kept (serve's output_max)") : null),
    out ? el("pre", { id: "run-output", class: "run-output-full" }, out) : el("p", { class: "muted", id: "run-output-none" }, "No output recorded."));

  const attempts = [r, ...data.attempts].sort((a, b) => a.attempt - b.attempt);
  const attemptRows = attempts.map((a) => el("tr", { class: "attempt-row" + (a.attempt === r.attempt ? " current" : ""), "data-attempt": String(a.attempt), "data-status": a.status },
    el("td", { class: "num" }, a.attempt === r.attempt ? el("strong", {}, String(a.attempt)) : el("a", { class: "run-link", href: "#/run/" + encodeURIComponent(a.id) }, String(a.attempt))),
    el("td", {}, statusBadge(a.status)),
    el("td", {}, a.node || "—"),
    el("td", { class: "num" }, a.fence ? String(a.fence) : "—"),
    el("td", {}, timeEl(a.start)),
    el("td", { class: "num" }, runDur(a)),
    el("td", {}, a.error ? el("span", { class: "run-error" }, a.error) : "—")));

  const lk = data.lock;
  const events = lk.events.map((e) => el("tr", { class: "lock-event", "data-event": e.event },
    el("td", {}, e.at ? timeEl(e.at) : "—"),
    el("td", {}, e.event),
    el("td", {}, e.node),
    el("td", { class: "num" }, String(e.fence)),
    el("td", { class: "muted" }, e.note || "")));
  const held = lk.held
    ? [lk.held.owner + " holds it now with fence " + lk.held.fence + (lk.held.fence === lk.fence ? " (this run)" : "") + ", lease ends in " + fmtMS(lk.held.expires_in_ms)]
    : ["not held now"];
  const lock = el("section", { id: "run-lock", "data-key": lk.key, "data-fence": String(lk.fence) },
    el("h2", {}, "Lock"),
    el("p", {}, el("code", {}, lk.key), lk.fence ? " · fence " + lk.fence : r.start ? " · no lock taken (overlap: allow)" : " · no lock taken: the run did not start", " · ", ...held),
    events.length
      ? el("table", { id: "run-lock-events" },
        el("thead", {}, el("tr", {}, ["When", "Event", "Node", "Fence", ""].map((h) => el("th", {}, h)))),
        el("tbody", {}, events))
      : null,
    el("p", { class: "muted" }, "The events are those the run's record shows: the lock taken when the attempt started, and released, lost or expired when it ended."));

  return [
    el("h1", {}, el("a", { href: "#/jobs" }, "Jobs"), " / ", jobLink, " / ", el("span", { id: "run-title" }, "run " + fmtTime(r.tick) + (r.shards > 1 ? " shard " + r.shard : "") + " attempt " + r.attempt)),
    el("div", { id: "run-page", "data-status": r.status, "data-attempt": String(r.attempt), "data-job": r.job },
      el("table", { id: "run-summary", class: "def" }, el("tbody", {}, rows)),
      el("p", { id: "run-actions", class: "run-actions" }, runActions(r))),
    el("section", { id: "run-attempts-section" },
      el("h2", {}, "Attempts of this tick" + (r.shards > 1 ? " and shard" : "")),
      el("table", { id: "run-attempts" },
        el("thead", {}, el("tr", {}, ["Attempt", "Status", "Node", "Fence", "Started", "Duration", "Error"].map((h) => el("th", {}, h)))),
        el("tbody", {}, attemptRows))),
    lock,
    output];
}
