// teapot-lb dashboard: reads /api/stream (server-sent events) and renders
// the page named in the URL fragment. Read-only; no third-party code.
"use strict";

const state = {
  snap: null, events: [], charts: { lbs: {}, hosts: {}, omitted: 0 },
  // recvAt: when the last view arrived (this browser's clock); ages are
  // the server's (snapshot time - observed) plus the time since then.
  recvAt: 0,
  // The page's own stream: open, or down since downSince (and why).
  stream: { open: false, downSince: 0, why: "" },
  // The charts' range in seconds, the hosts' history per key ("hosts",
  // "lb:tenant/name"), the chart under the pointer, the filters of the
  // lists, and the YAML of stored objects by kind/name.
  range: 900, hist: {}, hover: null,
  filter: { q: "", status: "", tenant: "" },
  yaml: {},
};
const MAX_EVENTS = 500;
const CHART_POINTS = 300;      // live points kept per series, as the server keeps them

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function badge(text, cls) { return `<span class="badge ${esc(cls ?? text)}">${esc(text)}</span>`; }
// set reports whether a time is set (Go's zero time is year 1).
function set(t) { return !!t && new Date(t).getFullYear() > 2000; }
// ageS is how old t is in seconds, by the server's clock.
function ageS(t) {
  if (!set(t) || !state.snap) return NaN;
  return (Date.parse(state.snap.time) - Date.parse(t)) / 1000 + (Date.now() - state.recvAt) / 1000;
}
function fmtAge(d) {
  if (!isFinite(d)) return "never";
  d = Math.max(0, d);
  if (d < 60) return `${Math.round(d)} s ago`;
  if (d < 3600) return `${Math.round(d / 60)} min ago`;
  if (d < 86400) return `${Math.round(d / 3600)} h ago`;
  return `${Math.round(d / 86400)} d ago`;
}
function staleAfter() { return state.snap ? state.snap.staleAfterSeconds || 3 : 3; }
// ago is the age of a stored change ("Last change"); seen the age of an
// observation, marked stale when older than a few refresh intervals.
// Both count on by themselves (tick).
function ago(t) { return set(t) ? `<time class="ago" data-t="${esc(t)}">${esc(fmtAge(ageS(t)))}</time>` : "—"; }
function seen(t) {
  const d = ageS(t);
  const stale = !(d <= staleAfter());
  return `<time class="seen${stale ? " stale" : ""}" data-t="${esc(t)}">${esc(set(t) ? fmtAge(d) : "never")}</time>`;
}
function clock(t) { return new Date(t).toLocaleTimeString(); }
function table(headers, rows, empty) {
  if (!rows.length) return `<p class="muted">${esc(empty)}</p>`;
  return `<table><thead><tr>${headers.map(h => `<th>${esc(h)}</th>`).join("")}</tr></thead>` +
    `<tbody>${rows.map(r => `<tr>${r.map(c => `<td>${c}</td>`).join("")}</tr>`).join("")}</tbody></table>`;
}
function card(k, v, cls) { return `<div class="card ${esc(cls || "")}"><div class="k">${esc(k)}</div><div class="v">${v}</div></div>`; }
function lbLink(id) { return `<a href="#/lb/${encodeURIComponent(id)}">${esc(id)}</a>`; }

// mergeCharts adds a view's new chart points and drops the series the
// server no longer sends.
function mergeCharts(c) {
  if (!c) return;
  for (const kind of ["lbs", "hosts"]) {
    const next = {};
    for (const [id, ps] of Object.entries(c[kind] || {})) {
      const old = state.charts[kind][id] || [];
      const lastT = old.length ? Date.parse(old[old.length - 1].t) : 0;
      next[id] = old.concat(ps.filter(p => Date.parse(p.t) > lastT)).slice(-CHART_POINTS);
    }
    state.charts[kind] = next;
  }
  state.charts.omitted = c.omitted || 0;
}

// The charts of lists (a few per row): traffic, errors, latency, CPU.
const SHORT = ["rps", "err", "p99", "active"];
const HOST_SHORT = SHORT.concat(["cpu", "mem"]);
function pick(ms, keys) { return ms.filter(m => keys.includes(m.key)); }
function lbCharts(id) {
  const h = history("lb:" + id);
  return `<div data-lb="${esc(id)}">${chartSet("lb", id, state.charts.lbs[id], h.data && h.data.lb)}</div>`;
}
function hostCharts(id, metrics) {
  const h = history("hosts");
  return `<div data-host="${esc(id)}">${chartSet("host", id, state.charts.hosts[id], h.data && h.data.hosts[id], metrics)}</div>`;
}
function hostLink(id) { return `<a href="#/host/${encodeURIComponent(id)}">${esc(id)}</a>`; }

