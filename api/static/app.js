// FedSentry dashboard. Filters, paging and counts are answered by the server over every stored alert; new
// anomalies arrive over server-sent events; devices and jobs refresh every 5 s.
"use strict";
const $ = (s) => document.querySelector(s);
const $$ = (s) => Array.from(document.querySelectorAll(s));
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
// the API's times are UTC with their offset ("...Z"); older answers had none, and were UTC too
const utc = (t) => new Date(/(Z|[+-]\d\d:\d\d)$/.test(t) ? t : t + "Z");
const fmtTime = (t) => (t ? utc(t).toLocaleString() : "–");
// a stored score that is not a finite number is served as null
const num = (x) => (typeof x === "number" ? x.toPrecision(4) : "–");
const ADMIN = document.body.dataset.role === "admin";
const state = { incident: null, anomalyCursor: null, incidentCursor: null, job: null, since: null, flows: null, recordCursor: null };

// ---- answers in order: a view shows the answer to the newest request it made ---------------------------------
// (an answer to an older request, for other filters or overtaken by the live feed's refresh, is dropped: a slow
// unfiltered count must not overwrite the filtered one that came back first)
const asked = {};
function ask(view) {
  const n = (asked[view] || 0) + 1;
  asked[view] = n;
  return () => asked[view] === n;
}

// ---- filters: one query for every view -------------------------------------------------------------------
function filterParams() {
  const p = new URLSearchParams();
  const device = $("#f-device").value.trim();
  if (device) p.set("device_prefix", device);
  const score = parseFloat($("#f-score").value);
  if (!isNaN(score)) p.set("min_score", String(score));
  const period = $("#f-period").value;
  const iso = (v) => (v ? new Date(v).toISOString() : "");
  const since = period === "custom" ? iso($("#f-since").value) : new Date(Date.now() - 1000 * Number(period)).toISOString();
  const until = period === "custom" ? iso($("#f-until").value) : "";
  if (since) p.set("since", since);
  if (until) p.set("until", until);
  state.since = since ? new Date(since) : null;
  state.until = until ? new Date(until) : null;
  if ($("#f-unack").checked) p.set("acknowledged", "false");
  return p;
}

// whether a live anomaly belongs in the list as filtered
function matches(a) {
  const device = $("#f-device").value.trim();
  const score = parseFloat($("#f-score").value);
  const ts = utc(a.ts);
  return (!device || a.device_id.startsWith(device)) && (isNaN(score) || (a.score !== null && a.score >= score)) &&
    (!$("#f-unack").checked || !a.acknowledged) && (!state.since || ts >= state.since) && !state.until &&
    (!state.incident || a.incident_id === state.incident);
}

async function api(path, opts) {
  const r = await fetch(path, Object.assign({ credentials: "same-origin" }, opts || {}));
  if (r.status === 401) { location.href = "/login"; throw new Error("signed out"); }
  if (!r.ok) {
    let why = `${r.status}`;
    try {
      const d = (await r.json()).detail;
      why = Array.isArray(d) ? d.map((e) => `${e.field}: ${e.problem}`).join("; ") : String(d);
    } catch (e) { /* not JSON */ }
    throw new Error(why);
  }
  return r.json();
}

const post = (path, body) => api(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body || {}) });
const note = () => { const n = $("#ack-note"); return n && n.value.trim() ? { note: n.value.trim() } : {}; };

function showError(e) { $("#f-error").textContent = e ? String(e.message || e) : ""; }

// ---- anomalies -----------------------------------------------------------------------------------------------
function flowText(f) {
  if (!f) return "";
  const ends = f["id.orig_h"] ? `${f["id.orig_h"]}:${f["id.orig_p"] ?? ""} → ${f["id.resp_h"] ?? ""}:${f["id.resp_p"] ?? ""}` : "";
  return [f.uid, ends, [f.proto, f.service].filter(Boolean).join("/"), f.row ? `row ${f.row}` : ""].filter(Boolean).join(" ");
}

