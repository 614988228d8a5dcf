// tasklock dashboard charts: plain SVG written here, no chart library.
// The dashboard is embedded in the binary and fetches nothing at run time;
// the chart libraries we looked at (uPlot first) come from npm, which the
// build machines cannot reach, and Debian packages none of them. Three
// small charts need little code, so they are drawn by hand:
//
//   lineChart(series, opts)          time x-axis, one path per series
//   stackedBars(buckets, keys, opts) counts per time bucket, stacked by status
//   sparkline(statuses)              the last runs of a job as small bars
//
// Each returns an <svg> element to append; they read no globals but the
// document. Stable classes for browser tests: svg.chart (svg.line-chart,
// svg.bar-chart), path.series[data-name], rect.bar[data-status][data-count],
// svg.sparkline rect.spark[data-status], .chart-tooltip, g.x-axis, g.y-axis.
// Colours come from style.css: the status classes' variables (--ok,
// --failed, ...) through the classes rect.bar.status-fill-STATUS.
"use strict";

const SVGNS = "http://www.w3.org/2000/svg";

// svgEl makes an SVG element with attributes and children.
function svgEl(tag, attrs, ...children) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c !== null && c !== undefined) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// chartTime formats an axis or tooltip time: the page's fmtTime (app.js)
// when it is loaded, else ISO.
function chartTime(t) {
  return typeof fmtTime === "function" ? fmtTime(t) : new Date(t).toISOString();
}

// niceStep returns a round step (1, 2 or 5 times a power of ten) that cuts
// [0, max] into about n parts.
function niceStep(max, n) {
  if (!(max > 0)) return 1;
  const raw = max / n;
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  for (const m of [1, 2, 5, 10]) if (raw <= m * p) return m * p;
  return 10 * p;
}

// timeTicks returns about n round instants between t0 and t1 (ms).
function timeTicks(t0, t1, n) {
  const steps = [60e3, 5 * 60e3, 15 * 60e3, 30 * 60e3, 3600e3, 2 * 3600e3, 3 * 3600e3, 6 * 3600e3, 12 * 3600e3, 86400e3];
  const span = Math.max(t1 - t0, 1);
  const step = steps.find((s) => span / s <= n) || steps[steps.length - 1];
  const out = [];
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) out.push(t);
  return out;
}

// shortTime is an x-axis label: HH:MM of the time as fmtTime shows it.
function shortTime(t) {
  const s = chartTime(t);
  const m = s.match(/(\d\d:\d\d)(:\d\d)?/);
  return m ? m[1] : s;
}

// frame draws the axes of a chart of size w×h with the given margins and
// returns { svg, plot, x, y } where x and y map data to pixels.
function frame(cls, opts, t0, t1, ymax, yfmt) {
  const w = opts.width || 720, h = opts.height || 180;
  const m = { l: 48, r: 8, t: 8, b: 22 };
  const pw = w - m.l - m.r, ph = h - m.t - m.b;
  const x = (t) => m.l + (t1 > t0 ? (t - t0) / (t1 - t0) : 0) * pw;
  const step = niceStep(ymax, 4);
  const top = Math.max(step, Math.ceil(ymax / step) * step);
  const y = (v) => m.t + ph - (v / top) * ph;
  const svg = svgEl("svg", { class: "chart " + cls, viewBox: `0 0 ${w} ${h}`, width: w, height: h, role: "img" });
  if (opts.label) svg.append(svgEl("title", {}, opts.label));
  const ya = svgEl("g", { class: "y-axis" });
  for (let v = 0; v <= top + step / 2; v += step) {
    ya.append(svgEl("line", { x1: m.l, x2: w - m.r, y1: y(v), y2: y(v), class: "grid" }),
      svgEl("text", { x: m.l - 4, y: y(v) + 4, "text-anchor": "end" }, yfmt(v)));
  }
  const xa = svgEl("g", { class: "x-axis" });
  for (const t of timeTicks(t0, t1, Math.max(2, Math.floor(pw / 90)))) {
    xa.append(svgEl("line", { x1: x(t), x2: x(t), y1: m.t + ph, y2: m.t + ph + 4, class: "tick" }),
      svgEl("text", { x: x(t), y: h - 6, "text-anchor": "middle" }, shortTime(t)));
  }
  xa.append(svgEl("line", { x1: m.l, x2: w - m.r, y1: m.t + ph, y2: m.t + ph, class: "axis" }));
  svg.append(ya, xa);
  return { svg, x, y, m, w, h, pw, ph };
}

