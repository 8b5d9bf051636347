// The dashboard and console: renders a state (roster agent's /v1/console
// or /v1/state, or a Go client's debug JSON) with textContent only.
// Instance data is untrusted: it never reaches innerHTML.
"use strict";

const stateURL = document.body.dataset.state;
const eventsURL = document.body.dataset.events;
const actionsURL = document.body.dataset.actions;
const $ = (id) => document.getElementById(id);

let last = null;        // the last state rendered
let lastAt = null;      // when it came
let page = 1;
let open = null;        // {service, id} of the instance view
let source = null;      // the EventSource
let pollTimer = null;
// What the user is in the middle of in the instance view, kept across
// the re-renders of each update: a weight being typed, a deregister
// awaiting its confirmation.
let weightDraft = null; // {key, value}
let armed = null;       // key of the instance whose deregister is armed
const keyOf = (svc, inst) => svc.service + "/" + inst.id;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function num(v, digits) {
  return typeof v === "number" ? v.toFixed(digits) : "";
}

function time(t) {
  if (!t || t.startsWith("0001")) return "";
  return new Date(t).toLocaleTimeString();
}

function filters() {
  return {
    service: $("f-service").value.trim().toLowerCase(),
    version: $("f-version").value.trim(),
    zone: $("f-zone").value.trim(),
    tag: $("f-tag").value.trim(),
    health: $("f-health").value,
  };
}

// health names an instance's state: quarantined by this host's clients,
// stale (the registry fails), draining (weight 0), or passing.
function health(inst, svcStale) {
  if (inst.quarantined) return "quarantined";
  if (svcStale) return "stale";
  if (inst.weight === 0) return "draining";
  return "passing";
}

const badgeClass = { quarantined: "bad", stale: "stale", draining: "warn", passing: "ok" };

function keep(inst, svcStale, f) {
  if (f.version && inst.version !== f.version) return false;
  if (f.zone && inst.zone !== f.zone) return false;
  if (f.tag && !(inst.tags || []).includes(f.tag)) return false;
  if (f.health && health(inst, svcStale) !== f.health) return false;
  return true;
}

const columns = ["id", "address", "weight", "version", "zone", "tags", "metadata", "health",
  "picks", "failures", "in flight", "p50 ms", "p99 ms", "EWMA ms"];

function instanceRow(svc, inst) {
  const tr = el("tr");
  tr.dataset.id = inst.id;
  tr.tabIndex = 0;
  const h = health(inst, svc.stale);
  tr.classList.add("h-" + h);
  const s = inst.stats || {};
  const meta = Object.entries(inst.metadata || {}).map(([k, v]) => k + "=" + v).join(" ");
  const cells = [inst.id, inst.address, inst.weight, inst.version, inst.zone, (inst.tags || []).join(" "), meta];
  cells.forEach((c, i) => {
    const td = el("td");
    td.dataset.label = columns[i];
    // Long values are clipped in the table; the instance view shows them whole.
    const v = el("div", c, "clip");
    if (c === undefined || c === null || c === "") td.classList.add("blank");
    v.title = String(c);
    td.append(v);
    tr.append(td);
  });
  const hc = el("td");
  hc.dataset.label = "health";
  hc.append(el("span", h, "badge " + badgeClass[h]));
  tr.append(hc);
  [[s.picks, 0], [s.failures, 0], [s.inflight, 0], [s.p50_ms, 2], [s.p99_ms, 2], [s.ewma_ms, 2]].forEach(([v, d], i) => {
    const td = el("td", num(v, d), "num");
    td.dataset.label = columns[8 + i];
    tr.append(td);
  });
  const show = () => { open = { service: svc.service, id: inst.id }; armed = null; weightDraft = null; renderDetail(); };
  tr.addEventListener("click", show);
  tr.addEventListener("keydown", (e) => { if (e.key === "Enter") show(); });
  return tr;
}