function ackCell(x, kind) {
  const id = esc(x.id);
  const who = x.acknowledged ? `acknowledged by ${esc(x.acknowledged_by || "?")}` +
    (x.ack_note ? `<br><span class="note">“${esc(x.ack_note)}”</span>` : "") : "open";
  if (!ADMIN) return who;
  const act = x.acknowledged ? `<button data-undo="${id}" data-kind="${kind}">undo</button>`
    : `<button data-ack="${id}" data-kind="${kind}">acknowledge</button>`;
  return `${who} ${act}`;
}

function anomalyRow(a, fresh) {
  const tr = document.createElement("tr");
  tr.id = "a-" + a.id;
  if (fresh) tr.className = "new";
  if (a.acknowledged) tr.classList.add("ack");
  const why = (a.explanation || []).map((e) => `<li>${esc(e.feature)} ${(100 * e.share).toFixed(0)}%: ` +
    `${num(e.value)} <span class="muted">vs ${num(e.expected)}</span></li>`).join("");
  const inc = a.incident_id ? `<br><a href="#" class="tag" data-incident="${esc(a.incident_id)}">incident ×${a.count}</a>` : "";
  const sel = ADMIN ? `<input type="checkbox" class="sel" data-id="${esc(a.id)}" aria-label="select">` : "";
  tr.innerHTML = `<td data-label="">${sel}</td><td data-label="time">${esc(fmtTime(a.ts))}</td>` +
    `<td data-label="device">${esc(a.device_id)}</td>` +
    `<td data-label="score">${num(a.score)} <span class="muted">/ ${num(a.threshold)}</span>${inc}</td>` +
    `<td data-label="connection" class="flow">${esc(flowText(a.flow)) || "–"}</td>` +
    `<td data-label="why"><ul class="why">${why}</ul></td><td data-label="status">${ackCell(a, "anomaly")}` +
    (ADMIN ? ` <button data-fp="${esc(a.id)}">false positive</button>` : "") + "</td>";
  return tr;
}

async function loadAnomalies(more) {
  const p = filterParams();
  p.set("limit", "50");
  if (state.incident) { p.delete("acknowledged"); p.set("incident", state.incident); }
  if (more && state.anomalyCursor) p.set("cursor", state.anomalyCursor);
  const newest = ask("anomalies");
  const page = await api("/api/v1/anomalies?" + p);
  if (!newest()) return;
  const body = $("#anomalies tbody");
  if (!more) body.innerHTML = "";
  page.items.forEach((a) => body.appendChild(anomalyRow(a, false)));
  state.anomalyCursor = page.next_cursor;
  $("#anomalies-more").hidden = !page.next_cursor;
  $("#anomalies-none").hidden = body.children.length > 0;
  $("#a-scope").innerHTML = state.incident ? `updates of incident ${esc(state.incident)} · <a href="#" id="all-anomalies">show all</a>` : "";
  selectionChanged();
}

// ---- incidents ------------------------------------------------------------------------------------------------
function incidentRow(i) {
  const tr = document.createElement("tr");
  tr.id = "i-" + i.id;
  if (i.acknowledged) tr.className = "ack";
  const samples = (i.samples || []).slice(0, 2).map((f) => `<li>${esc(flowText(f))}</li>`).join("");
  tr.innerHTML = `<td data-label="last update">${esc(fmtTime(i.last_update))}</td><td data-label="device">${esc(i.device_id)}</td>` +
    `<td data-label="features">${esc(i.features.join(", "))}</td>` +
    `<td data-label="records"><b>${i.count.toLocaleString()}</b> <span class="muted">in ${i.updates} updates</span><br>` +
    `<a href="#" data-incident="${esc(i.id)}">show updates</a> · <a href="#" data-flows="${esc(i.id)}">every flow</a></td>` +
    `<td data-label="seen">${esc(fmtTime(i.first))} – ${esc(fmtTime(i.last))}</td><td data-label="max score">${num(i.max_score)}</td>` +
    `<td data-label="examples"><ul class="why flow">${samples}</ul></td><td data-label="status">${ackCell(i, "incident")}</td>`;
  return tr;
}