// tooltip attaches a hover box to a chart: at(px) returns the text for the
// pointer's x position in the SVG's coordinates, or "" for none.
function tooltip(f, at) {
  const box = svgEl("g", { class: "chart-tooltip", visibility: "hidden" });
  const bg = svgEl("rect", { rx: 3, ry: 3 });
  const text = svgEl("text", {});
  const rule = svgEl("line", { class: "hover-rule", y1: f.m.t, y2: f.m.t + f.ph });
  box.append(rule, bg, text);
  f.svg.append(box);
  f.svg.addEventListener("mousemove", (ev) => {
    const r = f.svg.getBoundingClientRect();
    const px = (ev.clientX - r.left) * (f.w / r.width);
    const lines = px < f.m.l ? [] : at(px);
    if (!lines.length) { box.setAttribute("visibility", "hidden"); return; }
    text.replaceChildren(...lines.map((l, i) => svgEl("tspan", { x: 0, dy: i ? "1.2em" : "1em" }, l)));
    rule.setAttribute("x1", px); rule.setAttribute("x2", px);
    const bw = 8 + 6.5 * Math.max(...lines.map((l) => l.length)), bh = 6 + 16.8 * lines.length;
    const bx = px + bw + 12 > f.w ? px - bw - 8 : px + 8;
    bg.setAttribute("x", bx); bg.setAttribute("y", f.m.t); bg.setAttribute("width", bw); bg.setAttribute("height", bh);
    text.setAttribute("transform", `translate(${bx + 4},${f.m.t + 2})`);
    for (const s of text.children) s.setAttribute("x", 0);
    box.setAttribute("visibility", "visible");
  });
  f.svg.addEventListener("mouseleave", () => box.setAttribute("visibility", "hidden"));
}

// nearest returns the index of the point of ts (sorted ms times) nearest t.
function nearest(ts, t) {
  let best = -1, bd = Infinity;
  ts.forEach((v, i) => { const d = Math.abs(v - t); if (d < bd) { bd = d; best = i; } });
  return best;
}

// lineChart draws series = [{name, points: [[time, value|null], ...]}] on a
// time axis; null values break the line. opts: width, height, label, unit
// (a suffix for values, e.g. " ms"), fmt (value formatter, e.g. fmtMS),
// from/to (the x range; default the points' range).
function lineChart(series, opts) {
  opts = opts || {};
  const fmt = opts.fmt || ((v) => String(Math.round(v * 100) / 100) + (opts.unit || ""));
  const all = series.flatMap((s) => s.points.map((p) => [new Date(p[0]).getTime(), p[1]]));
  const t0 = opts.from ? new Date(opts.from).getTime() : Math.min(...all.map((p) => p[0]));
  const t1 = opts.to ? new Date(opts.to).getTime() : Math.max(...all.map((p) => p[0]));
  const ymax = Math.max(0, ...all.map((p) => p[1] || 0));
  const f = frame("line-chart", opts, t0, t1, ymax, fmt);
  series.forEach((s, i) => {
    // A point without neighbours gets a short stroke, so that it shows.
    let d = "", pen = "M", run = 0;
    const lone = () => { if (run === 1) d += "h2"; run = 0; };
    for (const [t, v] of s.points) {
      if (v === null || v === undefined) { lone(); pen = "M"; continue; }
      d += `${pen}${f.x(new Date(t).getTime()).toFixed(1)},${f.y(v).toFixed(1)}`;
      pen = "L";
      run++;
    }
    lone();
    f.svg.append(svgEl("path", { class: "series series-" + i, "data-name": s.name, d: d, fill: "none" }));
  });
  const legend = svgEl("g", { class: "legend" });
  series.forEach((s, i) => legend.append(svgEl("text", { x: f.m.l + 8 + i * 90, y: f.m.t + 12, class: "legend-" + i }, "— " + s.name)));
  f.svg.append(legend);
  const ts = series.length ? series[0].points.map((p) => new Date(p[0]).getTime()) : [];
  tooltip(f, (px) => {
    const t = t0 + ((px - f.m.l) / f.pw) * (t1 - t0);
    const i = nearest(ts, t);
    if (i < 0) return [];
    return [chartTime(ts[i]), ...series.map((s) => s.name + ": " + (s.points[i] && s.points[i][1] !== null ? fmt(s.points[i][1]) : "—"))];
  });
  return f.svg;
}

