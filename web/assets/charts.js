// teapot-lb dashboard: charts with axes, units and hover values. A chart
// joins the hosts' history rings (10 s points, the last hour, fetched from
// /api/history) with the live points of the event stream (every refresh,
// the last five minutes), and never draws a line across a gap.
"use strict";

// Formats, with units.
function fmtNum(v) { return v < 10 ? v.toFixed(v < 1 && v > 0 ? 2 : 1) : v < 1e4 ? String(Math.round(v)) : (v / 1000).toFixed(1) + "k"; }
function fmtPct(v) { return (100 * v).toFixed(v < 0.1 ? 1 : 0) + "%"; }
function fmtDur(v) { return v <= 0 ? "0" : v < 1 ? (1000 * v).toFixed(v < 0.01 ? 1 : 0) + " ms" : v.toFixed(2) + " s"; }
function fmtBytes(v) {
  const u = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (v >= 1000 && i < u.length - 1) { v /= 1000; i++; }
  return (v < 10 && i ? v.toFixed(1) : String(Math.round(v))) + " " + u[i];
}

// The metrics of a load balancer's charts; a host's add CPU and memory.
const METRICS = [
  { key: "rps", label: "requests/s", unit: "req/s", title: "requests (L7) or connects (L4) per second", fmt: v => fmtNum(v) + "/s", floor: 1 },
  { key: "err", label: "errors (5xx)", unit: "share", title: "share of requests answered 5xx or failing to connect", fmt: fmtPct, floor: 0.01 },
  { key: "p99", label: "p99 latency", unit: "s", title: "99th percentile latency of the interval (request for L7, connect for L4)", fmt: fmtDur, floor: 0.001 },
  { key: "active", label: "open connections", unit: "conns", title: "client connections open", fmt: v => Number.isInteger(v) ? String(v) : v.toFixed(1), floor: 1 },
  { key: "cps", label: "connections/s", unit: "conn/s", title: "client connections (TCP) or flows (UDP) accepted per second", fmt: v => fmtNum(v) + "/s", floor: 1 },
 { key: "bin", label: "bytes in", unit: "B/s", title: "bytes per second from clients (L7: request bodies)", fmt: v => fmtBytes(v) + "/s", floor: 1000 },
  { key: "bout", label: "bytes out", unit: "B/s", title: "bytes per second to clients (L7: response bodies)", fmt: v => fmtBytes(v) + "/s", floor: 1000 },
];
const HOST_METRICS = METRICS.concat([
  { key: "cpu", label: "CPU", unit: "cores", title: "CPU seconds per second of the teapot-lb process", fmt: v => v.toFixed(2) + " cores", floor: 0.1 },
  { key: "mem", label: "memory", unit: "bytes", title: "resident memory of the teapot-lb process", fmt: fmtBytes, floor: 1e6 },
]);
const RANGES = [[300, "5 min"], [900, "15 min"], [3600, "1 h"]];

// chartData keeps each drawn chart's points for the hover read-out.
const chartData = new Map();

// joined is the history points older than the first live point, then the
// live points; each point says which it is (h: from the hosts' rings).
function joined(hist, live) {
  live = live || [];
  const firstLive = live.length ? Date.parse(live[0].t) : Infinity;
  const old = (hist || []).filter(p => Date.parse(p.t) < firstLive).map(p => Object.assign({ h: true }, p));
  return old.concat(live);
}

// segments splits points where two are further apart than their source
// allows (a host that did not answer): no line is drawn across a gap.
function segments(ps, liveStep) {
  const out = [];
  let cur = [];
  for (let i = 0; i < ps.length; i++) {
    if (i > 0) {
      const dt = (Date.parse(ps[i].t) - Date.parse(ps[i - 1].t)) / 1000;
      const step = ps[i].h || ps[i - 1].h ? 10 : liveStep;
      if (dt > 2.5 * step + 1) { out.push(cur); cur = []; }
    }
    cur.push(ps[i]);
  }
  if (cur.length) out.push(cur);
  return out;
}

function hhmm(ms, withSec) {
  const d = new Date(ms);
  const p = n => String(n).padStart(2, "0");
  return `${p(d.getHours())}:${p(d.getMinutes())}` + (withSec ? `:${p(d.getSeconds())}` : "");
}

