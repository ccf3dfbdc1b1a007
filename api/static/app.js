// FedSentry dashboard: anomalies arrive over server-sent events; devices and jobs refresh every 5 s.
"use strict";
const $ = (s) => document.querySelector(s);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const fmtTime = (t) => new Date(t + "Z").toLocaleString();
// a stored score that is not a finite number is served as null
const num = (x) => (typeof x === "number" ? x.toPrecision(4) : "–");
const ROLE = document.body.dataset.role;
let selectedJob = null;

function filters() {
  return { device: $("#f-device").value.trim(), score: parseFloat($("#f-score").value), unack: $("#f-unack").checked };
}

function visible(a) {
  const f = filters();
  return (!f.device || a.device_id === f.device) && (isNaN(f.score) || (a.score !== null && a.score >= f.score)) && (!f.unack || !a.acknowledged);
}

function row(a, fresh) {
  const tr = document.createElement("tr");
  tr.id = "a-" + a.id;
  tr.dataset.anomaly = JSON.stringify(a);
  if (fresh) tr.className = "new";
  if (a.acknowledged) tr.classList.add("ack");
  // each feature's share of the anomaly, with the observed value against the value the model expected
  const why = (a.explanation || []).map((e) => `${esc(e.feature)} ${(100 * e.share).toFixed(0)}%` +
    ` (${num(e.value)} vs ${num(e.expected)})`).join(", ");
  const f = a.flow || {};
  const ends = f["id.orig_h"] ? `${f["id.orig_h"]}:${f["id.orig_p"] || ""} → ${f["id.resp_h"] || ""}:${f["id.resp_p"] || ""}` : "";
  const flow = [f.uid, ends, [f.proto, f.service].filter(Boolean).join("/"), f.row ? `row ${f.row}` : ""]
    .filter(Boolean).map(esc).join(" ");
  const ack = a.acknowledged ? "acknowledged"
    : (ROLE === "admin" ? `<button data-ack="${esc(a.id)}">acknowledge</button>` : "");
  tr.innerHTML = `<td>${esc(fmtTime(a.ts))}</td><td>${esc(a.device_id)}</td><td>${num(a.score)}` +
    `${a.count > 1 ? " ×" + a.count : ""}</td><td>${num(a.threshold)}</td>` +
    `<td>${flow ? `<span class="flow">${flow}</span><br>` : ""}${why}</td><td>${ack}</td>`;
  tr.hidden = !visible(a);
  return tr;
}

async function api(path, opts) {
  const r = await fetch(path, Object.assign({ credentials: "same-origin" }, opts || {}));
  if (r.status === 401) { location.href = "/login"; throw new Error("signed out"); }
  if (!r.ok) throw new Error(`${path}: ${r.status}`);
  return r.json();
}

async function loadAnomalies() {
  const page = await api("/api/v1/anomalies?limit=100");
  const body = $("#anomalies tbody");
  body.innerHTML = "";
  page.items.forEach((a) => body.appendChild(row(a, false)));
}

function applyFilters() {
  document.querySelectorAll("#anomalies tbody tr").forEach((tr) => { tr.hidden = !visible(JSON.parse(tr.dataset.anomaly)); });
}

function stream() {
  const es = new EventSource("/api/v1/anomalies/stream");
  es.onopen = () => { $("#live").textContent = "● live"; $("#live").classList.add("on"); };
  es.onerror = () => { $("#live").textContent = "● reconnecting"; $("#live").classList.remove("on"); };
  es.addEventListener("anomaly", (ev) => {
    const a = JSON.parse(ev.data);
    if (document.getElementById("a-" + a.id)) return;
    $("#anomalies tbody").prepend(row(a, true));
    $("#per-device").src = "/charts/alerts-per-device.svg?t=" + Date.now();
  });
}

// a device's model: the one it scores with, and the last it refused (hover for why)
function modelCell(m) {
  if (!m) return "–";
  const now = m.status === "none" ? "no model" : `${esc(m.status)} ${esc(m.job)} v${m.version}`;
  const r = m.refused;
  return now + (r ? `<br><span class="refused" title="${esc(r.reason || "")}">refused ${esc(r.job)} v${r.version}</span>` : "");
}

async function loadSide() {
  const devices = await api("/api/v1/devices?limit=200");
  $("#devices tbody").innerHTML = devices.items.map((d) =>
    `<tr><td><span class="dot ${d.online ? "on" : ""}" title="${d.online ? "online" : "offline"}"></span></td>` +
    `<td>${esc(d.id)}</td><td>${esc(fmtTime(d.last_seen))}</td><td>${d.rounds}</td><td>${d.alerts}</td>` +
    `<td>${modelCell(d.model_status)}</td></tr>`).join("");
  const jobs = await api("/api/v1/jobs?limit=20");
  $("#jobs tbody").innerHTML = jobs.items.map((j) =>
    `<tr data-job="${esc(j.id)}"><td><a href="#" data-job="${esc(j.id)}">${esc(j.id)}</a></td><td>${esc(j.algorithm)}</td>` +
    `<td>${esc(j.status)}</td><td>${j.current_round}</td></tr>`).join("");
  if (!selectedJob && jobs.items.length) selectedJob = jobs.items[0].id;
  if (selectedJob) $("#convergence").src = `/charts/jobs/${encodeURIComponent(selectedJob)}/convergence.svg?t=${Date.now()}`;
}

document.addEventListener("click", async (ev) => {
  const id = ev.target.dataset.ack;
  if (id) {
    const a = await api(`/api/v1/anomalies/${encodeURIComponent(id)}/ack`, { method: "POST" });
    document.getElementById("a-" + a.id).replaceWith(row(a, false));
  }
  if (ev.target.dataset.job && ev.target.tagName === "A") {
    ev.preventDefault();
    selectedJob = ev.target.dataset.job;
    loadSide();
  }
});
["#f-device", "#f-score", "#f-unack"].forEach((s) => $(s).addEventListener("input", applyFilters));

loadAnomalies().then(stream);
loadSide();
setInterval(loadSide, 5000);