// ---- every flagged record of an incident, a page at a time ------------------------------------------------------
function recordRow(r) {
  const tr = document.createElement("tr");
  const why = (r.explanation || []).map((e) => `<li>${esc(e.feature)}: ${num(e.value)} ` +
    `<span class="muted">vs ${num(e.expected)}</span></li>`).join("");
  tr.innerHTML = `<td data-label="time">${esc(fmtTime(r.ts))}</td><td data-label="device">${esc(r.device_id)}</td>` +
    `<td data-label="score">${num(r.score)} <span class="muted">/ ${num(r.threshold)}</span></td>` +
    `<td data-label="connection" class="flow">${esc(flowText(r.flow)) || "–"}</td>` +
    `<td data-label="why"><ul class="why">${why}</ul></td>`;
  return tr;
}

async function loadRecords(more) {
  const p = new URLSearchParams({ incident: state.flows, limit: "50" });
  if (more && state.recordCursor) p.set("cursor", state.recordCursor);
  const page = await api("/api/v1/records?" + p);
  const body = $("#records tbody");
  if (!more) body.innerHTML = "";
  page.items.forEach((r) => body.appendChild(recordRow(r)));
  state.recordCursor = page.next_cursor;
  $("#records-more").hidden = !page.next_cursor;
  $("#r-scope").textContent = `every flagged record of incident ${state.flows}, newest first`;
  $("#flows").hidden = false;
}

// ---- suppression rules -------------------------------------------------------------------------------------------
function suppressionRow(r) {
  const tr = document.createElement("tr");
  const match = Object.entries(r.match).map(([k, v]) => `${esc(k)}=${esc(v)}`).join(" ");
  const state = (r.active ? (r.expires ? `active until ${esc(fmtTime(r.expires))}` : "active")
    : (r.removed ? `removed by ${esc(r.removed_by || "?")}` : "expired")) +
    (r.retroactive_state === "running" ? ` <span class="badge">applying to stored alerts</span>` : "");
  const act = ADMIN && r.active ? ` <button data-unsuppress="${esc(r.id)}">remove</button>` : "";
  tr.innerHTML = `<td data-label="created">${esc(fmtTime(r.created))}</td><td data-label="by">${esc(r.created_by)}</td>` +
    `<td data-label="match" class="flow">${match}</td><td data-label="reason">${esc(r.reason)}</td>` +
    `<td data-label="held back">${(r.held + r.retroactive).toLocaleString()}</td><td data-label="state">${state}${act}</td>`;
  return tr;
}

// a table of every row an analysts' list route answers (suppression rules, false-positive feedback)
async function loadRows(path, table, row) {
  const rows = await api(path);
  const body = $(table + " tbody");
  body.innerHTML = "";
  rows.forEach((r) => body.appendChild(row(r)));
}
const loadSuppressions = () => loadRows("/api/v1/suppressions", "#suppressions", suppressionRow);

async function addSuppression() {
  const val = (id) => $(id).value.trim();
  const body = { reason: val("#sup-reason"), retroactive: $("#sup-retro").checked };
  for (const [k, id] of [["device", "#sup-device"], ["cidr", "#sup-cidr"], ["service", "#sup-service"]]) {
    if (val(id)) body[k] = val(id);
  }
  if (val("#sup-port")) {
    const [lo, hi] = val("#sup-port").split("-").map((x) => Number(x));
    body.port_min = lo;
    body.port_max = hi === undefined ? lo : hi;
  }
  const hours = parseFloat(val("#sup-hours"));
  if (!isNaN(hours)) body.expires = new Date(Date.now() + hours * 3600e3).toISOString();
  let r = await post("/api/v1/suppressions", body);
  $("#sup-result").textContent = body.retroactive ? "rule added; applying it to the stored alerts…" : "rule added";
  await loadSuppressions();
  await refresh();
  // a retroactive rule is applied after the answer, a batch at a time: follow it until it is done
  while (body.retroactive && r && r.retroactive_state === "running") {
    await new Promise((done) => setTimeout(done, 1000));
    r = (await api("/api/v1/suppressions")).find((x) => x.id === r.id);
  }
  if (body.retroactive && r) {
    $("#sup-result").textContent = `rule added; ${r.retroactive} stored alerts and records held back`;
    await loadSuppressions();
    await refresh();
  }
}

