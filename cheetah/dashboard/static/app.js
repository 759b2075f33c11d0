// cheetah dashboard: plain JavaScript over the /api routes; charts are hand-drawn SVG.
// The bearer token comes from the URL's fragment (#token=...), which the browser never
// sends to a server; every /api request carries it.
"use strict";

const token = new URLSearchParams(location.hash.slice(1)).get("token");
const headers = token ? { Authorization: `Bearer ${token}` } : {};
const SVG = "http://www.w3.org/2000/svg";
let currentRun = null;

async function api(path, options = {}) {
  const resp = await fetch(path, { ...options, headers: { ...headers, ...(options.headers || {}) } });
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error(body.detail || `${resp.status} ${resp.statusText}`);
  return body;
}

function el(tag, attrs = {}, text = "") {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text !== "") node.textContent = text;
  return node;
}

function fmt(x, digits = 3) {
  return x === null || x === undefined ? "-" : Number(x).toFixed(digits);
}

function setStatus(text) {
  document.getElementById("status").textContent = text;
}

// -- tabs ---------------------------------------------------------------------------------
for (const button of document.querySelectorAll("nav button")) {
  button.addEventListener("click", () => {
    for (const b of document.querySelectorAll("nav button")) b.classList.toggle("active", b === button);
    for (const s of document.querySelectorAll(".tab")) s.classList.toggle("hidden", s.id !== `tab-${button.dataset.tab}`);
    refresh();
  });
}

// -- runs ---------------------------------------------------------------------------------
async function loadRuns() {
  const runs = await api("/api/runs");
  const list = document.getElementById("runs-list");
  list.replaceChildren();
  for (const r of runs) {
    const li = el("li", { "data-run": r.name }, `${r.name}  (${r.rollouts} rollouts, ${r.steps} steps)`);
    if (r.name === currentRun) li.classList.add("active");
    li.addEventListener("click", () => { currentRun = r.name; loadRuns(); loadRun(r.name); });
    list.append(li);
  }
  if (!currentRun && runs.length) { currentRun = runs[0].name; loadRun(currentRun); loadRuns(); }
}

async function loadRun(name) {
  const [summary, metrics, rollouts] = await Promise.all([
    api(`/api/runs/${name}`), api(`/api/runs/${name}/metrics`), api(`/api/runs/${name}/rollouts`),
  ]);
  document.getElementById("run-title").textContent = `Run ${name}`;
  const stages = (summary.stages || []).map(
    (s) => `${s.name} ${fmt(s.pass_rate)} [${fmt(s.ci95[0])}, ${fmt(s.ci95[1])}] of ${s.tasks}`,
  );
  const heldOut = stages.length
    ? `held-out pass rate by stage: ${stages.join("; ")}` +
      (summary.mcnemar_p == null ? "" : ` (McNemar p, last vs base: ${summary.mcnemar_p.toPrecision(2)})`)
    : `held-out pass rate before ${fmt(summary.pass_rate_before)}, after ${fmt(summary.pass_rate_after)}`;
  document.getElementById("run-summary").textContent =
    `${heldOut}; mean reward ${fmt(summary.mean_reward)}; ${summary.rollouts} rollouts`;
  fillTimeBreakdown(summary.time_breakdown);
  drawCurves(metrics);
  drawLearning(summary, metrics);
  drawTimeline(rollouts);
  fillRollouts(name, rollouts);
}

function drawCurves(metrics) {
  const svg = document.getElementById("curves");
  svg.replaceChildren();
  const names = ["reward_mean", "pass_rate", "call_success"].filter((n) => metrics[n]);
  const colours = { reward_mean: "#e8a33d", pass_rate: "#2e9b4f", call_success: "#3d7be8" };
  const W = 640, H = 220, pad = 30;
  const steps = names.flatMap((n) => metrics[n].map((p) => p[0]));
  const maxStep = Math.max(1, ...steps);
  const x = (s) => pad + ((W - 2 * pad) * (s - 1)) / Math.max(1, maxStep - 1);
  const y = (v) => H - pad - (H - 2 * pad) * Math.max(0, Math.min(1, v));
  svg.append(el("svg:line", { x1: pad, y1: H - pad, x2: W - pad, y2: H - pad, stroke: "#999" }));
  svg.append(el("svg:text", { x: 2, y: y(1) + 4, "font-size": 10 }, "1.0"));
  svg.append(el("svg:text", { x: 2, y: y(0) + 4, "font-size": 10 }, "0.0"));
  names.forEach((n, i) => {
    const pts = metrics[n].map(([s, v]) => `${x(s)},${y(v)}`).join(" ");
    svg.append(el("svg:polyline", { points: pts, fill: "none", stroke: colours[n], "stroke-width": 2, class: "curve", "data-metric": n }));
    for (const [s, v] of metrics[n]) svg.append(el("svg:circle", { cx: x(s), cy: y(v), r: 3, fill: colours[n] }));
    svg.append(el("svg:text", { x: W - 150, y: 14 + 14 * i, fill: colours[n], "font-size": 11 }, n));
  });
  svg.append(el("svg:text", { x: W / 2, y: H - 6, "font-size": 10 }, `step (1..${maxStep})`));
}

