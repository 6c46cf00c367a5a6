// teapot-lb dashboard: the members of a load balancer. A load balancer
// can have thousands of members on every host: the stream carries each
// host's counts and the members down or with traffic; the member table
// (each member once, its state on every host, those down first) is read
// a page of MEMBER_PAGE rows at a time from /api/members, with a search
// and a state filter in the toolbar.
"use strict";

const MEMBER_PAGE = 50;          // member rows in the DOM at once
const MEMBER_PROBLEMS = 5;       // members named in a host's summary
// The member table's search, state filter and page, for one load balancer.
const memberView = { lb: "", q: "", state: "", page: 0 };

function memberBadge(st) { return st === "up" ? badge("up", "ok") : st === "down" ? badge("down", "bad") : badge("unknown", "unknown"); }

// memberRate is a member's last interval in words.
function memberRate(t) {
  return `${fmtNum(t.rps)} req/s, ${fmtPct(t.err)} 5xx, p99 ${fmtDur(t.p99)}`;
}

// memberSummary is one host's members in a few words: how many are up,
// down or unknown (the stream's counts), and the first few down with the
// reason.
function memberSummary(x) {
  const n = x.memberCounts || { up: 0, down: 0, unknown: 0 };
  const total = n.up + n.down + n.unknown;
  if (!total) return `<span class="muted">—</span>`;
  const bad = x.reachable ? x.members.filter(m => !m.healthy).slice(0, MEMBER_PROBLEMS) : [];
  let h = ["up", "down", "unknown"].filter(k => n[k]).map(k => `${memberBadge(k)} <span class="num">${n[k]}</span>`).join(" ") +
    ` <span class="muted">of ${total}</span>`;
  h += bad.map(m => `<div class="reason">${esc(m.pool)}: ${esc(m.address)}${m.reason ? ": " + esc(m.reason) : " down"}</div>`).join("");
  if (n.down > bad.length) h += `<div class="muted">${n.down - bad.length} more down: see Members</div>`;
  if (x.membersOmitted) h += `<div class="muted">traffic of ${esc(x.membersOmitted)} quieter members not reported (each host reports its 64 busiest)</div>`;
  return h;
}

// memberData is the page of the member table last read from
// /api/members, for key (load balancer, search, state, page); it is read
// again when a newer snapshot arrives. memberShown: the page shows the
// member table of its key.
let memberData = { key: "", time: "", busy: false, data: null, error: "" };
function memberShown() { return !!memberData.data && memberData.key === memberKey(); }
function memberKey() { return [memberView.lb, memberView.q, memberView.state, memberView.page].join("\n"); }
function memberFetch() {
  const key = memberKey(), time = state.snap ? state.snap.time : "";
  if (memberData.busy || (memberData.key === key && memberData.time === time)) return;
  memberData.busy = true;
  const u = `/api/members?lb=${encodeURIComponent(memberView.lb)}&offset=${memberView.page * MEMBER_PAGE}&limit=${MEMBER_PAGE}` +
    `&q=${encodeURIComponent(memberView.q)}&state=${encodeURIComponent(memberView.state)}`;
  fetch(u, { cache: "no-store" }).then(r => r.ok ? r.json() : r.text().then(t => Promise.reject(new Error(t.trim() || `HTTP ${r.status}`))))
    .then(d => { memberData = { key, time, busy: false, data: d, error: "" }; },
      err => { memberData = { key, time, busy: false, data: null, error: String(err.message || err) }; })
    .finally(() => { memberData.busy = false; renderMembers(); });
}

// renderMembers puts the member table in the page again without
// rendering the rest, and fetches the page the filters now ask for.
function renderMembers() {
  const el = document.getElementById("member-table");
  const r = route();
  const l = r.page === "lb" && state.snap && state.snap.lbs.find(x => x.id === r.arg);
  if (!el || !l) return;
  el.innerHTML = memberTable(l);
  membersShownAt();
}

// membersShownAt notes when a load balancer's page first showed its
// member table, laid out (for the browser test).
function membersShownAt() {
  const main = document.getElementById("main");
  if (main.dataset.page !== "lb" || main.dataset.membersRender || !memberShown()) return;
  void main.offsetHeight;
  main.dataset.membersRender = performance.now().toFixed(0);
}

