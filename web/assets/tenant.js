// teapot-lb dashboard: a tenant's page (#/tenant/NAME): what the hosts'
// DNS answers for its names (read a page at a time from /api/dns, which
// asks the hosts), and its BGP sessions with every host (in the stream)
// with the prefixes accepted and dropped (a page at a time from
// /api/bgp). Every value carries the age of the host's observation.
"use strict";

const NET_PAGE = 100;        // rows of a DNS or route page in the DOM
const BGP_SESSIONS = 32;     // sessions per host the stream carries at most

// netData is the last page read per table ("dns", "bgp"), for its key
// (tenant, page); it is read again when a newer snapshot arrives.
const netView = { tenant: "", dns: 0, bgp: 0 };
const netData = { dns: { key: "", time: "", busy: false, data: null, error: "" }, bgp: { key: "", time: "", busy: false, data: null, error: "" } };
function netKey(kind) { return netView.tenant + "\n" + netView[kind]; }
function netFetch(kind) {
  const key = netKey(kind), time = state.snap ? state.snap.time : "", d = netData[kind];
  if (d.busy || (d.key === key && d.time === time)) return;
  d.busy = true;
  fetch(`/api/${kind}?tenant=${encodeURIComponent(netView.tenant)}&offset=${netView[kind] * NET_PAGE}&limit=${NET_PAGE}`, { cache: "no-store" })
    .then(r => r.ok ? r.json() : r.text().then(t => Promise.reject(new Error(t.trim() || `HTTP ${r.status}`))))
    .then(v => { netData[kind] = { key, time, busy: false, data: v, error: "" }; },
      err => { netData[kind] = { key, time, busy: false, data: null, error: String(err.message || err) }; })
    .finally(() => { netData[kind].busy = false; renderNet(kind); });
}

// renderNet puts one table in the page again without rendering the rest.
function renderNet(kind) {
  const el = document.getElementById(kind + "-table");
  const r = route();
  if (!el || r.page !== "tenant" || r.arg !== netView.tenant) return;
  el.innerHTML = kind === "dns" ? dnsTable() : routeTable();
  el.dataset.rendered = "1";
}

// pager is the page buttons of a table of total rows, page p.
function pager(kind, matching, offset) {
  const pages = Math.max(1, Math.ceil(matching / NET_PAGE)), page = Math.floor(offset / NET_PAGE);
  if (pages < 2) return "";
  const btn = (p, label, title) => `<button type="button" data-npage="${esc(kind)}:${p}" title="${esc(title)}"${p === page || p < 0 || p >= pages ? " disabled" : ""}>${label}</button>`;
  return `<div class="pager">` + btn(0, "«", "first page") + btn(page - 1, "‹", "previous page") +
    ` <span class="muted">page ${page + 1} of ${pages}</span> ` + btn(page + 1, "›", "next page") + btn(pages - 1, "»", "last page") + `</div>`;
}
function rowsShown(d) { return d.rows.length ? `${d.offset + 1}–${d.offset + d.rows.length} of ${d.matching}` : "none"; }

// hostAges says, per host, whether it answered and how old its data is.
function hostAges(hosts) {
  return `<p class="muted host-ages">` + hosts.map(x => `${esc(x.node)}: ` +
    (x.reachable ? "" : `${badge("unreachable", "bad")} ${x.error ? esc(x.error) + ", " : ""}`) + `data from ${seen(x.observed)}`).join(" · ") + `</p>`;
}