function renderCluster(s) {
  const c = s.cluster;
  const healthy = c.nodes.filter(n => n.healthy && n.reachable).length;
  const reach = c.nodes.filter(n => n.reachable).length;
  const was = s.reachable ? "" : ` <span class="muted">(last known)</span>`;
  let h = `<h1>Cluster <small>${esc(c.id)}</small></h1><div class="cards">` +
    card("Leader", s.reachable ? esc(c.leader || "none") : `unknown <span class="muted">(was ${esc(c.leader || "none")})</span>`, s.reachable && c.leader ? "" : "bad") +
    card("Term", c.term + was) +
    card("Hosts healthy", `${healthy} / ${c.nodes.length}` + (reach < c.nodes.length ? ` <span class="muted">${c.nodes.length - reach} unreachable</span>` : ""),
      healthy === c.nodes.length && c.nodes.length ? "" : "bad") +
    card("Revision", s.revision + was) + card("VIPs", c.vips.length) + card("Load balancers", s.lbs.length) + `</div>`;
  h += `<h2>Hosts <small>${esc(c.timeouts)}</small></h2>`;
  h += table(["Host", "Raft role", "Health", "Data from", "Last contact", "Applied", "Draining", "Failure detector", "Version"],
    c.nodes.map(n => [
      `<b>${hostLink(n.id)}</b><div class="muted">${esc(n.apiAddr)}</div>`,
      badge(n.role, n.reachable ? n.role : "unknown") + ` <span class="muted">${esc(n.suffrage)}${n.reachable ? "" : ", last known"}</span>`,
      (!n.reachable ? badge("unreachable", "bad") : n.healthy ? badge("healthy", "ok") : badge("unhealthy", "bad")) +
        (n.error ? `<div class="reason">${esc(n.error)}</div>` : ""),
      seen(n.observed), esc(n.lastContact || "—"), `<span class="num">${n.applied}</span>`,
      n.draining ? badge("draining") : `<span class="muted">no</span>`,
      n.peers ? `${n.peersAlive}/${n.peers} peers alive` : `<span class="muted">—</span>`,
      esc(n.version),
    ]), "No hosts answered.");
  const hostIDs = Object.keys(state.charts.hosts).sort();
  h += `<h2>Traffic per host <small>the last ${esc(rangeName(state.range))}, every load balancer on the host</small></h2>`;
  h += table(["Host", "Traffic"], hostIDs.map(id => [hostLink(id), hostCharts(id, pick(HOST_METRICS, HOST_SHORT))]),
    "No host reported traffic counters yet.");
  h += historyNote(state.hist.hosts);
  const busiest = Object.entries(state.charts.lbs).map(([id, ps]) => [id, ps.length ? ps[ps.length - 1].rps : 0])
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])).slice(0, 5);
  h += `<h2>Busiest load balancers <small>by req/s now` + (state.charts.omitted ? `; ${state.charts.omitted} not charted (over the bound)` : "") + `</small></h2>`;
  h += table(["Load balancer", "Traffic"], busiest.map(([id]) => [lbLink(id),
    `<div data-lb="${esc(id)}">${chartSet("top", id, state.charts.lbs[id], null, pick(METRICS, SHORT))}</div>`]),
    "No load balancer reported traffic yet.");
  h += `<h2>VIP holders</h2>`;
  h += table(["VIP", "Mode", "Held by", "Since", "Why", "Load balancers"],
    c.vips.map(v => {
      const holds = x => x.state === "holding" || x.state === "announcing";
      const held = v.holders.filter(x => holds(x) && !x.stale);
      const unknown = v.holders.filter(x => holds(x) && x.stale);
      const other = v.holders.filter(x => !holds(x));
      return [
        `<b>${esc(v.address)}</b>`, esc(v.mode),
        (held.map(x => badge(x.node, x.state)).join(" ") || (unknown.length ? badge("unknown", "unknown") : badge("nobody", "bad"))) +
          unknown.map(x => `<div class="reason">${esc(x.node)} did not answer: it was ${esc(x.state)}, data from ${seen(x.observed)}</div>`).join("") +
          (other.length ? `<div class="muted">${other.map(x => esc(x.node + " " + x.state) + (x.stale ? " (last known)" : "")).join(", ")}</div>` : ""),
        held.map(x => ago(x.since)).join(", "),
        v.holders.map(x => x.reason ? `<div>${esc(x.node)}: ${esc(x.reason)}</div>` : "").join(""),
        v.lbs.map(lbLink).join("<br>"),
      ];
    }), "No VIP is held or announced.");
  h += `<h2>Leader changes and VIP moves</h2>`;
  const moves = state.events.filter(e => e.kind === "leader-change" || e.kind === "vip-move" || e.kind === "node").slice().reverse();
  h += table(["Time", "What"], moves.map(e => [esc(clock(e.time)), (e.warning ? "⚠ " : "") + esc(e.message)]),
    "No leader change or VIP move since the dashboard started.");
  return h;
}

// quotaBar is a <meter>: the page's Content-Security-Policy refuses
// inline styles, so no width is set in the markup.
function quotaBar(q) {
  if (!q.limit) return `${q.used} <span class="muted">(default limit)</span>`;
  return `<meter class="quota" min="0" max="${esc(q.limit)}" value="${esc(Math.min(q.used, q.limit))}" low="${esc(0.8 * q.limit)}" high="${esc(0.95 * q.limit)}" optimum="0"></meter>${q.used} / ${q.limit}`;
}
// expires is a certificate's expiry, or why there is none.
function expires(t) {
  if (!set(t)) return `<span class="muted">not issued</span>`;
  const d = (Date.parse(t) - Date.now()) / 86400000;
  return esc(new Date(t).toLocaleDateString()) + (d < 0 ? ` ${badge("expired", "bad")}` : d < 14 ? ` <span class="reason">in ${Math.ceil(d)} d</span>` : "");
}

