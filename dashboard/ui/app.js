// tasklock dashboard: a small single-page app over the JSON API (see the
// package documentation of dashboard). Every URL is relative, so the
// dashboard works under any prefix. Element ids and classes are stable for
// browser tests: #jobs-table tr.job-row[data-job], td.job-state,
// button.action-trigger / .action-pause / .action-resume, #runs-table
// tr.run-row[data-status], #locks-table tr.lock-row button.action-release,
// #nodes-table tr.node-row[data-leader] span.leader-badge, #nodes-leader,
// #job-audit #audit-table tr.audit-row[data-action] td.audit-who,
// #confirm-ok / #confirm-cancel, #job-deps (#dag-parents, #dag-children:
// li.dag-node[data-job][data-status]), #nav-overview, #jobs-table
// td.job-spark svg.sparkline (overview.js has the overview page's).
"use strict";

const state = { info: null, csrf: "", route: "", jobsAfter: [""], runsNext: "", refreshing: false, again: false, renders: 0 };

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k.startsWith("data-")) e.setAttribute(k, v);
    else e[k] = v;
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

async function api(path, opts) {
  const res = await fetch(path, Object.assign({ credentials: "same-origin", headers: { Accept: "application/json" } }, opts || {}));
  let body = null;
  try { body = await res.json(); } catch (e) { body = null; }
  if (res.status === 401 && state.info && !state.info.public_read && !state.info.read_only) {
    // The session ended (logout elsewhere, expiry, restart): the page
    // itself now answers the login page.
    location.reload();
  }
  if (!res.ok) throw new Error((body && body.error) || res.status + " " + res.statusText);
  return body;
}

function post(path) {
  return api(path, { method: "POST", headers: { Accept: "application/json", "X-CSRF-Token": state.csrf } });
}

function message(text, isError) {
  const m = document.getElementById("message");
  m.textContent = text || "";
  m.hidden = !text;
  m.classList.toggle("error", !!isError);
}

// Times people read. Every time on the pages goes through these: fmtTime
// (an absolute time, as text, in the zone the header's switch chose: the
// viewer's or UTC, remembered in localStorage), timeEl (a <time> showing
// the time relative to now, "in 3 s", "2 min ago", kept up to date every
// second, with fmtTime's text as its title) and fmtMS (a duration:
// "340 ms", "4.2 s", "1 min 12 s", "2 h 5 min", "3 d 4 h"). Switching the
// zone renders the page again, so every time on it follows, charts too.

const zone = { utc: localStorage.getItem("tasklock.zone") === "utc" };

function pad2(n) { return String(n).padStart(2, "0"); }

// zoneName is the viewer's zone's short name at d ("CET", "GMT+1").
function zoneName(d) {
  try {
    const p = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" }).formatToParts(d).find((x) => x.type === "timeZoneName");
    if (p) return p.value;
  } catch (e) { /* fall through */ }
  const off = -d.getTimezoneOffset();
  return "UTC" + (off < 0 ? "-" : "+") + pad2(Math.floor(Math.abs(off) / 60)) + ":" + pad2(Math.abs(off) % 60);
}

// fmtTime is t as "2026-03-04 05:06:07 UTC", or in the viewer's zone
// "2026-03-04 06:06:07 CET"; utc, when given, overrides the switch.
function fmtTime(t, utc) {
  if (!t) return "—";
  const d = new Date(t);
  if (isNaN(d)) return "—";
  if (utc === undefined ? zone.utc : utc) return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  return d.getFullYear() + "-" + pad2(d.getMonth() + 1) + "-" + pad2(d.getDate()) + " " +
    pad2(d.getHours()) + ":" + pad2(d.getMinutes()) + ":" + pad2(d.getSeconds()) + " " + zoneName(d);
}

// fmtRel is t relative to now: "now", "in 3 s", "2 min ago", "in 1 h 5 min".
function fmtRel(t, now) {
  const ms = new Date(t).getTime() - (now === undefined ? Date.now() : now);
  const a = Math.abs(ms);
  if (a < 1000) return "now";
  const s = Math.floor(a / 1000);
  let txt;
  if (s < 60) txt = s + " s";
  else if (s < 3600) txt = Math.floor(s / 60) + " min";
  else if (s < 86400) txt = Math.floor(s / 3600) + " h" + (s % 3600 >= 60 ? " " + Math.floor((s % 3600) / 60) + " min" : "");
  else txt = Math.floor(s / 86400) + " d" + (s % 86400 >= 3600 ? " " + Math.floor((s % 86400) / 3600) + " h" : "");
  return ms > 0 ? "in " + txt : txt + " ago";
}