// ---- false-positive feedback ----------------------------------------------------------------------------------------
function feedbackRow(f) {
  const tr = document.createElement("tr");
  const e = f.effect;
  const effect = e ? `${num(e.before)} → ${num(e.after)}` + (e.capped ? ` <span class="badge">capped at ${num(e.cap)}</span>` : "") +
    ` <span class="muted">${e.records} records${e.stale ? `, ${e.stale} stale` : ""}</span>` : `<span class="muted">not reported yet</span>`;
  const state = f.active ? "active" : `undone by ${esc(f.removed_by || "?")}`;
  const act = ADMIN && f.active ? ` <button data-unfeedback="${esc(f.id)}">undo</button>` : "";
  tr.innerHTML = `<td data-label="created">${esc(fmtTime(f.created))}</td><td data-label="by">${esc(f.created_by)}</td>` +
    `<td data-label="device">${esc(f.device_id)}</td><td data-label="marked" class="flow">${esc(f.target)} ${esc(f.target_id)} ` +
    `<span class="muted">(${f.records} records)</span></td><td data-label="reason">${esc(f.reason)}</td>` +
    `<td data-label="threshold">${effect}</td><td data-label="training">${esc(f.training)}</td><td data-label="state">${state}${act}</td>`;
  return tr;
}

const loadFeedback = () => loadRows("/api/v1/feedback", "#feedback", feedbackRow);

async function addFeedback() {
  const body = { reason: $("#fb-reason").value.trim() };
  body[$("#fb-kind").value] = $("#fb-target").value.trim();
  const r = await post("/api/v1/feedback", body);
  $("#fb-result").textContent = `${r.records} records of ${r.device_id} marked; sent to the device`;
  await loadFeedback();
}

async function loadIncidents(more) {
  const p = filterParams();
  p.set("limit", "10");
  if (more && state.incidentCursor) p.set("cursor", state.incidentCursor);
  const newest = ask("incidents");
  const page = await api("/api/v1/incidents?" + p);
  if (!newest()) return;
  const body = $("#incidents tbody");
  if (!more) body.innerHTML = "";
  page.items.forEach((i) => body.appendChild(incidentRow(i)));
  state.incidentCursor = page.next_cursor;
  $("#incidents-more").hidden = !page.next_cursor;
  $("#incidents-none").hidden = body.children.length > 0;
}

// ---- totals and charts ---------------------------------------------------------------------------------------
async function loadTotals() {
  const p = filterParams();
  const newest = ask("totals");
  const c = await api("/api/v1/anomalies/counts?" + p);
  if (!newest()) return;
  const n = (x) => x.toLocaleString();
  $("#t-records").textContent = n(c.records);
  $("#t-open").textContent = n(c.unacknowledged_records);
  $("#t-incidents").textContent = n(c.incidents);
  $("#t-alerts").textContent = n(c.alerts);
  $("#t-devices").textContent = n(c.devices);
  const t = Date.now();
  $("#over-time").src = `/charts/alerts-over-time.svg?${p}&t=${t}`;
  $("#per-device").src = `/charts/alerts-per-device.svg?${p}&t=${t}`;
}

async function refresh() {
  showError(null);
  try {
    await Promise.all([loadTotals(), loadIncidents(false), loadAnomalies(false)]);
  } catch (e) { showError(e); }
}

let pending = null;
function refreshSoon(ms) { clearTimeout(pending); pending = setTimeout(refresh, ms); }
let totalsPending = null;
function totalsSoon() {
  if (totalsPending) return;
  totalsPending = setTimeout(() => { totalsPending = null; loadTotals().catch(showError); loadIncidents(false).catch(showError); }, 2000);
}