function historyList(svc) {
  const d = el("details", null, "history");
  d.dataset.service = svc.service;
  if (openHistory.has(svc.service)) d.open = true;
  d.addEventListener("toggle", () => { if (d.open) openHistory.add(svc.service); else openHistory.delete(svc.service); });
  const n = svc.history.length;
  d.append(el("summary", "History (" + n + (n === 1 ? " change)" : " changes)")));
  const ol = el("ol");
  for (const c of svc.history) {
    const li = el("li", null, "change " + c.kind);
    li.dataset.kind = c.kind;
    li.append(el("time", time(c.at)), el("b", c.kind));
    if (c.id) li.append(el("code", c.id));
    if (c.detail) li.append(el("span", c.detail));
    ol.append(li);
  }
  if (svc.history.length === 0) ol.append(el("li", "No change seen yet.", "empty"));
  d.append(ol);
  return d;
}
const openHistory = new Set();

function serviceSection(svc, f) {
  const sec = el("section");
  sec.dataset.service = svc.service;
  const h = el("h2", svc.service);
  const shown = svc.instances.filter((i) => keep(i, svc.stale, f));
  const count = shown.length === svc.instances.length ? svc.instances.length + " instances"
    : shown.length + " of " + svc.instances.length + " instances";
  h.append(el("small", (svc.revision !== undefined ? "revision " + svc.revision + " · " : "") + count));
  if (svc.stale) h.append(el("span", "stale since " + time(svc.stale_since), "badge stale"));
  sec.append(h);
  if (svc.error) {
    sec.append(el("p", "Not followed: " + svc.error, "empty"));
  } else if (svc.loading) {
    sec.append(el("p", "Loading its instances…", "empty loading"));
  } else if (shown.length === 0) {
    sec.append(el("p", svc.instances.length === 0 ? "No instance registered." : "No instance matches the filters.", "empty"));
  } else {
    const table = el("table");
    const head = el("tr");
    for (const c of columns) head.append(el("th", c));
    const thead = el("thead");
    thead.append(head);
    const tbody = el("tbody");
    for (const inst of shown) tbody.append(instanceRow(svc, inst));
    table.append(thead, tbody);
    sec.append(table);
  }
  if (svc.held && svc.held.length) sec.append(heldList(svc));
  if (svc.history) sec.append(historyList(svc));
  return sec;
}

function dl(pairs) {
  const d = el("dl");
  for (const [k, v] of pairs) {
    if (v === undefined || v === null || v === "") continue;
    d.append(el("dt", k), el("dd", v));
  }
  return d;
}

function findOpen() {
  if (!open || !last) return null;
  const svc = (last.services || []).find((s) => s.service === open.service);
  const inst = svc && svc.instances.find((i) => i.id === open.id);
  return inst ? { svc, inst } : null;
}

function renderDetail() {
  // Replacing the view under a user typing a weight would take the focus.
  if (document.activeElement && document.activeElement.id === "weight-value") return;
  const panel = $("detail");
  if (!open) { panel.hidden = true; return; }
  panel.hidden = false;
  panel.dataset.id = open.id;
  const body = $("detail-body");
  const found = findOpen();
  if (!found) {
    body.replaceChildren(el("h2", open.id), el("p", "This instance is not in " + open.service + "'s list any more: it left the registry, or an operator holds it out (listed under the service).", "empty"));
    return;
  }
  const { svc, inst } = found;
  const s = inst.stats || {};
  const parts = [el("h2", inst.id), el("p", svc.service, "sub")];
  parts.push(el("h3", "Instance"), dl([["address", inst.address], ["version", inst.version], ["zone", inst.zone],
    ["weight", inst.weight], ["health", health(inst, svc.stale)], ["tags", (inst.tags || []).join(" ")]]));
  parts.push(el("h3", "Endpoints"));
  const eps = inst.endpoints || [];
  parts.push(eps.length ? dl(eps.map((e) => [e.name, e.address + (e.protocol ? " (" + e.protocol + ")" : "")]))
    : el("p", "One port: " + inst.address, "empty"));
  parts.push(el("h3", "Metadata"));
  const md = Object.entries(inst.metadata || {});
  parts.push(md.length ? dl(md) : el("p", "None.", "empty"));
  parts.push(el("h3", "Lease"));
  parts.push(inst.lease ? dl([["held by", "this agent"], ["TTL", inst.lease.ttl], ["heartbeat", inst.lease.heartbeat],
    ["state", inst.lease.state], ["error", inst.lease.error]])
    : el("p", "Held by its own process; readers of the registry do not see its TTL.", "empty"));
  parts.push(el("h3", "Traffic from this host"), dl([["picks", s.picks], ["failures", s.failures], ["in flight", s.inflight],
    ["p50 ms", num(s.p50_ms, 2)], ["p99 ms", num(s.p99_ms, 2)], ["EWMA ms", num(s.ewma_ms, 2)],
    ["quarantine", inst.quarantined ? "ejected by this host's clients" : "not ejected"]]));
  parts.push(el("h3", "Override"));
  const ov = inst.override;
  parts.push(ov ? overrideList(ov) : el("p", "None: the instance serves as its owner registered it.", "empty"));
  if (actionsURL) parts.push(actionBar(svc, inst));
  body.replaceChildren(...parts);
}