// memberTable is one page of the members: each member once, its state
// on every host (by that host's checks), its traffic where the host
// reported it; the pager and the filters' effect in the heading.
function memberTable(l) {
  memberFetch();
  // While another page or filter is read, the last page read stays.
  const d = memberData.data && memberData.data.lb === l.id ? memberData.data : null;
  const err = memberData.key === memberKey() ? memberData.error : "";
  let h = `<h2 id="members">Members <small>`;
  if (!d) return h + `</small></h2>` + (err ? `<p class="reason">members not read: ${esc(err)}</p>` : `<p class="muted">Reading the members…</p>`);
  const pages = Math.max(1, Math.ceil(d.matching / MEMBER_PAGE));
  const page = Math.floor(d.offset / MEMBER_PAGE);
  const to = d.offset + d.rows.length;
  h += `${d.rows.length ? `${d.offset + 1}–${to}` : "none"}${d.matching === d.total ? "" : ` of ${d.matching} matching`} of ${d.total}; ` +
    `the state by each host's checks; down first</small></h2>`;
  if (pages > 1) {
    const btn = (p, label, title) => `<button type="button" data-mpage="${p}" title="${esc(title)}"${p === page || p < 0 || p >= pages ? " disabled" : ""}>${label}</button>`;
    h += `<div class="pager">` + btn(0, "«", "first page") + btn(page - 1, "‹", "previous page") +
      ` <span class="muted">page ${page + 1} of ${pages}</span> ` + btn(page + 1, "›", "next page") + btn(pages - 1, "»", "last page") + `</div>`;
  }
  if (!d.rows.length) return h + `<p class="muted">${d.total ? "No member matches the filter." : "No members."}</p>`;
  let rows = "";
  for (const r of d.rows) {
    rows += `<tr data-member="${esc(r.pool + " " + r.address)}"><td>${esc(r.pool)}: <b>${esc(r.address)}</b>` +
      (r.weight !== undefined ? ` <span class="muted">w${esc(r.weight)}</span>` : "") + `</td>`;
    for (const node of d.hosts) {
      const m = r.on[node];
      if (!m) { rows += `<td class="ms" data-state="none"><span class="muted">not reported</span></td>`; continue; }
      rows += `<td class="ms" data-state="${esc(m.state)}">${memberBadge(m.state)}` +
        (m.traffic ? ` <span class="mt">${esc(memberRate(m.traffic))}, ${esc(m.inFlight)} in flight, ${seen(m.traffic.at)}</span>` : "") +
        (set(m.lastCheck) ? ` <span class="muted">checked ${ago(m.lastCheck)}</span>` : "") +
        (m.reason ? `<div class="reason">${esc(m.reason)}</div>` : "") + `</td>`;
    }
    rows += `</tr>`;
  }
  return h + `<table class="members"><thead><tr><th>Member</th>${d.hosts.map(n => `<th>${esc(n)}</th>`).join("")}</tr></thead><tbody>${rows}</tbody></table>`;
}

// setupMembers wires the member search and state filter (in the toolbar,
// so typing survives the re-renders) and the pager (in the page).
function setupMembers() {
  const q = document.getElementById("member-search");
  q.addEventListener("input", () => { memberView.q = q.value; memberView.page = 0; renderMembers(); });
  const st = document.getElementById("member-state");
  st.addEventListener("change", () => { memberView.state = st.value; memberView.page = 0; renderMembers(); });
  document.getElementById("main").addEventListener("click", ev => {
    const b = ev.target.closest && ev.target.closest("button[data-mpage]");
    if (b && !b.disabled) { memberView.page = Number(b.dataset.mpage); renderMembers(); }
  });
}

// memberToolbar shows the member filters on a load balancer's page and
// keeps them in step with memberView (reset when another opens).
function memberToolbar(page, arg) {
  if (page === "lb" && memberView.lb !== arg) Object.assign(memberView, { lb: arg, q: "", state: "", page: 0 });
  document.getElementById("member-filters").hidden = page !== "lb";
  const q = document.getElementById("member-search"), st = document.getElementById("member-state");
  if (q.value !== memberView.q && document.activeElement !== q) q.value = memberView.q;
  if (st.value !== memberView.state) st.value = memberView.state;
}