// ---- live ------------------------------------------------------------------------------------------------------
function stream() {
  const es = new EventSource("/api/v1/anomalies/stream");
  es.onopen = () => { $("#live").textContent = "● live"; $("#live").classList.add("on"); };
  es.onerror = () => { $("#live").textContent = "● reconnecting"; $("#live").classList.remove("on"); };
  es.addEventListener("anomaly", (ev) => {
    const a = JSON.parse(ev.data);
    if (document.getElementById("a-" + a.id)) return;
    if (matches(a)) { $("#anomalies tbody").prepend(anomalyRow(a, true)); $("#anomalies-none").hidden = true; }
    totalsSoon();
  });
}

// ---- devices and jobs ------------------------------------------------------------------------------------------
// a device's model: the one it scores with, and the last it refused (hover for why)
function modelCell(m) {
  if (!m) return "–";
  const now = m.status === "none" ? "no model" : `${esc(m.status)} ${esc(m.job)} v${m.version}`;
  const r = m.refused;
  return now + (r ? `<br><span class="refused" title="${esc(r.reason || "")}">refused ${esc(r.job)} v${r.version}: ${esc(r.reason || "")}</span>` : "");
}

async function loadSide() {
  const devices = await api("/api/v1/devices?limit=200");
  $("#devices tbody").innerHTML = devices.items.map((d) =>
    `<tr><td data-label=""><span class="dot ${d.online ? "on" : ""}" title="${d.online ? "online" : "offline"}"></span></td>` +
    `<td data-label="device">${esc(d.id)}</td><td data-label="last seen">${esc(fmtTime(d.last_seen))}</td>` +
    `<td data-label="rounds">${d.rounds}</td><td data-label="flagged">${d.alerts.toLocaleString()}</td>` +
    `<td data-label="model">${modelCell(d.model_status)}</td></tr>`).join("");
  const jobs = await api("/api/v1/jobs?limit=20");
  $("#jobs tbody").innerHTML = jobs.items.map((j) =>
    `<tr><td data-label="job"><a href="#" data-job="${esc(j.id)}">${esc(j.id)}</a></td><td data-label="type">${esc(j.type)}</td>` +
    `<td data-label="algorithm">${esc(j.algorithm)}</td><td data-label="status">${esc(j.status)}</td>` +
    `<td data-label="round">${j.current_round}</td></tr>`).join("");
  if (!state.job && jobs.items.length) state.job = jobs.items[0].id;
  if (state.job) {
    $("#conv-job").textContent = state.job;
    $("#conv-figure").hidden = false;
    $("#convergence").src = `/charts/jobs/${encodeURIComponent(state.job)}/convergence.svg?t=${Date.now()}`;
    await loadInfluence(state.job);
  }
}

// which devices the job refused, capped or kept out of the shared model; flagged: repeatedly
async function loadInfluence(job) {
  const rows = await api(`/api/v1/jobs/${encodeURIComponent(job)}/influence`);
  $("#influence-job").textContent = job;
  $("#influence-box").hidden = rows.length === 0;
  $("#influence tbody").innerHTML = rows.map((d) =>
    `<tr class="${d.flagged ? "flagged" : ""}"><td data-label="device">${esc(d.device)}${d.flagged ? ' <span class="badge" title="refused, capped or kept out in at least 3 rounds and more than half of those it answered">flagged</span>' : ""}</td>` +
    `<td data-label="refused">${d.refused}</td><td data-label="capped">${d.capped}</td>` +
    `<td data-label="kept out">${d.kept_out}</td><td data-label="rounds answered">${d.rounds_answered}</td>` +
    `<td data-label="latest reason">${esc(Object.values(d.reasons).join("; "))}</td></tr>`).join("");
}

// ---- acknowledgements --------------------------------------------------------------------------------------
function selected() { return $$("#anomalies input.sel:checked").map((c) => c.dataset.id); }