// overrideAction names what an operator's override does.
function overrideAction(o) {
  if (o.deregistered) return "deregistered";
  if (o.maintenance) return "maintenance";
  if (o.drain) return "drain";
  if (o.weight !== undefined && o.weight !== null) return "weight " + o.weight;
  return "none";
}

function overrideList(o) {
  return dl([["action", overrideAction(o)], ["by", o.by], ["at", o.at ? new Date(o.at).toLocaleString() : ""], ["reason", o.reason],
    ["names", o.id ? "ID " + o.id : "address " + o.address]]);
}

// heldList lists the instances operators hold out of the list
// (maintenance, deregistered), which have no row of their own.
function heldList(svc) {
  const box = el("div", null, "held");
  box.append(el("h3", "Held out by operators"));
  const ul = el("ul");
  for (const o of svc.held) {
    const target = o.id || o.address;
    const li = el("li");
    li.dataset.target = target;
    li.append(el("code", target), el("b", overrideAction(o)), el("span", [o.by, o.at ? time(o.at) : "", o.reason].filter(Boolean).join(" · ")));
    if (actionsURL && last && last.actions) {
      const b = el("button", "Restore");
      b.type = "button";
      b.dataset.action = "restore";
      b.addEventListener("click", () => act("restore", { service: svc.service, id: target }));
      li.append(b);
    }
    ul.append(li);
  }
  box.append(ul);
  return box;
}

function actionBar(svc, inst) {
  const box = el("div", null, "actions");
  box.append(el("h3", "Actions"));
  if (!last.actions) {
    box.append(el("p", "Actions are disabled: start the agent with --allow-actions.", "empty"));
    return box;
  }
  const btn = (name, label, body) => {
    const b = el("button", label);
    b.type = "button";
    b.dataset.action = name;
    b.addEventListener("click", () => act(name, Object.assign({ service: svc.service, id: inst.id }, body ? body() : {})));
    return b;
  };
  const w = el("input");
  const key = keyOf(svc, inst);
  w.type = "number"; w.min = "0"; w.max = "65535"; w.id = "weight-value";
  w.value = weightDraft && weightDraft.key === key ? weightDraft.value : String(inst.weight);
  w.addEventListener("input", () => { weightDraft = { key, value: w.value }; });
  w.setAttribute("aria-label", "new weight");
  box.append(btn("drain", "Drain"), btn("maint", "Maintenance"), btn("restore", "Restore"));
  const wrow = el("span", null, "weight");
  wrow.append(w, btn("weight", "Set weight", () => { weightDraft = null; return { weight: Number(w.value) }; }));
  box.append(wrow);
  const dereg = el("button", armed === key ? "Confirm deregister " + inst.id : "Deregister…", "danger");
  dereg.type = "button";
  dereg.dataset.action = "deregister";
  dereg.addEventListener("click", () => {
    if (armed === key) { armed = null; act("deregister", { service: svc.service, id: inst.id }); return; }
    armed = key;
    renderDetail();
  });
  box.append(dereg);
  return box;
}

function notice(text, bad) {
  const n = $("notice");
  n.textContent = text;
  n.classList.toggle("bad", !!bad);
  n.hidden = false;
}