function dnsTable() {
  netFetch("dns");
  const d = netData.dns.data && netData.dns.data.tenant === netView.tenant ? netData.dns.data : null;
  const err = netData.dns.key === netKey("dns") ? netData.dns.error : "";
  let h = `<h2>DNS names <small>`;
  if (!d) return h + `</small></h2>` + (err ? `<p class="reason">DNS not read: ${esc(err)}</p>` : `<p class="muted">Asking the hosts…</p>`);
  h += `${rowsShown(d)}; what each host's DNS answers, asked ${seen(d.time)}</small></h2>` + hostAges(d.hosts) + pager("dns", d.matching, d.offset);
  if (!d.rows.length) return h + `<p class="muted">No host's DNS serves a name of this tenant (no zone delegated, or no load balancer with a host name).</p>`;
  let rows = "";
  for (const r of d.rows) {
    rows += `<tr data-dns="${esc(r.name)}"><td><b>${esc(r.name)}</b></td><td>${lbLink(r.lb)}</td><td>${r.address ? esc(r.address) : `<span class="muted">none</span>`}</td>`;
    for (const x of d.hosts) {
      const o = r.on[x.node];
      if (!o) { rows += `<td data-state="none"><span class="muted">not reported</span></td>`; continue; }
      const what = o.answered ? badge("answered", "ok") : badge("left out", "bad");
      rows += `<td data-state="${o.stale ? "stale" : o.answered ? "answered" : "left-out"}">` +
        (o.stale ? badge("unknown", "unknown") + ` <span class="muted">was ${o.answered ? "answered" : "left out"}</span>` : what) +
        (o.reason ? `<div class="reason">${esc(o.reason)}</div>` : "") + `</td>`;
    }
    rows += `</tr>`;
  }
  return h + `<table class="dns"><thead><tr><th>Name</th><th>Load balancer</th><th>Address</th>${d.hosts.map(x => `<th>${esc(x.node)}</th>`).join("")}</tr></thead><tbody>${rows}</tbody></table>`;
}

function routeTable() {
  netFetch("bgp");
  const d = netData.bgp.data && netData.bgp.data.tenant === netView.tenant ? netData.bgp.data : null;
  const err = netData.bgp.key === netKey("bgp") ? netData.bgp.error : "";
  let h = `<h2>Prefixes from the tenant's speakers <small>`;
  if (!d) return h + `</small></h2>` + (err ? `<p class="reason">routes not read: ${esc(err)}</p>` : `<p class="muted">Reading the routes…</p>`);
  h += `${rowsShown(d)}; dropped first</small></h2>` + pager("bgp", d.matching, d.offset);
  const more = d.hosts.reduce((n, x) => n + x.accepted + x.dropped - x.listed, 0);
  if (more > 0) h += `<p class="muted">${esc(more)} more not listed: each host lists at most 100 accepted and 100 dropped.</p>`;
  if (!d.rows.length) return h + `<p class="muted">No host reports a prefix from this tenant's speakers.</p>`;
  return h + table(["Host", "Prefix", "Next hop", "Peer", "Route", "Observed"], d.rows.map(r => [
    esc(r.node), `<b>${esc(r.prefix)}</b>`, esc(r.nextHop), esc(r.peer),
    (r.stale ? badge("unknown", "unknown") + ` <span class="muted">was ${r.accepted ? "installed" : "dropped"}</span>` : r.accepted ? badge("installed", "ok") : badge("dropped", "bad")) +
      (r.reason ? `<div class="reason">${esc(r.reason)}</div>` : ""),
    seen(r.observed)]), "");
}