function renderTenants(s) {
  const f = state.filter;
  const tenants = s.tenants.filter(t => (!f.tenant || t.name === f.tenant) && matches(f.q, t.name, t.domains, t.networks, t.pools));
  let h = `<h1>Tenants <small>${tenants.length === s.tenants.length ? s.tenants.length : `${tenants.length} of ${s.tenants.length} shown`}</small></h1>`;
  h += table(["Tenant", "VIP pools", "Domains", "Networks", "Quotas used", "Revoked credentials", "Last change"],
    tenants.map(t => [
      `<b><a href="#/tenant/${encodeURIComponent(t.name)}">${esc(t.name)}</a></b> <a class="muted" href="#/object/Tenant/${encodeURIComponent(t.name)}">YAML</a>` + (t.uid ? `<div class="muted">${esc(t.uid)}</div>` : ""),
      t.pools.map(esc).join("<br>"), t.domains.map(esc).join("<br>"), t.networks.map(esc).join("<br>"),
      t.quotas.filter(q => q.used || q.limit).map(q => `<div>${esc(q.name)}: ${quotaBar(q)}</div>`).join("") || `<span class="muted">nothing used</span>`,
      t.revokedCredentials.length ? t.revokedCredentials.map(esc).join("<br>") : `<span class="muted">none</span>`,
      `${ago(t.updated)} <span class="muted">(generation ${t.generation})</span>`,
    ]), s.tenants.length ? "No tenant matches the filter." : "No tenants yet: `teapot-lb apply -f` a Tenant.");
  h += `<h2>VIP pools</h2>`;
  h += table(["Pool", "Mode", "CIDRs", "Tenants", "Shared addresses"],
    s.pools.filter(p => (!f.q && !f.tenant) || (!f.tenant && matches(f.q, p.name, p.mode, p.cidrs)) || tenants.some(t => t.pools.includes(p.name)))
      .map(p => [`<b><a href="#/object/VIPPool/${encodeURIComponent(p.name)}">${esc(p.name)}</a></b>`, esc(p.mode) +
        (p.attachment ? ` <span class="muted">in tenant <a href="#/tenant/${encodeURIComponent(p.attachment)}">${esc(p.attachment)}</a>'s attachment</span>` :
          p.interface ? ` <span class="muted">on ${esc(p.interface)}</span>` : ""), p.cidrs.map(esc).join("<br>"),
      p.tenants.length ? p.tenants.map(esc).join(", ") : `<span class="muted">any allowed by the tenant</span>`, p.shared ? "yes" : "no"]),
    "No VIP pools yet.");
  h += `<h2>Certificates</h2>`;
  h += table(["Certificate", "Hosts", "Source", "State", "Expires"],
    s.certs.filter(c => (!f.tenant || c.tenant === f.tenant) && matches(f.q, c.tenant, c.name, c.hosts))
      .map(c => [`${esc(c.tenant)}/<b><a href="#/object/Certificate/${encodeURIComponent(c.tenant + "/" + c.name)}">${esc(c.name)}</a></b>`, c.hosts.map(esc).join("<br>"), esc(c.source + (c.issuer ? " · " + c.issuer : "")),
      badge(c.state || "unknown", c.state === "valid" ? "ok" : "Degraded") + (c.error ? `<div class="reason">${esc(c.error)}</div>` : ""),
      expires(c.notAfter)]),
    "No certificates.");
  return h;
}

// heldBy: the hosts holding the address by this read, and those that held
// it when they last answered (unknown now).
function heldBy(l) {
  const stale = l.heldByStale || [];
  return l.heldBy.map(x => badge(x, "holding")).join(" ") +
    (stale.length ? badge("unknown", "unknown") + `<div class="muted">last known: ${stale.map(esc).join(", ")}</div>` : "") ||
    `<span class="muted">—</span>`;
}

// matches reports whether any of texts contains the search words (all of
// them, case-insensitive).
function matches(q, ...texts) {
  const words = q.toLowerCase().split(/\s+/).filter(Boolean);
  const hay = texts.flat().join(" ").toLowerCase();
  return words.every(w => hay.includes(w));
}

// addresses: every VIP of a load balancer (two for a dual-stack one).
function addresses(l) {
  return (l.addresses && l.addresses.length ? l.addresses : [l.address]).filter(a => a).join(", ");
}

function renderLBs(s) {
  const counts = {};
  s.lbs.forEach(l => counts[l.status] = (counts[l.status] || 0) + 1);
  const f = state.filter;
  const shown = s.lbs.filter(l => (!f.status || l.status === f.status) && (!f.tenant || l.tenant === f.tenant) &&
    matches(f.q, l.id, l.address, l.status, l.listeners, l.reasons || [], l.heldBy));
  let h = `<h1>Load balancers <small>${shown.length === s.lbs.length ? s.lbs.length : `${shown.length} of ${s.lbs.length} shown`}</small></h1><div class="cards">` +
    ["Serving", "Degraded", "Failing", "Refused", "Pending", "Unknown"].filter(k => k !== "Unknown" || counts[k]).map(k => card(k, counts[k] || 0)).join("") + `</div>`;
  h += table(["Load balancer", "Status", "Address", "Held by", "Listeners", "Traffic now", "Last change"],
    shown.map(l => [
      lbLink(l.id), badge(l.status) + (l.reasons || []).map(r => `<div class="reason">${esc(r)}</div>`).join(""),
      esc(addresses(l) || "—"), heldBy(l),
      l.listeners.map(esc).join(", "), lbNow(l.id), `${ago(l.updated)} <span class="muted">rev ${l.revision}</span>`,
    ]), s.lbs.length ? "No load balancer matches the filter." : "No load balancers yet: `teapot-lb apply -f` one.");
  return h;
}