// timeEl is a <time class="t"> showing t relative to now (updated every
// second), its absolute time (fmtTime) on hover; "—" without a time.
function timeEl(t) {
  if (!t || isNaN(new Date(t))) return "—";
  const iso = new Date(t).toISOString();
  return el("time", { class: "t", dateTime: iso, title: fmtTime(iso) }, fmtRel(iso));
}

// refreshTimes brings every timeEl on the page up to date.
function refreshTimes() {
  const now = Date.now();
  for (const e of document.querySelectorAll("time.t")) {
    const txt = fmtRel(e.dateTime, now);
    if (e.textContent !== txt) e.textContent = txt;
  }
}

// setZone switches the page's absolute times to UTC (utc true) or the
// viewer's zone, remembers the choice, and renders the page again.
function setZone(utc) {
  zone.utc = !!utc;
  try { localStorage.setItem("tasklock.zone", zone.utc ? "utc" : "local"); } catch (e) { /* private mode */ }
  showZone();
  document.dispatchEvent(new CustomEvent("tasklock:zone", { detail: { utc: zone.utc } }));
  for (const e of document.querySelectorAll("time.t")) e.title = fmtTime(e.dateTime);
  render();
}

// showZone labels the header's switch with the zone in force.
function showZone() {
  const b = document.getElementById("zone-switch");
  if (!b) return;
  b.textContent = zone.utc ? "UTC" : zoneName(new Date());
  b.dataset.zone = zone.utc ? "utc" : "local";
  b.title = zone.utc ? "times in UTC: switch to your zone (" + zoneName(new Date()) + ")" : "times in your zone: switch to UTC";
}

// fmtMS is a duration in milliseconds as people read it.
function fmtMS(ms) {
  if (ms === null || ms === undefined || isNaN(ms)) return "—";
  const neg = ms < 0 ? "-" : "";
  ms = Math.abs(Math.round(ms));
  if (ms < 1000) return neg + ms + " ms";
  if (ms < 10000) return neg + (ms / 1000).toFixed(1).replace(/\.0$/, "") + " s";
  const s = Math.round(ms / 1000);
  const two = (a, ua, b, ub) => neg + a + " " + ua + (b ? " " + b + " " + ub : "");
  if (s < 60) return neg + s + " s";
  if (s < 3600) return two(Math.floor(s / 60), "min", s % 60, "s");
  if (s < 86400) return two(Math.floor(s / 3600), "h", Math.floor((s % 3600) / 60), "min");
  return two(Math.floor(s / 86400), "d", Math.floor((s % 86400) / 3600), "h");
}

// jobState is a job's state cell: broken (its schedule gives no next tick),
// paused or active.
function jobState(j, tag) {
  const st = j.state || (j.paused ? "paused" : "ok");
  const cls = st === "broken" ? "state-broken" : st === "paused" ? "state-paused" : "state-active";
  const attrs = { class: "job-state " + cls, "data-state": st };
  if (j.broken) attrs.title = j.broken;
  return el(tag, attrs, st === "ok" ? "active" : st);
}

function statusBadge(st) {
  return el("span", { class: "status status-" + st }, st);
}

function canWrite() {
  return state.info && !state.info.read_only && state.info.logged_in;
}

// whyDisabled says why the action buttons are off.
function whyDisabled() {
  if (!state.info) return "";
  if (state.info.read_only) return "read-only: started without --token";
  if (!state.info.logged_in) return "log in to act";
  return "";
}

function confirmAction(text) {
  const d = document.getElementById("confirm-dialog");
  document.getElementById("confirm-text").textContent = text;
  return new Promise((resolve) => {
    d.addEventListener("close", () => resolve(d.returnValue === "ok"), { once: true });
    d.returnValue = "";
    d.showModal();
  });
}