// bgpSessions is the tenant's sessions with every host, from the stream.
function bgpSessions(s, name) {
  const t = (s.bgp || []).find(x => x.tenant === name);
  let h = `<h2>BGP sessions</h2>`;
  if (!t || !t.hosts.length) return h + `<p class="muted">No host reports BGP for this tenant (no bgp: section in the Tenant).</p>`;
  const rows = [];
  for (const x of t.hosts) {
    const stateOf = sess => x.reachable ? badge(sess.state, sess.state === "established" ? "ok" : "bad") : badge("unknown", "unknown") + ` <span class="muted">was ${esc(sess.state)}</span>`;
    const host = `${hostLink(x.node)}` + (x.reachable ? "" : ` ${badge("unreachable", "bad")}`);
    if (x.problem) rows.push([host, `<span class="muted">—</span>`, "", "", "", `<div class="reason">${esc(x.problem)}</div>`, seen(x.observed)]);
    for (const ss of x.sessions) {
      rows.push([host, `<b>${esc(ss.peer)}</b>` + (ss.attachment ? ` <div class="muted" data-attachment>from namespace ${esc(ss.attachment)}</div>` : ""), stateOf(ss) + (ss.closed ? ` <span class="reason">closed for its ${esc(ss.closed)}</span>` : "") +
        (ss.bfd ? ` <div class="muted" data-bfd="${esc(ss.bfd)}">BFD ${esc(ss.bfd)}${ss.bfdReason ? ` (${esc(ss.bfdReason)})` : ""}${ss.bfdSince ? ` since ${ago(ss.bfdSince)}` : ""}</div>` : ""),
        ago(ss.since), `<span class="num">${esc(ss.received)}</span>` + (ss.advertised ? ` <div class="muted" data-advertised>sent ${esc(ss.advertised)}</div>` : ""), ss.reason ? `<div class="reason">${esc(ss.reason)}</div>` : "", seen(x.observed)]);
    }
    if (x.sessionsLeftOut) rows.push([host, `<span class="muted">${esc(x.sessionsLeftOut)} more sessions not shown (the page shows ${BGP_SESSIONS} per host)</span>`, "", "", "", "", ""]);
  }
  h += table(["Host", "Peer", "State", "Since", "Prefixes received", "Reason", "Observed"], rows, "No session.");
  h += `<div class="cards">` + t.hosts.map(x => card(x.node, `${badge("accepted", "ok")} <span class="num">${esc(x.accepted)}</span> ` +
    `${badge("dropped", x.dropped ? "bad" : "ok")} <span class="num">${esc(x.dropped)}</span>` +
    (x.attachment ? ` <div data-attachment>sessions and routes in namespace ${esc(x.attachment)}</div>` : "") +
    (x.closed ? ` <div class="reason">${esc(x.closed)} session${x.closed > 1 ? "s" : ""} closed for a bound</div>` : "") +
    (x.reannounceSince ? (x.reannounceError
      ? ` <div data-reannounce="failed">${badge("not re-announced", "bad")} since ${ago(x.reannounceSince)} <span class="reason">${esc(x.reannounceError)}</span></div>`
      : x.fabricSessions
        ? ` <div data-reannounce="ok">${badge("re-announced", "ok")} <span class="num">${esc(x.reannounced || 0)}</span> on ${esc(x.fabricSessions)} fabric sessions since ${ago(x.reannounceSince)}</div>`
        : ` <div data-reannounce="no-fabric">${badge("re-announced", "bad")} <span class="num">${esc(x.reannounced || 0)}</span> since ${ago(x.reannounceSince)} <span class="reason">no session with a fabric router is established: they reach none</span></div>`) : "") +
    (x.announceSince ? (x.announceError
      ? ` <div data-announce="failed">${badge("VIPs not announced", "bad")} since ${ago(x.announceSince)} <span class="reason">${esc(x.announceError)}</span></div>`
      : ` <div data-announce="ok">${badge("VIPs announced", "ok")} to the tenant's speakers since ${ago(x.announceSince)}: ` +
        ((x.announced || []).map(a => `<b>${esc(a.prefix)}</b> via ${esc(a.nextHop)}`).join(", ") || `<span class="muted">none</span>`) +
        (x.announcedLeftOut ? ` <span class="muted">and ${esc(x.announcedLeftOut)} more</span>` : "") + `</div>`) : "") +
    ` <div class="muted">data from ${seen(x.observed)}</div>`, x.reachable ? "" : "bad")).join("") + `</div>`;
  return h;
}