// lbNow is a load balancer's newest live point in words, with its age.
function lbNow(id) {
  const ps = state.charts.lbs[id];
  if (!ps || !ps.length) return `<span class="muted">—</span>`;
  const p = ps[ps.length - 1];
  return `<span class="num">${esc(fmtNum(p.rps))} req/s</span>` + (p.rps ? ` · ${esc(fmtPct(p.err))} 5xx · p99 ${esc(fmtDur(p.p99))}` : "") +
    ` · ${esc(p.active)} conns <div class="muted">${seen(p.t)}</div>`;
}

function renderLB(s, id) {
  const l = s.lbs.find(x => x.id === id);
  if (!l) return `<h1>${esc(id)}</h1><p class="muted">No such load balancer (deleted?). <a href="#/lbs">All load balancers</a></p>`;
  const spec = l.spec || {};
  let h = `<h1>${esc(l.id)} ${badge(l.status)}</h1>`;
  if (l.reasons && l.reasons.length) h += `<ul>${l.reasons.map(r => `<li class="reason">${esc(r)}</li>`).join("")}</ul>`;
  h += `<div class="cards">` + card((l.addresses || []).length > 1 ? "Addresses" : "Address", esc(addresses(l) || "—")) + card("VIP from", esc(spec.vip?.pool || spec.vip?.address || "—")) +
    card("Held by", heldBy(l)) + card("Revision", l.revision) + card("Last change", ago(l.updated)) + `</div>`;
  h += `<h2>Traffic <small>the last ${esc(rangeName(state.range))}, all hosts</small></h2>` + (state.charts.lbs[l.id] || state.hist["lb:" + l.id]?.data?.lb?.length
    ? lbCharts(l.id) + historyNote(state.hist["lb:" + l.id])
    : (history("lb:" + l.id), `<p class="muted">No host reports traffic counters for it yet${state.charts.omitted ? " (or it is over the bound of charted load balancers)" : ""}.</p>`));
  h += memberTraffic(l);
  const mine = l.addresses && l.addresses.length ? l.addresses : [l.address];
  const vipRows = s.cluster.vips.filter(v => mine.includes(v.address)).flatMap(v => v.holders.map(x => [esc(v.address), esc(x.node),
    x.stale ? badge("unknown", "unknown") + ` <span class="muted">was ${esc(x.state)}</span>` : badge(x.state), ago(x.since), esc(x.reason), seen(x.observed)]));
  h += `<h2>VIP</h2>` + table(["Address", "Host", "State", "Since", "Why", "Data from"], vipRows,
    "No host reports this address.");
  h += `<h2>Per host</h2>` + table(["Host", "Listeners", "Members (this host's checks)", "Problems"], (l.hosts || []).map(x => [
    `<b>${esc(x.node)}</b>` + (x.reachable ? "" : `<div>${badge("unreachable", "bad")} <span class="reason">${esc(x.error)}</span></div>`) +
      `<div class="muted">data from ${seen(x.observed)}</div>`,
    x.listeners.map(li => (li.bound ? badge("bound", "ok") : badge("not bound", "bad")) + ` ${esc(li.address)}/${esc(li.protocol)}` +
      (li.error ? `<div class="reason">${esc(li.error)}</div>` : "")).join("<br>") || `<span class="muted">—</span>`,
    memberSummary(x),
    x.problems.map(p => `<div class="reason">${esc(p)}</div>`).join("") || `<span class="muted">none</span>`,
  ]), "No host reported this load balancer.");
  h += `<div id="member-table">${memberTable(l)}</div>`;
  h += `<h2>Listeners</h2>` + table(["Port", "Protocol", "Pool", "TLS"], (spec.listeners || []).map(x => [
    esc(x.port), esc(x.protocol), esc(x.pool || (x.redirectToHttps ? "redirect to https" : "routes")),
    esc(x.tls ? (x.tls.acme ? "ACME" : (x.tls.certificates || []).join(", ")) : "—")]), "No listeners.");
  h += `<h2>Routes</h2>` + table(["Host", "Path", "Pool"], (spec.routes || []).map(r => [esc(r.host || "*"), esc((r.path || "/") + (r.pathType === "exact" ? " (exact)" : "")), esc(r.pool)]),
    "No routes.");
  const pools = spec.pools || {};
  h += `<h2>Pools and members</h2>` + table(["Pool", "Algorithm", "Health check", "Members"], Object.keys(pools).sort().map(name => {
    const p = pools[name];
    const hc = p.healthCheck ? (p.healthCheck.http ? `http ${p.healthCheck.http.path || "/"}` : "tcp") + (p.healthCheck.interval ? ` every ${p.healthCheck.interval}` : "") : "none";
    return [`<b>${esc(name)}</b>`, esc(p.algorithm || "round-robin"), esc(hc),
      poolMembers(p.members || [])];
  }), "No pools.");
  const hosts = new Set((spec.routes || []).map(r => r.host).concat((spec.listeners || []).flatMap(x => (x.sniRoutes || []).map(r => r.host))).filter(Boolean));
  const certs = s.certs.filter(c => c.tenant === l.tenant && c.hosts.some(x => hosts.has(x)));
  h += `<h2>Certificates</h2>` + table(["Certificate", "Hosts", "State", "Per host", "Expires"], certs.map(c => [esc(c.name), c.hosts.map(esc).join("<br>"),
    badge(c.state || "unknown", c.state === "valid" ? "ok" : "Degraded") + (c.error ? `<div class="reason">${esc(c.error)}</div>` : ""),
    c.perHost.map(p => `${esc(p.node)} ${esc(p.host)}: ${badge(p.state || "unknown", p.state === "valid" ? "ok" : "Degraded")}` + (p.error ? `<div class="reason">${esc(p.error)}</div>` : "")).join("<br>"),
    expires(c.notAfter)]), "No certificate for this load balancer's hosts.");
  const evs = state.events.filter(e => e.subject === l.id || e.subject === l.address || (e.subjects || []).includes(l.id) ||
    (e.host && e.tenant === l.tenant && hosts.has(e.host))).slice().reverse();
  h += `<h2>Events</h2>` + table(["Time", "What"], evs.map(e => [esc(clock(e.time)), esc(e.message)]), "Nothing changed since the dashboard started.");
  h += `<h2>Stored object <small>as <code>teapot-lb get lb ${esc(l.id)} -o yaml</code> prints it</small></h2>` + yamlView("LoadBalancer", l.id, l.revision);
  return h;
}