// Wall seconds per phase of the run (rl/timing.py), the slowest first; "other" is the rest.
function fillTimeBreakdown(b) {
  const body = document.querySelector("#time-breakdown tbody");
  body.replaceChildren();
  for (const p of (b && b.phases) || []) {
    const tr = document.createElement("tr");
    for (const v of [p.phase, p.seconds.toFixed(1), `${(100 * p.share).toFixed(1)}%`]) {
      const td = document.createElement("td");
      td.textContent = v;
      tr.append(td);
    }
    body.append(tr);
  }
}

// The summary's learning curve once the run is done; while it runs, the held-out points
// stored so far (train.eval_every), by step.
function learningPoints(summary, metrics) {
  if (summary.learning_curve && summary.learning_curve.length) return summary.learning_curve;
  const turns = new Map((metrics.heldout_turns_per_task || []).map(([s, v]) => [s, v]));
  return (metrics.heldout_pass_rate || []).map(([s, v]) => ({ step: s, rollouts: s, pass_rate: v, turns_per_task: turns.get(s) }));
}

function drawLearning(summary, metrics) {
  const svg = document.getElementById("learning");
  svg.replaceChildren();
  const pts = learningPoints(summary, metrics);
  if (!pts.length) {
    svg.append(el("svg:text", { x: 10, y: 20, "font-size": 12, class: "empty" }, "no held-out points during RL (train.eval_every = 0)"));
    return;
  }
  const W = 640, H = 200, pad = 30;
  const maxX = Math.max(1, ...pts.map((p) => p.rollouts));
  const x = (r) => pad + ((W - 2 * pad) * r) / maxX;
  const y = (v) => H - pad - (H - 2 * pad) * Math.max(0, Math.min(1, v));
  svg.append(el("svg:line", { x1: pad, y1: H - pad, x2: W - pad, y2: H - pad, stroke: "#999" }));
  svg.append(el("svg:polyline", { points: pts.map((p) => `${x(p.rollouts)},${y(p.pass_rate)}`).join(" "), fill: "none", stroke: "#2e9b4f", "stroke-width": 2, class: "learning" }));
  for (const p of pts) {
    svg.append(el("svg:circle", { cx: x(p.rollouts), cy: y(p.pass_rate), r: 3, fill: "#2e9b4f", class: "point" }));
    const label = `${fmt(p.pass_rate)}` + (p.turns_per_task == null ? "" : ` / ${p.turns_per_task.toFixed(2)} turns`);
    svg.append(el("svg:text", { x: x(p.rollouts) - 20, y: y(p.pass_rate) - 8, "font-size": 10 }, label));
  }
  svg.append(el("svg:text", { x: W / 2 - 40, y: H - 6, "font-size": 10 }, `rollouts trained on (0..${maxX})`));
}

function drawTimeline(rollouts) {
  const svg = document.getElementById("timeline");
  svg.replaceChildren();
  if (!rollouts.length) return;
  const t0 = Math.min(...rollouts.map((r) => r.start));
  const t1 = Math.max(...rollouts.map((r) => r.end));
  const lanes = 1 + Math.max(...rollouts.map((r) => r.lane));
  const W = 900, laneH = Math.max(4, Math.min(16, 140 / lanes));
  svg.setAttribute("height", 20 + lanes * laneH);
  const x = (t) => 10 + ((W - 20) * (t - t0)) / Math.max(1e-9, t1 - t0);
  for (const r of rollouts) {
    const rect = el("svg:rect", {
      x: x(r.start), y: 4 + r.lane * laneH, width: Math.max(1, x(r.end) - x(r.start)), height: laneH - 2,
      fill: r.correct ? "#2e9b4f" : r.reward > 0 ? "#9bd3a9" : "#d9b38c", class: "rollout", "data-rollout": r.rollout_id,
    });
    rect.append(el("svg:title", {}, `#${r.rollout_id} ${r.task_id} reward ${fmt(r.reward)} (${fmt(r.end - r.start, 1)} s)`));
    rect.addEventListener("click", () => showTrajectory(currentRun, r.rollout_id));
    svg.append(rect);
  }
  svg.append(el("svg:text", { x: 10, y: 16 + lanes * laneH, "font-size": 10 }, `${fmt(t1 - t0, 0)} s, ${lanes} lanes`));
}