function act(name, body) {
  fetch(actionsURL + name, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) })
    .then((r) => r.json().then((j) => ({ ok: r.ok, j })))
    .then(({ ok, j }) => notice(ok ? name + " " + body.service + "/" + body.id + ": " + j.done : name + " refused: " + j.error, !ok))
    .catch((e) => notice(name + " failed: " + e, true));
}

function render(state) {
  last = state;
  lastAt = new Date();
  const f = filters();
  let services = state.services || [];
  const down = state.health && state.health.known && !state.health.up;
  const stale = state.stale || services.some((s) => s.stale);
  const banner = $("banner");
  banner.hidden = !(down || stale);
  if (down) {
    banner.textContent = "The registry is down since " + time(state.health.since) + " (" + state.health.error +
      "): the lists below are the last known ones (stale).";
  } else if (stale) {
    banner.textContent = "The registry is unreachable: the lists below are the last known ones (stale).";
  }
  const meta = [];
  if (state.registry) meta.push(state.registry);
  if (state.strategy) meta.push("default strategy " + state.strategy);
  if (typeof state.tokens === "number") meta.push(state.tokens + " picks awaiting report");
  $("meta").textContent = meta.join(" · ");
  const cat = state.catalog;
  if (!cat) services = services.filter((s) => s.service.includes(f.service));
  if (cat) {
    $("pager").hidden = false;
    $("pageinfo").textContent = "page " + cat.page + " of " + cat.pages + " · " + cat.total + " services" +
      (cat.query ? " matching " + JSON.stringify(cat.query) : "") +
      (cat.error && !down ? " · the catalog cannot be listed: " + cat.error : "");
    $("prev").disabled = cat.page <= 1;
    $("next").disabled = cat.page >= cat.pages;
  }
  const sections = services.map((s) => serviceSection(s, f));
  if (sections.length === 0) {
    let text = "No service followed yet: pick from one, or ask for its instances.";
    if (cat && !cat.known) text = down ? "The registry is down and listed no service yet." : "Loading the catalog…";
    else if (cat && cat.query) text = "No service matches " + JSON.stringify(cat.query) + ".";
    else if (cat) text = "The registry lists no service.";
    sections.push(el("p", text, "empty"));
  }
  $("services").replaceChildren(...sections);
  renderDetail();
}

function setConn(text, lost) {
  const c = $("conn");
  c.textContent = text;
  c.classList.toggle("lost", !!lost);
}

function query() {
  const q = new URLSearchParams();
  const f = filters();
  if (f.service) q.set("q", f.service);
  if (page > 1) q.set("page", String(page));
  const s = q.toString();
  return s ? "?" + s : "";
}

function poll() {
  fetch(stateURL + query(), { headers: { Accept: "application/json" } })
    .then((r) => r.json())
    .then((s) => { render(s); setConn("updated " + new Date().toLocaleTimeString()); })
    .catch(() => setConn("cannot reach the server since " + (lastAt ? lastAt.toLocaleTimeString() : "the start"), true))
    .finally(() => { pollTimer = setTimeout(poll, 1000); });
}

function connect() {
  if (source) source.close();
  if (pollTimer) clearTimeout(pollTimer);
  if (!eventsURL) { poll(); return; }
  source = new EventSource(eventsURL + query());
  source.onmessage = (e) => { render(JSON.parse(e.data)); setConn("live"); };
  source.onerror = () => setConn("reconnecting… (shown: as of " + (lastAt ? lastAt.toLocaleTimeString() : "never") + ")", true);
}

let typing = null;
$("f-service").addEventListener("input", () => {
  clearTimeout(typing);
  typing = setTimeout(() => { page = 1; connect(); }, 250);
});
for (const id of ["f-version", "f-zone", "f-tag", "f-health"]) {
  $(id).addEventListener("input", () => { if (last) render(last); });
}
$("filters").addEventListener("submit", (e) => e.preventDefault());
$("prev").addEventListener("click", () => { if (page > 1) { page--; connect(); } });
$("next").addEventListener("click", () => { page++; connect(); });
$("close").addEventListener("click", () => { open = null; if (document.activeElement) document.activeElement.blur(); renderDetail(); });
document.addEventListener("keydown", (e) => { if (e.key === "Escape") { open = null; if (document.activeElement) document.activeElement.blur(); renderDetail(); } });
connect();