function selectionChanged() {
  if (!ADMIN) return;
  const n = selected().length;
  $("#ack-selected").disabled = $("#unack-selected").disabled = n === 0;
  $("#ack-selected").textContent = n ? `acknowledge ${n} selected` : "acknowledge selected";
  $("#unack-selected").textContent = n ? `undo ${n} selected` : "undo selected";
}

async function bulk(path, body) {
  const r = await post(path, body);
  $("#bulk-result").textContent = `${r.changed} changed`;
  $("#select-all").checked = false;
  await refresh();
}

async function onClick(ev) {
  const t = ev.target;
  const d = t.dataset;
  if (d.ack || d.undo) {
    const id = encodeURIComponent(d.ack || d.undo);
    const base = d.kind === "incident" ? "/api/v1/incidents/" : "/api/v1/anomalies/";
    const x = await post(`${base}${id}/${d.ack ? "ack" : "unack"}`, d.ack ? note() : {});
    if (d.kind === "incident") { $("#i-" + CSS.escape(x.id)).replaceWith(incidentRow(x)); loadAnomalies(false).catch(showError); }
    else $("#a-" + CSS.escape(x.id)).replaceWith(anomalyRow(x, false));
    loadTotals().catch(showError);
  } else if (d.incident) {
    ev.preventDefault();
    state.incident = d.incident;
    await loadAnomalies(false);
    $("#anomalies").scrollIntoView();
  } else if (d.fp) {
    $("#fb-kind").value = "alert";
    $("#fb-target").value = d.fp;
    $("#fb-form").scrollIntoView();
    $("#fb-reason").focus();
  } else if (d.unfeedback) {
    await api(`/api/v1/feedback/${encodeURIComponent(d.unfeedback)}`, { method: "DELETE" });
    await loadFeedback();
  } else if (d.unsuppress) {
    await api(`/api/v1/suppressions/${encodeURIComponent(d.unsuppress)}`, { method: "DELETE" });
    await loadSuppressions();
  } else if (d.flows) {
    ev.preventDefault();
    state.flows = d.flows;
    await loadRecords(false);
    $("#flows").scrollIntoView();
  } else if (t.id === "records-more") {
    await loadRecords(true);
  } else if (t.id === "all-anomalies") {
    ev.preventDefault();
    state.incident = null;
    await loadAnomalies(false);
  } else if (d.job && t.tagName === "A") {
    ev.preventDefault();
    state.job = d.job;
    await loadSide();
  } else if (t.id === "anomalies-more") await loadAnomalies(true);
  else if (t.id === "incidents-more") await loadIncidents(true);
  else if (t.id === "ack-selected") await bulk("/api/v1/anomalies/ack", Object.assign({ ids: selected() }, note()));
  else if (t.id === "unack-selected") await bulk("/api/v1/anomalies/unack", { ids: selected() });
}

document.addEventListener("click", (ev) => { onClick(ev).catch(showError); });
document.addEventListener("change", (ev) => {
  if (ev.target.id === "select-all") $$("#anomalies input.sel").forEach((c) => { c.checked = ev.target.checked; });
  if (ev.target.id === "f-period") $$(".custom").forEach((l) => { l.hidden = ev.target.value !== "custom"; });
  if (ev.target.matches("#select-all, input.sel")) selectionChanged();
});
["#f-device", "#f-score", "#f-since", "#f-until"].forEach((s) => $(s).addEventListener("input", () => refreshSoon(300)));
["#f-period", "#f-unack"].forEach((s) => $(s).addEventListener("change", () => refreshSoon(0)));

if ($("#sup-form")) $("#sup-form").addEventListener("submit", (ev) => { ev.preventDefault(); addSuppression().catch(showError); });
loadSuppressions().catch(showError);
if ($("#fb-form")) $("#fb-form").addEventListener("submit", (ev) => { ev.preventDefault(); addFeedback().catch(showError); });
loadFeedback().catch(showError);
refresh().then(stream);
loadSide().catch(showError);
setInterval(() => { loadSide().catch(showError); loadFeedback().catch(showError); }, 5000);
