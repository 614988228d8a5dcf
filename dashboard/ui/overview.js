// tasklock dashboard: the overview page (#/ and #/overview), the landing
// page, from GET api/overview (see the package documentation of
// dashboard). It uses el, api, timeEl and fmtMS of app.js and the charts
// of chart.js. Stable ids and classes for browser tests: #overview,
// #overview-cards .card[data-figure] .figure, #overview-p50,
// #overview-p99, #overview-failure-rate, #overview-sampled,
// #overview-runs-chart (svg.chart rect.bar[data-status]),
// #overview-lateness-chart (svg.chart path.series[data-name=p50|p99]),
// #overview-missed li.missed-job[data-job] a.
"use strict";

// overviewStatuses are the statuses in the order the bars stack them.
const overviewStatuses = ["ok", "failed", "timeout", "lost", "cancelled", "interrupted", "skipped", "missed", "running"];

// overviewRendered is when the overview last rendered: app.js's live
// updates refresh it at most every overviewEvery ms.
let overviewRendered = 0;
const overviewEvery = 10000;

// overviewDue reports whether a live update should render the overview
// again.
function overviewDue() {
  return Date.now() - overviewRendered >= overviewEvery;
}

function fmtRate(r) {
  return r === null || r === undefined ? "—" : (r * 100).toFixed(r < 0.01 && r > 0 ? 2 : 1) + " %";
}

function fmtLate(v) {
  return v === null || v === undefined ? "—" : fmtMS(Math.round(v));
}

// card is one figure of the overview: a label, a big value, and a line of
// detail.
function card(figure, label, value, detail, id) {
  return el("div", { class: "card", "data-figure": figure },
    el("div", { class: "card-label muted" }, label),
    el("div", { class: "figure", id: id }, value),
    detail ? el("div", { class: "card-detail muted" }, detail) : null);
}

// byStatus is a period's counts as badges, in overviewStatuses' order.
function byStatus(runs) {
  const keys = overviewStatuses.filter((k) => runs[k]);
  if (!keys.length) return "no runs";
  return keys.flatMap((k) => [el("span", { class: "status status-" + k, "data-status": k }, k + " " + runs[k]), " "]);
}

// nodesGone is the nodes card's detail: the nodes api/nodes lists as gone
// (seen lately, their node lease ended), each with when it was last seen;
// null when none is.
function nodesGone(nodes) {
  const gone = nodes ? nodes.nodes.filter((n) => !n.alive) : [];
  if (!gone.length) return null;
  const named = gone.slice(0, 3).flatMap((n, i) => [i ? ", " : "", n.node + " (last seen ", timeEl(n.last_seen), ")"]);
  return [el("a", { href: "#/nodes", class: "state-broken" }, gone.length + " gone"), ": ", ...named, gone.length > 3 ? ", …" : ""];
}

async function overviewPage() {
  const [d, nodes] = await Promise.all([
    api("api/overview?" + new URLSearchParams({ window: "24h", bucket: "1m" })),
    api("api/nodes").catch(() => null)]);
  overviewRendered = Date.now();
  const h = d.last_hour, day = d.last_day;
  const width = Math.max(320, (document.getElementById("main").clientWidth || 900) - 24);
  const cards = el("div", { id: "overview-cards", class: "cards" },
    card("nodes", "Nodes alive", d.nodes ? d.nodes.alive : "—", d.nodes ? nodesGone(nodes) : "the store cannot list its locks"),
    card("jobs", "Jobs", d.jobs.total, [d.jobs.active + " active · ", el("span", { class: d.jobs.paused ? "state-paused" : "" }, d.jobs.paused + " paused"), " · ",
      el("span", { class: d.jobs.broken ? "state-broken" : "" }, d.jobs.broken + " broken")]),
    card("runs-hour", "Runs, last hour", h.total, byStatus(h.runs)),
    card("runs-day", "Runs, last day", day.total, byStatus(day.runs)),
    card("failure-rate", "Failure rate, last hour", fmtRate(h.failure_rate), "last day " + fmtRate(day.failure_rate), "overview-failure-rate"),
    card("p50", "Tick lateness p50, last hour", fmtLate(h.p50_ms), "last day " + fmtLate(day.p50_ms), "overview-p50"),
    card("p99", "Tick lateness p99, last hour", fmtLate(h.p99_ms), "last day " + fmtLate(day.p99_ms), "overview-p99"),
    card("locks", "Locks held", d.locks ? d.locks.held : "—", d.locks ? d.locks.waiting + " waiting" : null),
    card("lock-losses", "Runs that lost their lock, last hour", h.lock_losses,
      "last day " + day.lock_losses + " · ended lost: the job's lock or a limit's permit was lost while they ran"));
  const from = d.from, to = d.to;
  const bars = d.buckets.filter((b) => Object.keys(b.counts).length);
  const runsChart = el("div", { id: "overview-runs-chart", class: "chart-box" },
    bars.length ? stackedBars(bars, overviewStatuses, { width: width, height: 180, from: from, to: to, bucket: d.bucket_ms, label: "runs per minute by status" })
      : el("p", { class: "muted" }, "No runs in the last 24 h."));
  const late = d.buckets.filter((b) => b.p50_ms !== null);
  const latenessChart = el("div", { id: "overview-lateness-chart", class: "chart-box" },
    late.length ? lineChart([
      { name: "p50", points: d.buckets.map((b) => [b.at, b.p50_ms]) },
      { name: "p99", points: d.buckets.map((b) => [b.at, b.p99_ms]) }],
    { width: width, height: 180, from: from, to: to, fmt: fmtLate, label: "tick lateness p50 and p99 per minute" })
      : el("p", { class: "muted" }, "No started runs in the last 24 h."));
  const missed = el("ul", { id: "overview-missed" },
    d.missed.length ? d.missed.map((m) => el("li", { class: "missed-job", "data-job": m.job },
      el("a", { href: "#/job/" + encodeURIComponent(m.job) }, m.job), el("span", { class: "muted" }, " missed ", timeEl(m.tick))))
      : el("li", { class: "muted" }, "None in the last hour."));
  return [
    el("h1", { id: "overview" }, "Overview ", el("span", { class: "muted" }, "last 24 h, as of ", timeEl(d.at))),
    d.sampled ? el("p", { id: "overview-sampled", class: "message" }, "Sampled: " + d.sample_note) : null,
    cards,
    el("h2", {}, "Runs per minute"), runsChart,
    el("h2", {}, "Tick lateness (start − tick)"), latenessChart,
    el("h2", {}, "Jobs that missed their last tick"), missed];
}