function fillRollouts(name, rollouts) {
  const body = document.querySelector("#rollouts tbody");
  body.replaceChildren();
  for (const r of [...rollouts].reverse().slice(0, 200)) {
    const tr = el("tr", { class: "clickable", "data-rollout": r.rollout_id });
    for (const v of [r.rollout_id, r.task_id, fmt(r.reward), r.correct ? "yes" : "no", r.turns, r.tool_calls, r.tool_errors, r.versions.join(",")]) {
      tr.append(el("td", {}, String(v)));
    }
    tr.addEventListener("click", () => showTrajectory(name, r.rollout_id));
    body.append(tr);
  }
}

async function showTrajectory(name, rolloutId) {
  const t = await api(`/api/runs/${name}/rollouts/${rolloutId}`);
  renderTrajectory(document.getElementById("trajectory"), t, `rollout #${rolloutId}`);
}

function renderTrajectory(box, t, title) {
  box.replaceChildren(el("h4", {}, `${title}: ${t.task_id || t.query || ""} — stop ${t.stop_reason}, reward ${fmt(t.reward)}`));
  for (const m of t.messages || []) box.append(el("div", { class: `msg ${m.role}` }, `${m.role}: ${m.content}`));
  if (t.grade) box.append(el("pre", {}, `grade: correct=${t.grade.correct} conventions=${fmt(t.grade.conventions)}\n${t.grade.diff || ""}`));
}

// -- fleet --------------------------------------------------------------------------------
async function loadFleet() {
  const servers = await api("/api/fleet");
  const body = document.querySelector("#fleet tbody");
  body.replaceChildren();
  if (!servers.length) {
    const tr = el("tr");
    tr.append(el("td", { colspan: 8 }, "no env servers configured (--env-url)"));
    body.append(tr);
  }
  for (const s of servers) {
    const st = s.stats || {};
    const tr = el("tr", { "data-server": s.url });
    for (const v of [s.url, s.healthy ? "yes" : `no: ${s.error}`, st.sessions, st.capacity, st.sessions_created, fmt(st.load_avg_1m, 2), fmt(st.memory_available_mb, 0), st.isolation]) {
      tr.append(el("td", {}, v === undefined ? "-" : String(v)));
    }
    body.append(tr);
  }
}

// -- jobs ---------------------------------------------------------------------------------
async function loadJobs() {
  const jobs = await api("/api/jobs");
  const body = document.querySelector("#jobs tbody");
  body.replaceChildren();
  for (const j of jobs) {
    const tr = el("tr", { class: "clickable", "data-job": j.id });
    for (const v of [j.id, j.status, j.query, j.repo, j.model, j.exit_code ?? "-"]) tr.append(el("td", {}, String(v)));
    const cell = el("td");
    if (j.status === "running") {
      const b = el("button", {}, "cancel");
      b.addEventListener("click", async (e) => { e.stopPropagation(); await api(`/api/jobs/${j.id}/cancel`, { method: "POST" }); loadJobs(); });
      cell.append(b);
    }
    tr.append(cell);
    tr.addEventListener("click", () => showJob(j.id));
    body.append(tr);
  }
}

async function showJob(id) {
  const j = await api(`/api/jobs/${id}`);
  document.getElementById("job-log").textContent = `job ${id} (${j.status})\n\n${j.log}`;
}

document.getElementById("job-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const data = Object.fromEntries(new FormData(event.target));
  data.max_turns = Number(data.max_turns);
  const error = document.getElementById("job-error");
  try {
    await api("/api/jobs", { method: "POST", body: JSON.stringify(data), headers: { "Content-Type": "application/json" } });
    error.textContent = "";
  } catch (e) {
    error.textContent = e.message;
  }
  loadJobs();
});

// -- polling ------------------------------------------------------------------------------
async function refresh() {
  const tab = document.querySelector("nav button.active").dataset.tab;
  try {
    if (tab === "runs") { await loadRuns(); if (currentRun) await loadRun(currentRun); }
    if (tab === "fleet") await loadFleet();
    if (tab === "jobs") await loadJobs();
    setStatus(`updated ${new Date().toLocaleTimeString()}`);
  } catch (e) {
    setStatus(`error: ${e.message}`);
  }
}
refresh();
setInterval(refresh, 5000);