// poolMembers is a pool's members as stored: all of a few, the count and
// the first few of many (the member table pages through them all).
const POOL_MEMBERS_LISTED = 10;
function poolMembers(ms) {
  const one = m => esc(m.address) + (m.weight !== undefined ? ` <span class="muted">w${esc(m.weight)}</span>` : "");
  if (ms.length <= POOL_MEMBERS_LISTED) return ms.map(one).join("<br>") || `<span class="muted">none</span>`;
  return `${ms.length} members: ` + ms.slice(0, 3).map(one).join(", ") + `, … <span class="muted">(all in Members above)</span>`;
}

// memberTraffic is the members' traffic summed over the hosts, busiest
// first: req/s and 5xx add up, the p99 is the highest, in flight adds up;
// the age is that of the oldest host's interval.
const MAX_MEMBER_ROWS = 50;
function memberTraffic(l) {
  const rows = new Map();
  let omitted = 0;
  for (const x of l.hosts || []) {
    omitted = Math.max(omitted, x.membersOmitted || 0);
    for (const m of x.members) {
      const k = m.pool + " " + m.address;
      const r = rows.get(k) || { pool: m.pool, address: m.address, rps: 0, errs: 0, p99: 0, inFlight: 0, hosts: 0, at: "" };
      r.inFlight += m.inFlight || 0;
      if (m.traffic) {
        r.rps += m.traffic.rps;
        r.errs += m.traffic.rps * m.traffic.err;
        r.p99 = Math.max(r.p99, m.traffic.p99);
        r.hosts++;
        if (!r.at || Date.parse(m.traffic.at) < Date.parse(r.at)) r.at = m.traffic.at;
      }
      rows.set(k, r);
    }
  }
  const list = [...rows.values()].filter(r => r.hosts).sort((a, b) => b.rps - a.rps || a.address.localeCompare(b.address));
  let h = `<h2>Member traffic <small>each host's last 10 s, summed over the hosts; busiest first</small></h2>`;
  h += table(["Member", "req/s", "5xx", "p99", "In flight", "Hosts", "Measured"], list.slice(0, MAX_MEMBER_ROWS).map(r => [
    `${esc(r.pool)}: <b>${esc(r.address)}</b>`, `<span class="num">${esc(fmtNum(r.rps))}</span>`,
    r.rps ? `<span class="num${r.errs / r.rps >= 0.05 ? " reason" : ""}">${esc(fmtPct(r.errs / r.rps))}</span>` : "—",
    r.p99 ? esc(fmtDur(r.p99)) : "—", `<span class="num">${esc(r.inFlight)}</span>`, esc(r.hosts), seen(r.at)]),
    "No host reported member traffic yet (the hosts measure every 10 s).");
  if (list.length > MAX_MEMBER_ROWS) h += `<p class="muted">${list.length - MAX_MEMBER_ROWS} more members with traffic not listed.</p>`;
  if (omitted) h += `<p class="muted">Each host reports its 64 busiest members of a load balancer; ${esc(omitted)} more not reported by at least one host.</p>`;
  return h;
}