// chart draws one metric over the chosen range (ending now, by the
// server's clock): a y axis with its unit (0, half, top), an x axis with
// times, a line per stretch without gaps; the newest value and its age
// (marked stale past the bound) in the caption and in data-latest;
// hovering reads out any point.
function chart(id, ps, m, opt) {
  const W = 320, H = 120, L = 46, R = 6, T = 8, B = 18;
  const range = opt.range, now = opt.now, liveStep = opt.liveStep || 1;
  const t0 = now - range * 1000;
  const shown = ps.filter(p => Date.parse(p.t) >= t0);
  const vals = shown.map(p => p[m.key] || 0);
  const top = niceTop(Math.max(m.floor, ...vals));
  const latestP = ps.length ? ps[ps.length - 1] : null;
  const latest = latestP ? latestP[m.key] || 0 : 0;
  const x = t => L + (t - t0) / (range * 1000) * (W - L - R);
  const y = v => T + (1 - v / top) * (H - T - B);
  const lines = segments(shown, liveStep).map(seg => seg.length === 1
    ? `<circle class="dot" cx="${x(Date.parse(seg[0].t)).toFixed(1)}" cy="${y(seg[0][m.key] || 0).toFixed(1)}" r="1.5"></circle>`
    : `<polyline points="${seg.map(p => `${x(Date.parse(p.t)).toFixed(1)},${y(p[m.key] || 0).toFixed(1)}`).join(" ")}"></polyline>`).join("");
  const grid = [0, 0.5, 1].map(f => `<line class="grid" x1="${L}" y1="${y(f * top).toFixed(1)}" x2="${W - R}" y2="${y(f * top).toFixed(1)}"></line>` +
    `<text class="ylab" x="${L - 4}" y="${(y(f * top) + 3).toFixed(1)}">${esc(f ? m.fmt(f * top) : "0")}</text>`).join("");
  const xt = [0, 0.5, 1].map(f => {
    const t = t0 + f * range * 1000;
    return `<text class="xlab" x="${x(t).toFixed(1)}" y="${H - 4}" text-anchor="${f === 0 ? "start" : f === 1 ? "end" : "middle"}">${esc(hhmm(t, range < 900))}</text>`;
  }).join("");
  // A series whose newest point is old (its hosts do not answer) says so.
  const old = latestP && !(ageS(latestP.t) <= staleAfter());
  chartData.set(id, { ps: shown, m, t0, range, top, W, H, L, R, T, B });
  return `<figure class="chart${old ? " stale" : ""}" data-chart="${esc(id)}" data-metric="${m.key}" data-latest="${esc(latest)}" data-points="${shown.length}"` +
    ` data-history="${shown.filter(p => p.h).length}" title="${esc(m.title)}">` +
    `<figcaption>${esc(m.label)} <b class="latest">${latestP ? esc(m.fmt(latest)) : "—"}</b> ` +
    (latestP ? seen(latestP.t) : `<span class="muted">no data</span>`) +
    ` <span class="hover"></span></figcaption>` +
    `<svg viewBox="0 0 ${W} ${H}" role="img" aria-label="${esc(m.label)} over the last ${esc(rangeName(range))}">` +
    grid + xt + `<line class="axis" x1="${L}" y1="${T}" x2="${L}" y2="${H - B}"></line>` + lines +
    `<line class="cursor" x1="-10" y1="${T}" x2="-10" y2="${H - B}"></line><circle class="cursor" cx="-10" cy="-10" r="3"></circle></svg></figure>`;
}

// niceTop rounds a maximum up to 1, 2, 2.5 or 5 times a power of ten, so
// the axis reads in round numbers.
function niceTop(v) {
  const e = Math.pow(10, Math.floor(Math.log10(v)));
  for (const f of [1, 2, 2.5, 5, 10]) if (v <= f * e * 1.0000001) return f * e;
  return 10 * e;
}

function rangeName(s) { const r = RANGES.find(x => x[0] === s); return r ? r[1] : `${s} s`; }

// charts draws every metric of one series; hist is its history points.
function chartSet(scope, id, live, hist, metrics) {
  if (!chartsDrawn) return chartsLater(metrics || METRICS);
  const s = state.snap;
  const opt = { range: state.range, now: Date.parse(s.time) + (Date.now() - state.recvAt), liveStep: s.intervalSeconds || 1 };
  const ps = joined(hist, live);
  return `<div class="charts">${(metrics || METRICS).map(m => chart(`${scope}:${id}:${m.key}`, ps, m, opt)).join("")}</div>`;
}

// The page's first render leaves the charts out (a box of their size per
// chart), so what it says is shown first; the next frame draws them.
let chartsDrawn = false, chartsQueued = false;
function chartsLater(metrics) {
  if (!chartsQueued) {
    chartsQueued = true;
    requestAnimationFrame(() => setTimeout(() => { chartsDrawn = true; render(); }, 0));
  }
  return `<div class="charts">${metrics.map(m => `<figure class="chart pending" data-metric="${m.key}"><figcaption>${esc(m.label)}</figcaption></figure>`).join("")}</div>`;
}