// attachmentOf is the tenant's attachment on every host (state, since
// when, the host's address in the tenant's network) and the VIP pools
// that live in it, from the stream.
function attachmentOf(s, name) {
  const t = (s.attachments || []).find(x => x.tenant === name);
  const pools = (s.pools || []).filter(p => p.attachment === name);
  if (!t && !pools.length) return "";
  let h = `<h2>Attachment</h2>`;
  const stateOf = x => {
    if (!x.reachable) return badge("unknown", "unknown") + ` <span class="muted">was ${esc(x.state)}</span>`;
    return badge(x.state === "up" ? "up" : x.state === "failed" ? "error" : x.state, x.state === "up" ? "ok" : x.state === "failed" ? "bad" : "unknown");
  };
  h += table(["Host", "Namespace", "State", "Since", "VNI", "Address", "Reason", "Observed"], (t ? t.hosts : []).map(x => [
    `${hostLink(x.node)}` + (x.reachable ? "" : ` ${badge("unreachable", "bad")}`), esc(x.namespace), stateOf(x), ago(x.since),
    `<span class="num">${esc(x.vni)}</span>`, esc(x.address || "—"), x.reason || x.error ? `<div class="reason">${esc(x.reason || x.error)}</div>` : "", seen(x.observed)]),
    "No host reports this tenant's attachment yet.");
  if (pools.length) {
    h += `<h3>VIP pools in the attachment <small>announced and served inside the tenant's namespace</small></h3>` +
      table(["Pool", "Mode", "CIDRs"], pools.map(p => [
        `<b><a href="#/object/VIPPool/${encodeURIComponent(p.name)}">${esc(p.name)}</a></b>`, esc(p.mode), p.cidrs.map(esc).join("<br>")]), "");
  }
  return h;
}

// renderTenant is a tenant's page: its quotas, DNS names and BGP.
function renderTenant(s, name) {
  if (netView.tenant !== name) Object.assign(netView, { tenant: name, dns: 0, bgp: 0 });
  const t = s.tenants.find(x => x.name === name);
  if (!t && !(s.bgp || []).some(x => x.tenant === name)) return `<h1>${esc(name)}</h1><p class="muted">No such tenant (deleted?). <a href="#/tenants">Tenants</a></p>`;
  let h = `<h1>Tenant ${esc(name)} <small><a href="#/object/Tenant/${encodeURIComponent(name)}">YAML</a></small></h1>`;
  if (t) h += `<div class="cards">` + card("Domains", t.domains.map(esc).join("<br>") || "—") + card("Networks", t.networks.map(esc).join("<br>") || "—") +
    card("Load balancers", esc(s.lbs.filter(l => l.tenant === name).length)) + `</div>`;
  h += attachmentOf(s, name);
  h += `<div id="dns-table">${dnsTable()}</div>`;
  h += bgpSessions(s, name);
  h += `<div id="bgp-table">${routeTable()}</div>`;
  return h;
}

// dnsZonesOf is a host's zones and their DNSSEC keys.
function dnsZonesOf(info) {
  const zs = (info && info.zones) || [];
  return `<h2>DNS zones <small>as the host reported ${info ? seen(info.observed) : "never"}</small></h2>` +
    table(["Zone", "DNSSEC", "Key tag", "DS to publish"], zs.map(z => [`<b>${esc(z.zone)}</b>`,
      !z.signed ? `<span class="muted">unsigned</span>` : z.ds ? badge("signed", "ok") : badge("no key", "bad") + (z.error ? `<div class="reason">${esc(z.error)}</div>` : ""),
      z.keyTag ? esc(z.keyTag) + (z.nextKeyTag ? ` and ${esc(z.nextKeyTag)}` : "") : "—",
      (z.ds ? `<code>${esc(z.ds)}</code>` : "—") + (z.nextDs ? `<div class="reason">key rollover: both keys sign; the new key's DS <code>${esc(z.nextDs)}</code>` +
        (z.finishAfter ? `, finish not before ${esc(z.finishAfter)}` : "") + `</div>` : "")]), "This host's DNS serves no zone.");
}

function setupTenant() {
  document.getElementById("main").addEventListener("click", ev => {
    const b = ev.target.closest && ev.target.closest("button[data-npage]");
    if (!b || b.disabled) return;
    const [kind, p] = b.dataset.npage.split(":");
    netView[kind] = Number(p);
    renderNet(kind);
  });
}