// yamlView is a stored object as YAML, read from the dashboard when the
// page shows it and again when its revision changes.
function yamlView(kind, name, rev) {
  const key = kind + "/" + name;
  const e = state.yaml[key];
  if (!e || (e.rev !== rev && !e.busy)) {
    state.yaml[key] = { rev, busy: true, text: e ? e.text : "", readAt: e ? e.readAt : "", error: "" };
    fetch(`/api/object?kind=${encodeURIComponent(kind)}&name=${encodeURIComponent(name)}`, { cache: "no-store" })
      .then(r => r.ok ? r.json() : r.text().then(t => Promise.reject(new Error(t.trim() || `HTTP ${r.status}`))))
      .then(v => { state.yaml[key] = { rev, text: v.yaml, readAt: v.readAt, revision: v.revision, error: "" }; },
        err => { state.yaml[key] = { rev, text: "", readAt: "", error: String(err.message || err) }; })
      .finally(() => renderSoon());
  }
  const v = state.yaml[key];
  if (v.error) return `<p class="reason">${esc(v.error)}</p>`;
  if (!v.text) return `<p class="muted">Reading…</p>`;
  return `<p class="muted">read ${ago(v.readAt)} (cluster revision ${esc(v.revision)})</p><pre class="yaml" data-kind="${esc(kind)}">${esc(v.text)}</pre>`;
}

function renderObject(s, arg) {
  const i = arg.indexOf("/");
  const kind = arg.slice(0, i), name = arg.slice(i + 1);
  return `<h1>${esc(kind)} <small>${esc(name)}</small></h1>` + yamlView(kind, name, s.revision);
}

// renderHost is one host's page: what it holds and serves, what it uses
// of the machine and of its budgets, each tenant's share, with the age of
// every value.
function renderHost(s, id) {
  const n = s.cluster.nodes.find(x => x.id === id);
  const info = (s.hosts || []).find(x => x.node === id);
  if (!n && !info) return `<h1>${esc(id)}</h1><p class="muted">No such host in the cluster. <a href="#/cluster">Cluster</a></p>`;
  const reach = n ? n.reachable : info.reachable;
  let h = `<h1>Host ${esc(id)} ` + (!reach ? badge("unreachable", "bad") : n && n.healthy ? badge("healthy", "ok") : badge("unhealthy", "bad")) +
    ` <small>data from ${seen(n ? n.observed : info.observed)}</small></h1>`;
  if (n && n.error) h += `<p class="reason">${esc(n.error)}</p>`;
  const r = info && info.resources;
  const of = (a, b) => b ? `${esc(a)} <span class="muted">/ ${esc(b)}</span>` : esc(a);
  const meter = (a, b) => b ? `<meter class="quota" min="0" max="${esc(b)}" value="${esc(Math.min(a, b))}" low="${esc(0.8 * b)}" high="${esc(0.95 * b)}" optimum="0"></meter>` : "";
  // A tenant's host CPU budget: what it used over the host's last window
  // of its budget, its throttles, and when the window ended.
  const cpuCell = c => !c ? `<span class="muted">not reported (an earlier release)</span>` :
    (c.window ? meter(c.used, c.cores) + of(c.used.toFixed(2), c.cores.toFixed(2)) + ` <span class="muted">over ${esc(Math.round(c.window))} s, ${ago(c.at)}</span>`
      : of("—", c.cores.toFixed(2)) + ` <span class="muted">no window ended yet</span>`) +
    (c.inDebt ? " " + badge("in debt", "bad") : "") +
    (c.throttles ? `<div class="reason">held ${esc(c.throttles)} times, ${esc(c.throttled.toFixed(1))} s in all</div>` : "");
  h += `<div class="cards">` + (n ? card("Raft", `${esc(n.role)} <span class="muted">${esc(n.suffrage)}</span>`) + card("Version", esc(n.version)) : "");
  if (r) {
    h += card("CPU", `${esc(r.cpu.toFixed(2))} <span class="muted">of ${esc(r.cpus)} cores</span>`) + card("Memory", esc(fmtBytes(r.memory))) +
      card("Descriptors (process)", meter(r.descriptors, r.descriptorLimit) + of(r.descriptors, r.descriptorLimit)) +
      card("Connections (data plane)", meter(r.conns, r.maxConns) + of(r.conns, r.maxConns)) +
      card("Descriptors (data plane)", meter(r.fds, r.maxFds) + of(r.fds, r.maxFds)) +
      card("History ring", `${esc(fmtBytes(r.history))} <span class="muted">of ${esc(fmtBytes(r.maxHistory))} at most</span>`) +
      card("Goroutines", esc(r.goroutines));
  }
  h += `</div>` + (r ? `<p class="muted">measured ${seen(r.at)}; CPU over the host's last 10 s</p>` : `<p class="muted">The host reports no resources (an earlier release, or it never answered).</p>`);
  h += `<h2>Traffic <small>the last ${esc(rangeName(state.range))}, every load balancer on the host</small></h2>` + hostCharts(id, HOST_METRICS) + historyNote(state.hist.hosts);
  const vips = s.cluster.vips.filter(v => v.holders.some(x => x.node === id));
  h += `<h2>VIPs</h2>` + table(["VIP", "Mode", "State", "Since", "Why", "Load balancers"], vips.map(v => {
    const x = v.holders.find(x => x.node === id);
    return [`<b>${esc(v.address)}</b>`, esc(v.mode), x.stale ? badge("unknown", "unknown") + ` <span class="muted">was ${esc(x.state)}</span>` : badge(x.state),
      ago(x.since), esc(x.reason), v.lbs.map(lbLink).join("<br>")];
  }), "This host holds or announces no VIP.");
  const ls = [];
  for (const l of s.lbs) {
    const x = (l.hosts || []).find(y => y.node === id);
    if (x) for (const li of x.listeners) ls.push([l, x, li]);
  }
  const MAX_ROWS = 500;
  h += `<h2>Listeners <small>${ls.length}${ls.length > MAX_ROWS ? `, the first ${MAX_ROWS} shown` : ""}</small></h2>` +
    table(["Load balancer", "Status", "Address", "Socket", "Since"], ls.slice(0, MAX_ROWS).map(([l, x, li]) => [lbLink(l.id), badge(l.status),
      `${esc(li.address)}/${esc(li.protocol)}`,
      (!x.reachable ? badge("unknown", "unknown") : li.bound ? badge("bound", "ok") : badge("not bound", "bad")) + (li.error ? `<div class="reason">${esc(li.error)}</div>` : ""),
      ago(li.since)]), "No listener on this host.");
  h += `<h2>Budgets per tenant <small>what each tenant holds on this host now</small></h2>` +
    table(["Tenant", "Load balancers", "Listeners bound", "Connections", "Descriptors", "CPU (cores)"], (info ? info.tenants : []).map(t => [
      `<b>${esc(t.tenant)}</b>`, esc(t.lbs), esc(t.listeners), `<span class="num">${esc(t.conns)}</span>`, meter(t.fds, t.maxFds) + of(t.fds, t.maxFds), cpuCell(t.cpu)]),
    "No tenant holds anything on this host.") + (info ? `<p class="muted">as the host reported ${seen(info.observed)}</p>` : "");
  h += dnsZonesOf(info);
  const evs = state.events.filter(e => e.subject === id || e.message.startsWith(id + ": ")).slice().reverse();
  h += `<h2>Events</h2>` + table(["Time", "What"], evs.map(e => [esc(clock(e.time)), esc(e.message)]), "Nothing from this host since the dashboard started.");
  return h;
}