// hoverAt shows, on the chart under the pointer, the point nearest in
// time: a cursor line and the value with its time and the hosts it sums.
function hoverAt(fig, clientX) {
  const d = chartData.get(fig.dataset.chart);
  const svg = fig.querySelector("svg");
  if (!d || !svg || !d.ps.length) return;
  const box = svg.getBoundingClientRect();
  const vx = (clientX - box.left) / box.width * d.W;
  const t = d.t0 + (vx - d.L) / (d.W - d.L - d.R) * d.range * 1000;
  let best = d.ps[0];
  for (const p of d.ps) if (Math.abs(Date.parse(p.t) - t) < Math.abs(Date.parse(best.t) - t)) best = p;
  const bx = d.L + (Date.parse(best.t) - d.t0) / (d.range * 1000) * (d.W - d.L - d.R);
  const by = d.T + (1 - (best[d.m.key] || 0) / d.top) * (d.H - d.T - d.B);
  const [line, dot] = svg.querySelectorAll(".cursor");
  line.setAttribute("x1", bx.toFixed(1));
  line.setAttribute("x2", bx.toFixed(1));
  dot.setAttribute("cx", bx.toFixed(1));
  dot.setAttribute("cy", by.toFixed(1));
  fig.querySelector(".hover").textContent = `${hhmm(Date.parse(best.t), true)}: ${d.m.fmt(best[d.m.key] || 0)}` +
    (best.hosts > 1 ? ` (${best.hosts} hosts)` : "") + (best.h ? " · 10 s avg" : "");
  state.hover = { id: fig.dataset.chart, x: clientX };
}

function hoverClear(fig) {
  const svg = fig.querySelector("svg");
  if (svg) for (const c of svg.querySelectorAll(".cursor")) { c.setAttribute("x1", -10); c.setAttribute("x2", -10); c.setAttribute("cx", -10); }
  const h = fig.querySelector(".hover");
  if (h) h.textContent = "";
  state.hover = null;
}

// rehover puts the read-out back after a render replaced the chart.
function rehover() {
  if (!state.hover) return;
  const fig = document.querySelector(`figure.chart[data-chart="${CSS.escape(state.hover.id)}"]`);
  if (fig) hoverAt(fig, state.hover.x);
}

document.addEventListener("mousemove", ev => {
  const fig = ev.target.closest && ev.target.closest("figure.chart");
  if (fig) hoverAt(fig, ev.clientX);
  else if (state.hover) {
    const old = document.querySelector(`figure.chart[data-chart="${CSS.escape(state.hover.id)}"]`);
    if (old) hoverClear(old); else state.hover = null;
  }
});

// History: the hosts' rings, fetched when a page needs them and again
// every 30 s while it shows them (the live points cover what is newer).
const HISTORY_EVERY_MS = 30000;
function history(key) {
  const e = state.hist[key];
  if (!e || (!e.busy && Date.now() - e.at > HISTORY_EVERY_MS)) {
    const url = key === "hosts" ? "/api/history" : "/api/history?lb=" + encodeURIComponent(key.slice(3));
    state.hist[key] = Object.assign(e || { data: null, error: "" }, { busy: true, at: Date.now() });
    fetch(url, { cache: "no-store" }).then(r => r.ok ? r.json() : r.text().then(t => Promise.reject(new Error(t.trim() || `HTTP ${r.status}`))))
      .then(d => { state.hist[key] = { data: d, error: "", at: Date.now(), busy: false }; },
        err => { state.hist[key] = { data: (state.hist[key] || {}).data, error: String(err.message || err), at: Date.now(), busy: false }; })
      .finally(() => renderSoon());
  }
  return state.hist[key];
}

// historyNote says where the older points come from, how old that read
// is, and what is missing.
function historyNote(h) {
  if (!h || (!h.data && !h.error)) return `<p class="muted hist">Reading the hosts' history…</p>`;
  let s = "";
  if (h.data) s += `older points: the hosts' history rings (10 s, up to 1 h), read ${ago(h.data.time)}`;
  if (h.data && h.data.missing && h.data.missing.length) s += `; missing: ${h.data.missing.map(esc).join("; ")}`;
  if (h.error) s += (s ? "; " : "") + `<span class="reason">history not read: ${esc(h.error)}</span>`;
  return `<p class="muted hist">${s}</p>`;
}
