// The dashboard: renders a state (roster agent's /v1/state or a Go
// client's debug JSON) with textContent only. Instance data is untrusted.
"use strict";

const stateURL = document.body.dataset.state;
const eventsURL = document.body.dataset.events;

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function num(v, digits) {
  return typeof v === "number" ? v.toFixed(digits) : "";
}

const columns = ["id", "address", "weight", "version", "zone", "tags", "metadata", "health",
  "picks", "failures", "in flight", "p50 ms", "p99 ms", "EWMA ms"];

function instanceRow(inst, svcStale) {
  const tr = el("tr");
  tr.dataset.id = inst.id;
  if (inst.quarantined) tr.classList.add("quarantined");
  if (inst.weight === 0) tr.classList.add("draining");
  const s = inst.stats || {};
  const meta = Object.entries(inst.metadata || {}).map(([k, v]) => k + "=" + v).join(" ");
  const cells = [inst.id, inst.address, inst.weight, inst.version, inst.zone, (inst.tags || []).join(" "), meta];
  for (const c of cells) tr.append(el("td", c));
  const health = el("td");
  if (inst.quarantined) health.append(el("span", "quarantined", "badge bad"));
  else if (svcStale) health.append(el("span", "stale", "badge stale"));
  else health.append(el("span", inst.weight === 0 ? "draining" : "passing", "badge ok"));
  tr.append(health);
  for (const [v, d] of [[s.picks, 0], [s.failures, 0], [s.inflight, 0], [s.p50_ms, 2], [s.p99_ms, 2], [s.ewma_ms, 2]]) {
    tr.append(el("td", num(v, d), "num"));
  }
  return tr;
}

function serviceSection(svc) {
  const sec = el("section");
  sec.dataset.service = svc.service;
  const h = el("h2", svc.service);
  h.append(el("small", "revision " + svc.revision + " · " + svc.instances.length + " instances"));
  if (svc.stale) h.append(el("span", "stale", "badge stale"));
  sec.append(h);
  const table = el("table");
  const head = el("tr");
  for (const c of columns) head.append(el("th", c));
  table.append(head);
  for (const inst of svc.instances) table.append(instanceRow(inst, svc.stale));
  sec.append(table);
  return sec;
}

function render(state) {
  const services = state.services || [];
  const stale = state.stale || services.some((s) => s.stale);
  document.getElementById("banner").hidden = !stale;
  const meta = [];
  if (state.registry) meta.push(state.registry);
  if (state.strategy) meta.push("default strategy " + state.strategy);
  if (typeof state.tokens === "number") meta.push(state.tokens + " picks awaiting report");
  document.getElementById("meta").textContent = meta.join(" · ");
  const main = document.getElementById("services");
  const sections = services.map(serviceSection);
  if (sections.length === 0) sections.push(el("p", "No service followed yet: pick from one, or ask for its instances.", "empty"));
  main.replaceChildren(...sections);
}

function setConn(text) {
  document.getElementById("conn").textContent = text;
}

function poll() {
  fetch(stateURL, { headers: { Accept: "application/json" } })
    .then((r) => r.json())
    .then((s) => { render(s); setConn("updated " + new Date().toLocaleTimeString()); })
    .catch(() => setConn("cannot reach the server"))
    .finally(() => setTimeout(poll, 1000));
}

if (eventsURL) {
  const es = new EventSource(eventsURL);
  es.onmessage = (e) => { render(JSON.parse(e.data)); setConn("live"); };
  es.onerror = () => setConn("reconnecting…");
} else {
  poll();
}