function route() {
  const hash = location.hash || "#/cluster";
  const parts = hash.slice(2).split("/");
  const page = parts[0] || "cluster";
  document.querySelectorAll("nav a").forEach(a => a.classList.toggle("active", a.dataset.page === page || (page === "lb" && a.dataset.page === "lbs") ||
    (page === "host" && a.dataset.page === "cluster") || (page === "tenant" && a.dataset.page === "tenants")));
  return { page, arg: decodeURIComponent(parts.slice(1).join("/")) };
}

// renderSoon renders once in the next frame however many reads ended
// before it (the page's history, YAML, ...).
let renderQueued = false;
function renderSoon() {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => { renderQueued = false; render(); });
}

function render() {
  const s = state.snap;
  if (!s) return;
  const t0 = performance.now();
  const r = route();
  const main = document.getElementById("main");
  toolbar(s, r.page);
  memberToolbar(r.page, r.arg);
  chartData.clear();
  let html = r.page === "tenants" ? renderTenants(s) : r.page === "lbs" ? renderLBs(s) : r.page === "lb" ? renderLB(s, r.arg) :
    r.page === "host" ? renderHost(s, r.arg) : r.page === "object" ? renderObject(s, r.arg) : r.page === "tenant" ? renderTenant(s, r.arg) : renderCluster(s);
  if (!s.reachable) {
    html = `<p class="stale-note">No LB host answers: what follows is the last data there is` +
      (set(s.readAt) ? `, from ${esc(clock(s.readAt))} (${ago(s.readAt)})` : "") + `. It is not live.</p>` + html;
  }
  main.innerHTML = html;
  if (!main.dataset.firstRender) {
    // When the page first showed data, laid out (for the browser test).
    void main.offsetHeight;
    main.dataset.firstRender = performance.now().toFixed(0);
  }
  main.dataset.page = r.page;
  membersShownAt();
  document.body.classList.toggle("stale", !s.reachable);
  const errs = document.getElementById("errors");
  errs.hidden = !(s.errors && s.errors.length);
  errs.innerHTML = (s.errors || []).map(e =>
    `<div class="error" data-count="${esc(e.count)}"><b>${esc(e.message)}</b> <span class="parts">(${e.parts.map(esc).join(", ")})</span>` +
    ` <span class="count">${e.count > 1 ? `${esc(e.count)} reads in a row since ${esc(clock(e.since))}` : "this read"}</span></div>`).join("");
  const tl = document.getElementById("timeline");
  tl.innerHTML = state.events.slice().reverse().map(e =>
    `<li class="${e.warning ? "warn" : ""}" data-kind="${esc(e.kind)}"><time>${esc(clock(e.time))}</time><span class="kind">${esc(e.kind)}</span>${esc(e.message)}</li>`).join("") ||
    `<li class="muted">Changes appear here as they happen.</li>`;
  // How long the last render took, for the browser test's measurement.
  main.dataset.renderMs = (performance.now() - t0).toFixed(1);
  rehover();
  tick();
}