// stackedBars draws buckets = [{at: time, counts: {status: n}}] (sorted,
// equal widths) as one bar per bucket, stacked in the order of keys (the
// statuses; the first at the bottom). opts: width, height, label, from/to,
// bucket (ms; default the distance of the first two buckets).
function stackedBars(buckets, keys, opts) {
  opts = opts || {};
  const ts = buckets.map((b) => new Date(b.at).getTime());
  const step = opts.bucket || (ts.length > 1 ? ts[1] - ts[0] : 60e3);
  const t0 = opts.from ? new Date(opts.from).getTime() : (ts.length ? ts[0] : Date.now() - step);
  const t1 = opts.to ? new Date(opts.to).getTime() : (ts.length ? ts[ts.length - 1] + step : Date.now());
  const total = (b) => keys.reduce((a, k) => a + (b.counts[k] || 0), 0);
  const ymax = Math.max(0, ...buckets.map(total));
  const f = frame("bar-chart", opts, t0, t1, ymax, (v) => String(v));
  const bw = Math.max(1, f.x(t0 + step) - f.x(t0) - (f.pw / Math.max(1, (t1 - t0) / step) > 3 ? 1 : 0));
  const bars = svgEl("g", { class: "bars" });
  buckets.forEach((b, i) => {
    let base = 0;
    for (const k of keys) {
      const n = b.counts[k] || 0;
      if (!n) continue;
      const y0 = f.y(base), y1 = f.y(base + n);
      bars.append(svgEl("rect", { class: "bar status-fill-" + k, "data-status": k, "data-count": n,
        x: f.x(ts[i]).toFixed(1), y: y1.toFixed(1), width: bw.toFixed(1), height: Math.max(0.5, y0 - y1).toFixed(1) }));
      base += n;
    }
  });
  f.svg.append(bars);
  tooltip(f, (px) => {
    const t = t0 + ((px - f.m.l) / f.pw) * (t1 - t0);
    const i = ts.findIndex((v) => t >= v && t < v + step);
    if (i < 0) return [];
    const b = buckets[i];
    return [chartTime(ts[i]) + "  total " + total(b), ...keys.filter((k) => b.counts[k]).map((k) => k + ": " + b.counts[k])];
  });
  return f.svg;
}

// sparkline draws statuses (oldest first, e.g. the last 50 runs of a job)
// as small equal bars coloured by status: a tall bar for ok, a full one for
// the rest, so failures stand out; each bar has a title with its status
// (and time, when the items are {status, tick} objects).
function sparkline(statuses, opts) {
  opts = opts || {};
  const n = Math.max(statuses.length, opts.slots || 0);
  const bw = 3, gap = 1, h = opts.height || 14;
  const svg = svgEl("svg", { class: "sparkline", width: Math.max(1, n * (bw + gap)), height: h, viewBox: `0 0 ${Math.max(1, n * (bw + gap))} ${h}` });
  const ok = statuses.filter((s) => (s.status || s) === "ok").length;
  svg.append(svgEl("title", {}, statuses.length ? `${ok} of the last ${statuses.length} runs ok` : "no runs"));
  statuses.forEach((s, i) => {
    const st = s.status || s;
    const bh = st === "ok" ? h * 0.6 : h;
    svg.append(svgEl("rect", { class: "spark status-fill-" + st, "data-status": st, x: i * (bw + gap), y: h - bh, width: bw, height: bh },
      svgEl("title", {}, st + (s.tick ? " " + chartTime(s.tick) : ""))));
  });
  return svg;
}