async function act(text, path) {
  let body = null;
  if (path.endsWith("/trigger") && typeof askTriggerNote === "function") { // act.js: a note
    if ((body = await askTriggerNote(text)) === null) return;
  } else if (!(await confirmAction(text))) return;
  try {
    await (body ? postJSON(path, body) : post(path));
    message("");
    await render();
  } catch (e) {
    message(e.message, true);
  }
}

function actionButton(cls, label, text, path) {
  return el("button", { type: "button", class: cls, disabled: !canWrite(), title: whyDisabled(),
    onclick: () => act(text, path) }, label);
}

// Pages.

async function jobsPage() {
  const filter = el("input", { id: "job-filter", type: "search", placeholder: "filter jobs", value: state.jobFilter || "",
    onchange: (e) => { state.jobFilter = e.target.value; state.jobsAfter = [""]; render(); } });
  const after = state.jobsAfter[state.jobsAfter.length - 1];
  const q = new URLSearchParams({ limit: "100", recent: "50" });
  if (after) q.set("after", after);
  if (state.jobFilter) q.set("q", state.jobFilter);
  const data = await api("api/jobs?" + q);
  const rows = data.jobs.map((j) => {
    const lr = j.last_run;
    const run = j.running.length ? j.running.map((r) => r.node + " (fence " + r.fence + ")").join(", ") : "—";
    return el("tr", { class: "job-row", "data-job": j.job, "data-paused": String(j.paused) },
      el("td", { class: "job-name" }, el("a", { href: "#/job/" + encodeURIComponent(j.job) }, j.job)),
      el("td", {}, j.schedule || "—", j.timezone ? el("span", { class: "muted" }, " " + j.timezone) : null),
      el("td", { class: "job-next" }, j.next_ticks.length ? timeEl(j.next_ticks[0]) : "—"),
      el("td", { class: "job-last" }, lr ? [statusBadge(lr.tick_status || lr.status), " ", timeEl(lr.tick), el("span", { class: "muted" }, " " + (lr.shards > 1 ? lr.shards + " shards" : lr.node))] : "—"),
      el("td", { class: "job-spark" }, j.recent ? sparkline(j.recent.slice().reverse()) : "—"),
      el("td", { class: "job-running" }, run),
      jobState(j, "td"),
      el("td", { class: "job-triggers num" }, j.pending_triggers.length),
      el("td", { class: "job-actions" },
        actionButton("action-trigger", "Trigger", "Run " + j.job + " now, once, on one node?", "api/jobs/" + encodeURIComponent(j.job) + "/trigger"), " ",
        j.paused
          ? actionButton("action-resume", "Resume", "Resume " + j.job + " on every node?", "api/jobs/" + encodeURIComponent(j.job) + "/resume")
          : actionButton("action-pause", "Pause", "Pause " + j.job + " on every node? Running runs finish.", "api/jobs/" + encodeURIComponent(j.job) + "/pause")));
  });
  return [
    el("h1", {}, "Jobs ", el("span", { class: "muted", id: "jobs-total" }, "(" + data.total + ")")),
    el("div", { class: "toolbar" }, filter),
    el("table", { id: "jobs-table" },
      el("thead", {}, el("tr", {}, ["Job", "Schedule", "Next tick", "Last run", "Last 50 runs", "Running on", "State", "Triggers", ""].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows)),
    el("div", { class: "pager" },
      el("button", { id: "jobs-prev", type: "button", disabled: state.jobsAfter.length < 2, onclick: () => { state.jobsAfter.pop(); render(); } }, "Previous"),
      el("button", { id: "jobs-next", type: "button", disabled: !data.next, onclick: () => { state.jobsAfter.push(data.next); render(); } }, "Next"))];
}

// noticedElsewhere reports whether r is an interrupted run that another
// node recorded when it found r's node stopped (its error then starts as
// schedule/sweep.go writes it): its end is when that node noticed. A run
// its own serve stopped at the end of a shutdown's --grace is interrupted
// too, with its true end.
function noticedElsewhere(r) {
  return r.status === "interrupted" && (r.error || "").startsWith("schedule: run interrupted:");
}

// runDur is a run's duration as a table shows it: "—" until it ends; for
// a run another node found interrupted "≤ " end − start, as its end is
// when that node noticed its node had stopped, and its command ran for an
// unknown part of that.
function runDur(r) {
  if (!r.start || !r.end) return "—";
  const d = fmtMS(new Date(r.end) - new Date(r.start));
  if (!noticedElsewhere(r)) return d;
  return el("span", { class: "dur-bound", title: "its node stopped mid-run: this is until another node noticed; the command ran for an unknown part of it" }, "≤ " + d);
}

function runRow(r) {
  const dur = runDur(r);
  const detail = [];
  if (r.error) detail.push(el("div", { class: "run-error" }, r.error));
  if (r.output) detail.push(el("pre", { class: "run-output" }, (r.output_truncated ? "…" : "") + r.output));
  if (r.output_truncated && r.id) detail.push(el("a", { class: "run-more", href: "#/run/" + encodeURIComponent(r.id) }, "all of its output"));
  const sharded = r.shards > 1;
  return el("tr", { class: "run-row", "data-status": r.status, "data-job": r.job, "data-shard": sharded ? String(r.shard) : "" },
    el("td", { class: "run-tick" }, r.id ? el("a", { class: "run-link", href: "#/run/" + encodeURIComponent(r.id), title: "this run's page: all its output, its attempts, its lock" }, timeEl(r.tick)) : timeEl(r.tick),
      r.trigger ? el("span", { class: "muted" }, " (trigger)") : null),
    el("td", { class: "run-shard num" }, sharded ? r.shard + "/" + r.shards : "—"),
    el("td", { class: "run-status" }, statusBadge(r.status)),
    el("td", { class: "run-tick-status" }, sharded && r.tick_status ? statusBadge(r.tick_status) : "—"),
    el("td", { class: "num" }, r.attempt),
    el("td", {}, r.node),
    el("td", { class: "num" }, r.fence || "—"),
    el("td", { class: "num" }, dur),
    el("td", {}, detail.length ? detail : "—"),
    el("td", { class: "run-actions" }, typeof runActions === "function" ? runActions(r) : null));
}

async function jobPage(name) {
  const st = state.runStatus || "";
  const jq = await api("api/jobs?" + new URLSearchParams({ name: name, ticks: "5" }));
  const j = jq.jobs[0];
  const q = new URLSearchParams({ job: name, limit: "50" });
  if (st) q.set("status", st);
  const data = await api("api/runs?" + q);
  state.runsNext = data.next;
  const tbody = el("tbody", { id: "runs-body" }, data.runs.map(runRow));
  const more = el("button", { id: "runs-more", type: "button", disabled: !data.next, onclick: async () => {
    const q2 = new URLSearchParams(q);
    q2.set("before", state.runsNext);
    const d2 = await api("api/runs?" + q2);
    state.runsNext = d2.next;
    tbody.append(...d2.runs.map(runRow));
    more.disabled = !d2.next;
  } }, "Older");
  const statusSel = el("select", { id: "run-status", onchange: (e) => { state.runStatus = e.target.value; render(); } },
    ["", "ok", "failed", "timeout", "lost", "cancelled", "interrupted", "skipped", "missed", "running"].map((s) => el("option", { value: s, selected: s === st }, s || "any status")));
  const head = [el("h1", {}, el("a", { href: "#/jobs" }, "Jobs"), " / ", el("span", { id: "job-title" }, name))];
  if (j) {
    head.push(el("div", { class: "toolbar", id: "job-summary", "data-job": j.job, "data-paused": String(j.paused) },
      jobState(j, "span"),
      j.broken ? el("span", { class: "state-broken" }, j.broken) : null,
      el("span", {}, "schedule: " + (j.schedule || j.spec || "—") + (j.timezone ? " " + j.timezone : "")),
      el("span", { class: "job-next" }, "next: ", j.next_ticks.length ? timeEl(j.next_ticks[0]) : "—"),
      el("span", { class: "job-running" }, "running: " + (j.running.map((r) => r.node + " (fence " + r.fence + ")").join(", ") || "no")),
      el("span", { class: "job-triggers" }, "pending triggers: " + j.pending_triggers.length),
      actionButton("action-trigger", "Trigger", "Run " + j.job + " now, once, on one node?", "api/jobs/" + encodeURIComponent(j.job) + "/trigger"),
      j.paused
        ? actionButton("action-resume", "Resume", "Resume " + j.job + " on every node?", "api/jobs/" + encodeURIComponent(j.job) + "/resume")
        : actionButton("action-pause", "Pause", "Pause " + j.job + " on every node? Running runs finish.", "api/jobs/" + encodeURIComponent(j.job) + "/pause")));
    head.push(jobDefinition(j));
    head.push(await depsView(j));
  }
  head.push(jobCharts(data.runs));
  return [...head,
    el("h2", {}, "History"),
    el("div", { class: "toolbar" }, statusSel),
    el("table", { id: "runs-table" },
      el("thead", {}, el("tr", {}, ["Tick", "Shard", "Status", "Tick status", "Attempt", "Node", "Fence", "Duration", "Error / output", ""].map((h) => el("th", {}, h)))),
      tbody),
    el("div", { class: "pager" }, more),
    await auditSection(name),
    typeof notifySection === "function" ? await notifySection(name) : null];
}

// orDefault shows a setting: its value, or "default" when 0 or empty.
function orDefault(v, show) {
  return v ? (show ? show(v) : String(v)) : el("span", { class: "muted" }, "default");
}

// jobDefinition is the job's definition (#job-def, rows tr.def-row[data-key])
// and its next ticks (#job-next-ticks, rows tr.next-tick: relative, in the
// viewer's zone, in UTC).
function jobDefinition(j) {
  const d = j.definition;
  const rows = [];
  const row = (key, ...value) => rows.push(el("tr", { class: "def-row", "data-key": key }, el("th", {}, key), el("td", {}, ...value)));
  row("schedule", el("code", {}, j.schedule || j.spec || "—"), " ", el("span", { class: "muted" }, j.timezone || "UTC"));
  if (!d) {
    row("defined", el("span", { class: "muted" }, j.configured ? "—" : "not in this node's configuration: only its registered schedule is known here"));
  } else {
    for (const f of d.handler) row(f.key, el("code", { class: "def-handler" }, f.value));
    row("timeout", d.timeout_ms ? fmtMS(d.timeout_ms) : el("span", { class: "muted" }, "none"));
    row("retries", String(d.retries), d.retries ? el("span", { class: "muted" }, " (backoff " + fmtMS(d.retry_backoff_ms || 1000) + " up to " + fmtMS(d.retry_backoff_max_ms || 60000) + ")") : null);
    row("overlap", d.max_concurrent ? "allow, at most " + d.max_concurrent + " at once" : d.overlap);
    row("misfire", d.misfire, el("span", { class: "muted" }, " (grace " + fmtMS(d.misfire_after_ms || 5000) + ", window " + fmtMS(d.misfire_window_ms || 3600000) +
      (d.misfire === "catch_up" ? ", at most " + (d.catch_up_max || 10) + " ticks" : "") + ")"));
    row("shards", d.shards > 1 ? String(d.shards) : el("span", { class: "muted" }, "not sharded"));
    row("pool", d.pool ? [d.pool, el("span", { class: "muted" }, d.pool_wait_ms ? " (waits up to " + fmtMS(d.pool_wait_ms) + ")" : " (waits until the next tick)")] : el("span", { class: "muted" }, "none"));
    row("nodes", d.nodes.length ? d.nodes.map((l) => el("span", { class: "badge label" }, l)) : el("span", { class: "muted" }, "any node"));
    row("run_on", d.run_on);
    if (d.after.length) row("after", d.after.join(", "), el("span", { class: "muted" }, d.within_ms ? " (waits up to " + fmtMS(d.within_ms) + ")" : " (waits until the next tick)"));
    if (d.jitter_ms) row("jitter", fmtMS(d.jitter_ms));
    row("lock", "ttl ", orDefault(d.lock_ttl_ms, fmtMS), ", min hold ", orDefault(d.min_hold_ms, fmtMS), ", max hold ", orDefault(d.max_hold_ms, fmtMS));
  }
  const ticks = j.next_ticks.map((t) => el("tr", { class: "next-tick", "data-tick": t },
    el("td", { class: "next-rel" }, timeEl(t)),
    el("td", { class: "next-local" }, fmtTime(t, false)),
    el("td", { class: "next-utc" }, fmtTime(t, true))));
  return el("section", { id: "job-def", class: "job-def" },
    el("div", {}, el("h2", {}, "Definition"), el("table", { class: "def" }, el("tbody", {}, rows))),
    el("div", {}, el("h2", {}, "Next ticks"),
      ticks.length
        ? el("table", { id: "job-next-ticks" },
          el("thead", {}, el("tr", {}, el("th", {}, "In"), el("th", {}, "Your zone (" + zoneName(new Date()) + ")"), el("th", {}, "UTC"))),
          el("tbody", {}, ticks))
        : el("p", { class: "muted" }, "none")));
}

// jobCharts draws the duration and lateness (start − tick) of the runs
// listed (#job-charts), with chart.js's lineChart when it is loaded.
function jobCharts(runs) {
  const done = runs.filter((r) => r.start).slice().reverse();
  const sec = el("section", { id: "job-charts" }, el("h2", {}, "Recent runs"));
  if (done.length < 2) {
    sec.append(el("p", { class: "muted" }, "Charts show once the job has two runs or more."));
    return sec;
  }
  if (typeof lineChart !== "function") {
    sec.append(el("p", { class: "muted chart-placeholder" }, "Duration and lateness charts need chart.js."));
    return sec;
  }
  // A run found interrupted elsewhere has no known duration (runDur): left out.
  const dur = done.map((r) => [r.tick, r.end && !noticedElsewhere(r) ? new Date(r.end) - new Date(r.start) : null]);
  const late = done.map((r) => [r.tick, new Date(r.start) - new Date(r.tick)]);
  sec.append(
    el("div", { class: "chart-box", id: "job-duration-chart" }, lineChart([{ name: "duration", points: dur }], { label: "duration of the last runs", fmt: fmtMS, height: 150 })),
    el("div", { class: "chart-box", id: "job-lateness-chart" }, lineChart([{ name: "lateness", points: late }], { label: "lateness: start − tick", fmt: fmtMS, height: 150 })));
  return sec;
}

// auditSection lists the job's audit entries (GET api/audit?job=), newest
// first: who created, changed, deleted, paused, resumed or triggered it,
// and when. Nothing when the store keeps no audit.
async function auditSection(name) {
  let data;
  try {
    data = await api("api/audit?" + new URLSearchParams({ job: name, limit: "50" }));
  } catch (e) {
    return null;
  }
  const rows = data.audit.map((a) => el("tr", { class: "audit-row", "data-action": a.action },
    el("td", {}, timeEl(a.at)),
    el("td", { class: "audit-who" }, a.who),
    el("td", { class: "audit-action" }, a.action),
    el("td", {}, a.detail ? el("pre", { class: "audit-detail" }, a.detail) : "—")));
  return el("section", { id: "job-audit" },
    el("h2", {}, "Audit"),
    rows.length
      ? el("table", { id: "audit-table" },
        el("thead", {}, el("tr", {}, ["When", "Who", "Action", "What changed"].map((h) => el("th", {}, h)))),
        el("tbody", {}, rows))
      : el("p", { class: "muted" }, "No changes recorded for this job."));
}

// depsView is the job's place in the dependency graph: the jobs it waits
// for (after), itself, and the jobs that wait for it (children), each with
// its last run's status and a link to its page; null without any.
async function depsView(j) {
  const after = j.after || [], children = j.children || [];
  if (!after.length && !children.length) return null;
  const names = [...new Set([...after, ...children])];
  const views = await Promise.all(names.map((n) =>
    api("api/jobs?" + new URLSearchParams({ name: n })).then((d) => d.jobs[0] || null, () => null)));
  const byName = {};
  names.forEach((n, i) => { byName[n] = views[i]; });
  const node = (n, role) => {
    const v = byName[n];
    const lr = v && v.last_run;
    const st = lr && (lr.tick_status || lr.status);
    return el("li", { class: "dag-node dag-" + role, "data-job": n, "data-status": lr ? st : "none" },
      el("a", { href: "#/job/" + encodeURIComponent(n) }, n), " ",
      lr ? [statusBadge(st), " ", el("span", { class: "muted" }, timeEl(lr.tick))]
        : el("span", { class: "muted" }, v ? "no run yet" : "not known here"));
  };
  const col = (title, id, items, role) => el("div", { class: "dag-col" }, el("h2", {}, title),
    el("ul", { id: id }, items.length ? items.map((n) => node(n, role)) : el("li", { class: "muted" }, "none")));
  const lr = j.last_run;
  const st = lr && (lr.tick_status || lr.status);
  return el("div", { id: "job-deps", class: "dag" },
    col("Waits for", "dag-parents", after, "parent"),
    el("div", { class: "dag-arrow" }, "→"),
    el("div", { class: "dag-col" }, el("h2", {}, "This job"),
      el("ul", {}, el("li", { class: "dag-node dag-self", "data-job": j.job, "data-status": lr ? st : "none" },
        el("strong", {}, j.job), " ", lr ? statusBadge(st) : el("span", { class: "muted" }, "no run yet")))),
    el("div", { class: "dag-arrow" }, "→"),
    col("Then", "dag-children", children, "child"));
}

// lockKind is a lock row's kind as people read it (apijson.Lock.KindText).
function lockKind(l) {
  if (l.waiting) return l.kind + " (waiting)";
  if (l.permits) return l.kind + " (of " + l.permits + ")";
  return l.kind || "mutex";
}

async function locksPage() {
  const after = state.locksAfter || "";
  const q = new URLSearchParams({ limit: "100" });
  if (after) q.set("after", after);
  const data = await api("api/locks?" + q);
  const rows = data.locks.map((l) => el("tr", { class: "lock-row", "data-key": l.key },
    el("td", { class: "lock-key" }, l.key),
    el("td", { class: "lock-kind" }, lockKind(l)),
    el("td", {}, l.owner),
    el("td", { class: "num" }, l.fence),
    el("td", { class: "num" }, fmtMS(l.expires_in_ms)),
    el("td", { class: "num" }, l.held_for_ms === null ? "—" : "≥ " + fmtMS(l.held_for_ms)),
    el("td", {}, actionButton("action-release", "Release", "Release " + l.key + " by force? Its holder loses it at its next renewal.",
      "api/locks/" + encodeURIComponent(l.key) + "/release"))));
  return [
    el("h1", {}, "Locks ", el("span", { class: "muted" }, "(" + data.total + ")")),
    el("table", { id: "locks-table" },
      el("thead", {}, el("tr", {}, ["Key", "Kind", "Holder", "Fence", "Expires in", "Held for", ""].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows)),
    el("div", { class: "pager" },
      el("button", { id: "locks-first", type: "button", disabled: !after, onclick: () => { state.locksAfter = ""; render(); } }, "First"),
      el("button", { id: "locks-next", type: "button", disabled: !data.next, onclick: () => { state.locksAfter = data.next; render(); } }, "Next"))];
}

async function nodesPage() {
  const data = await api("api/nodes");
  const rows = data.nodes.map((n) => el("tr", { class: "node-row", "data-node": n.node, "data-alive": String(n.alive), "data-leader": String(!!n.leader) },
    el("td", {}, n.node),
    el("td", { class: n.alive ? "state-active" : "muted" }, n.alive ? "alive" : "gone"),
    el("td", { class: "node-leader" }, n.leader ? el("span", { class: "badge leader-badge", title: "elected leader, term " + n.leader_term }, "leader") : ""),
    el("td", {}, timeEl(n.last_seen)),
    el("td", {}, n.version || "—"),
    el("td", { class: "num" }, n.alive ? n.fence : "—")));
  const l = data.leader;
  return [
    el("h1", {}, "Nodes"),
    el("p", { id: "nodes-leader", class: "muted" }, l
      ? ["Leader: ", el("strong", {}, l.node), " (term " + l.term + ", lease ends in " + fmtMS(l.expires_in_ms) + "): it runs the jobs with run_on: leader."]
      : "No leader elected now: jobs with run_on: leader wait for one."),
    el("table", { id: "nodes-table" },
      el("thead", {}, el("tr", {}, ["Node", "State", "Role", "Last seen", "Version", "Fence"].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows))];
}

// Routing and live updates.

function routeSection() {
  const r = location.hash.replace(/^#\/?/, "");
  if (r.startsWith("job/") || r.startsWith("run/")) return "runs";
  if (r === "locks" || r === "nodes") return r;
  if (r === "" || r === "overview") return "overview";
  return "jobs";
}

// render shows the page of the route. Renders overlap (a click, a live
// update, a hash change while the API answers): only the latest started
// may replace the page, else a slow render of the page just left would
// overwrite the new one.
async function render() {
  const main = document.getElementById("main");
  const gen = ++state.renders;
  const r = location.hash.replace(/^#\/?/, "") || "overview";
  for (const id of ["overview", "jobs", "locks", "nodes"]) {
    document.getElementById("nav-" + id).classList.toggle("active", r === id || (id === "jobs" && (r.startsWith("job/") || r.startsWith("run/"))));
  }
  try {
    let page;
    if (r.startsWith("job/")) page = await jobPage(decodeURIComponent(r.slice(4)));
    else if (r.startsWith("run/")) page = await runPage(decodeURIComponent(r.slice(4)));
    else if (r === "locks") page = await locksPage();
    else if (r === "nodes") page = await nodesPage();
    else if (r === "overview") page = await overviewPage();
    else page = await jobsPage();
    if (gen !== state.renders) return;
    // A page leaves out the parts it has nothing for as null.
    main.replaceChildren(...page.filter((c) => c !== null && c !== undefined));
    main.dataset.loaded = String(Date.now());
  } catch (e) {
    if (gen === state.renders) message(e.message, true);
  }
}

async function loadInfo() {
  const info = await api("api/info");
  state.info = info;
  state.csrf = info.csrf || "";
  document.getElementById("info").textContent = [info.node && "node " + info.node, info.version, info.store].filter(Boolean).join(" · ");
  document.getElementById("read-only").hidden = !info.read_only;
  document.getElementById("login-form").hidden = info.read_only || info.logged_in;
  document.getElementById("logout-button").hidden = !info.logged_in;
}

function listen() {
  const live = document.getElementById("live");
  const es = new EventSource("api/events");
  es.addEventListener("open", () => live.classList.add("on"));
  es.addEventListener("error", () => live.classList.remove("on"));
  es.addEventListener("summary", (ev) => {
    const s = JSON.parse(ev.data);
    live.classList.toggle("on", !s.error);
    live.title = s.error ? s.error : "live: " + s.locks + " locks, " + s.running + " running, " + s.nodes_alive + " nodes";
    const sec = routeSection();
    const due = sec === "overview" ? s.changed.length > 0 && overviewDue() : s.changed.includes(sec) || (sec === "runs" && s.changed.includes("jobs"));
    if (due) refresh();
  });
}

// refresh re-renders the page for a live update. An update arriving while
// a render runs is not dropped: one more render follows it, as the first
// may have read the store before the change.
function refresh() {
  if (state.refreshing) {
    state.again = true;
    return;
  }
  state.refreshing = true;
  state.again = false;
  render().finally(() => {
    state.refreshing = false;
    if (state.again) refresh();
  });
}

document.addEventListener("DOMContentLoaded", async () => {
  document.getElementById("login-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    try {
      const body = new URLSearchParams({ token: document.getElementById("login-token").value });
      await api("login", { method: "POST", body: body, headers: { Accept: "application/json" } });
      document.getElementById("login-token").value = "";
      message("");
      await loadInfo();
      await render();
    } catch (err) {
      message(err.message, true);
    }
  });
  document.getElementById("logout-button").addEventListener("click", async () => {
    try { await post("logout"); } catch (err) { message(err.message, true); }
    if (!state.info.public_read) {
      // Reading needs a session: the page is now the login page.
      location.reload();
      return;
    }
    await loadInfo();
    await render();
  });
  showZone();
  document.getElementById("zone-switch").addEventListener("click", () => setZone(!zone.utc));
  setInterval(refreshTimes, 1000);
  window.addEventListener("hashchange", () => { state.jobsAfter = [""]; state.locksAfter = ""; render(); });
  try { await loadInfo(); } catch (err) { message(err.message, true); }
  await render();
  listen();
});