// toolbar shows the controls of the page: the search and filters on the
// lists, the charts' range where there are charts. It lives outside the
// page, so typing survives the re-renders.
function toolbar(s, page) {
  const bar = document.getElementById("toolbar");
  const lists = page === "lbs" || page === "tenants";
  const charted = page === "cluster" || page === "lb" || page === "host";
  document.getElementById("filters").hidden = !lists;
  document.getElementById("ranges").hidden = !charted;
  bar.hidden = !lists && !charted;
  document.getElementById("status-filter").hidden = page !== "lbs";
  const sel = document.getElementById("tenant-filter");
  const names = s.tenants.map(t => t.name).concat(s.lbs.map(l => l.tenant));
  const want = [""].concat([...new Set(names)].sort()).join("\n");
  if (sel.dataset.options !== want) {
    sel.innerHTML = `<option value="">all tenants</option>` + [...new Set(names)].sort().map(n => `<option>${esc(n)}</option>`).join("");
    sel.dataset.options = want;
    sel.value = state.filter.tenant;
  }
  for (const b of document.querySelectorAll("#ranges button")) b.classList.toggle("active", Number(b.dataset.range) === state.range);
}

function setupToolbar() {
  const q = document.getElementById("search");
  q.addEventListener("input", () => { state.filter.q = q.value; render(); });
  const st = document.getElementById("status-filter");
  st.addEventListener("change", () => { state.filter.status = st.value; render(); });
  const tn = document.getElementById("tenant-filter");
  tn.addEventListener("change", () => { state.filter.tenant = tn.value; render(); });
  const ranges = document.getElementById("ranges");
  ranges.innerHTML = `<span class="muted">charts:</span> ` + RANGES.map(([sec, name]) => `<button type="button" data-range="${sec}">${esc(name)}</button>`).join("");
  ranges.addEventListener("click", ev => {
    const b = ev.target.closest("button");
    if (b) { state.range = Number(b.dataset.range); render(); }
  });
}

// tick counts the ages on, marks what went stale and says how live the
// page is: green only while the stream delivers fresh reads of a cluster
// that answers.
function tick() {
  for (const el of document.querySelectorAll("time.ago, time.seen")) {
    const d = ageS(el.dataset.t);
    el.textContent = set(el.dataset.t) ? fmtAge(d) : "never";
    if (el.classList.contains("seen")) el.classList.toggle("stale", !(d <= staleAfter()));
  }
  const conn = document.getElementById("conn");
  const s = state.snap, st = state.stream;
  const since = t => `since ${clock(t)} (${fmtAge((Date.now() - t) / 1000)})`;
  let text, cls;
  if (!st.open && st.downSince) {
    text = `${st.why || "disconnected"} ${since(st.downSince)}; retrying`;
    cls = "down";
  } else if (!s) {
    text = "connecting…";
    cls = "";
  } else if (!s.reachable) {
    text = set(s.readAt) ? `cluster unreachable since ${clock(s.readAt)} (${fmtAge(ageS(s.readAt))})` : "cluster unreachable: no LB host has answered";
    cls = "down";
  } else if ((Date.now() - state.recvAt) / 1000 > staleAfter()) {
    text = `no update ${since(state.recvAt)}`;
    cls = "down";
  } else {
    const lost = s.cluster.nodes.filter(n => !n.reachable).length;
    const partial = lost || (s.errors && s.errors.length);
    text = `live · read ${fmtAge(ageS(s.time))}` + (lost ? ` · ${lost} of ${s.cluster.nodes.length} hosts unreachable` : partial ? " · with errors" : "");
    cls = partial ? "partial" : "live";
  }
  conn.textContent = text;
  conn.className = "conn " + cls;
  conn.dataset.state = cls || "connecting";
}

let stream = null;
function connect() {
  const es = new EventSource("/api/stream");
  stream = es;
  es.onopen = () => { state.stream.open = true; tick(); };
  es.addEventListener("view", ev => {
    // When the first view arrived and was read (for the browser test).
    if (!state.snap) performance.mark("view");
    const v = JSON.parse(ev.data);
    if (!state.snap) performance.measure("view-parsed", "view");
    state.stream = { open: true, downSince: 0, why: "" };
    state.snap = v.snapshot;
    state.recvAt = Date.now();
    mergeCharts(v.charts);
    const last = state.events.length ? state.events[state.events.length - 1].seq : 0;
    state.events = state.events.concat(v.events.filter(e => e.seq > last)).slice(-MAX_EVENTS);
    render();
  });
  es.onerror = () => {
    if (state.stream.open || !state.stream.downSince) state.stream = { open: false, downSince: Date.now(), why: "disconnected" };
    tick();
    if (es.readyState !== EventSource.CLOSED) return; // the browser retries by itself
    // The server answered an error: ask why, and retry.
    fetch("/api/snapshot", { cache: "no-store" }).then(r => {
      state.stream.why = r.status === 401 ? "logged out (open a new login URL)" : r.ok ? "stream refused" : `dashboard answers HTTP ${r.status}`;
    }, () => { state.stream.why = "dashboard not reachable"; }).finally(() => {
      tick();
      setTimeout(() => { if (stream === es) connect(); }, 2000);
    });
  };
}

window.addEventListener("hashchange", render);
setupToolbar();
setupMembers();
setupTenant();
// A load balancer's page reads its member table while the stream connects.
if (route().page === "lb") { memberToolbar("lb", route().arg); memberFetch(); }
setInterval(tick, 1000);
connect();
