"use strict";
// The echomq dashboard page: polls the app's JSON API (relative paths, so the app can be
// mounted anywhere) and draws its charts as inline SVG. State changes carry the page's CSRF
// token in a header, which a page from another site cannot send. The live list of the queues'
// events, and the polling that refreshes the page, are in live.js (loaded after this script).

const COLORS = ["#3864d8", "#d8872c", "#2c9c6a", "#a23bc4", "#c43b52", "#3aa6b9", "#7a6a2e"];
const SVG = "http://www.w3.org/2000/svg";
const COLUMN = { pending: 1, active: 2, delayed: 3, dead: 4, in_lanes: 5, done: 6, failed: 7 };
const colorOf = {};
const deadFilter = {};  // each queue's dead-job filter, kept across refreshes
const MAX_LANES_SHOWN = 25;
let serverSkewMs = 0;  // server clock minus this browser's: ages are told by the server's clock

// The API's calls, links and times are pages.js's (loaded first), shared with the queue and
// job pages.
const { getJSON, post, q, age, moment } = Pages;

// A queue's colour comes from its name alone (FNV-1a), so it is the same on every load
// whatever other queues there are.
function color(name) {
  if (!(name in colorOf)) {
    let hash = 0x811c9dc5;
    for (const char of name) hash = Math.imul(hash ^ char.codePointAt(0), 0x01000193) >>> 0;
    colorOf[name] = COLORS[hash % COLORS.length];
  }
  return colorOf[name];
}

function rate(value) {
  if (value === null || value === undefined) return "—";
  return (value > 0 ? "+" : "") + value;
}

function cell(row, text, cls) {
  const td = row.insertCell();
  td.textContent = text;
  if (cls) td.className = cls;
  return td;
}

// A cell holding a job's id as a link that opens the job's view.
function jobCell(row, queue, id) {
  const link = document.createElement("a");
  link.className = "job";
  link.textContent = id;
  link.onclick = () => showJob(queue, id);
  const td = row.insertCell();
  td.className = "text";
  td.appendChild(link);
  return td;
}

function el(tag, attrs, parent) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
  if (parent) parent.appendChild(node);
  return node;
}

function niceMax(value) {
  if (value <= 4) return 4;
  const step = Math.pow(10, Math.floor(Math.log10(value)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * step >= value) return m * step;
  return 10 * step;
}

function clock(ms, seconds) {
  const parts = { hour: "2-digit", minute: "2-digit", ...(seconds ? { second: "2-digit" } : {}) };
  return new Date(ms).toLocaleTimeString([], parts);
}

// One line per queue over the samples kept (the last hour at most), with a y axis (depth), a
// time axis and a legend.
function drawChart(svg, history, column, unit = "jobs") {
  svg.replaceChildren();
  const W = 460, H = 220, left = 46, right = 22, top = 10, bottom = 58;
  const names = Object.keys(history.series).sort();
  const rows = names.flatMap((n) => history.series[n]);
  // The time axis spans the samples there are (up to the hour kept), a minute at least, so
  // a fresh dashboard's samples fill the chart rather than its right edge.
  const end = rows.length ? Math.max(...rows.map((r) => r[0])) : Date.now();
  const first = rows.length ? Math.min(...rows.map((r) => r[0])) : end;
  const start = Math.min(first, end - 60 * 1000);
  const peak = niceMax(Math.max(0, ...rows.map((r) => r[column])));
  const x = (t) => left + ((t - start) / (end - start)) * (W - left - right);
  const y = (v) => H - bottom - (v / peak) * (H - top - bottom);
  for (let i = 0; i <= 4; i++) {
    const v = (peak / 4) * i;
    el("line", { x1: left, x2: W - right, y1: y(v), y2: y(v), class: "grid" }, svg);
    el("text", { x: left - 6, y: y(v) + 4, "text-anchor": "end" }, svg).textContent =
      Number.isInteger(v) ? v : v.toFixed(1);
  }
  for (let i = 0; i <= 4; i++) {
    const t = start + (i * (end - start)) / 4;
    el("line", { x1: x(t), x2: x(t), y1: H - bottom, y2: H - bottom + 4, class: "axis" }, svg);
    const anchor = i === 0 ? "start" : i === 4 ? "end" : "middle";
    el("text", { x: x(t), y: H - bottom + 16, "text-anchor": anchor }, svg).textContent =
      clock(t, end - start < 10 * 60 * 1000);
  }
  el("line", { x1: left, x2: left, y1: top, y2: H - bottom, class: "axis" }, svg);
  el("line", { x1: left, x2: W - right, y1: H - bottom, y2: H - bottom, class: "axis" }, svg);
  el("text", { x: 12, y: (H - bottom + top) / 2, transform: `rotate(-90 12 ${(H - bottom + top) / 2})`,
    "text-anchor": "middle" }, svg).textContent = unit;
  names.forEach((name, i) => {
    const points = history.series[name].map((r) => `${x(r[0]).toFixed(1)},${y(r[column]).toFixed(1)}`);
    const line = el("polyline", { fill: "none", stroke: color(name), "stroke-width": 2,
      points: points.join(" ") }, svg);
    line.dataset.queue = name;
    const last = history.series[name][history.series[name].length - 1];
    if (last) el("circle", { cx: x(last[0]), cy: y(last[column]), r: 3, fill: color(name) }, svg);
    const lx = left + (i % 4) * 100, ly = H - 22 + Math.floor(i / 4) * 14;
    el("rect", { x: lx, y: ly - 8, width: 10, height: 10, fill: color(name) }, svg);
    const label = el("text", { x: lx + 14, y: ly + 1, class: "legend" }, svg);
    label.textContent = name.length > 12 ? name.slice(0, 11) + "…" : name;
  });
  if (!names.length) {
    el("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, svg).textContent = "no samples yet";
  }
}

function renderQueues(queues) {
  const body = document.querySelector("#queues tbody");
  body.replaceChildren();
  for (const s of queues) {
    const inLanes = Object.values(s.lanes).reduce((a, b) => a + b, 0);
    const row = body.insertRow();
    row.dataset.queue = s.name;
    [s.paused ? `${s.name} (paused)` : s.name, s.pending, s.active, s.running, s.delayed, s.dead,
      inLanes, s.waiting, age(s.oldest_pending_age_ms), rate(s.rates.backlog_per_min),
      rate(s.rates.dead_per_min)].forEach((v) => cell(row, v));
    // The queue's name opens its page: its jobs by state (queue.js).
    const page = document.createElement("a");
    page.href = `queues/${q(s.name)}`;
    page.textContent = row.cells[0].textContent;
    page.dataset.queuePage = s.name;
    row.cells[0].replaceChildren(page);
    // A queue whose jobs wait for no worker stands out.
    const alone = !s.workers && s.pending + inLanes > 0;
    cell(row, alone ? "none" : s.workers, alone ? "alarm" : "").dataset.workers = s.name;
    row.insertCell().appendChild(pauseButton(s.name, null, s.paused));
    const limits = cell(row, limitsText(s.limits));
    limits.dataset.limitsOf = s.name;
    limits.appendChild(limitsButton(s.name, s.limits));
  }
  if (!queues.length) cell(body.insertRow(), "no queues yet", "empty").colSpan = 14;
}

// A queue's queue-wide limits, shown ("none" when it has none) and set (each a number, or
// "none" for no limit; the server refuses anything else).
function limitsText(l) {
  const parts = [];
  if (l.concurrency !== null) parts.push(`${l.concurrency} at once`);
  if (l.rate !== null) parts.push(`${l.rate} per ${l.window_ms} ms`);
  return parts.length ? parts.join(", ") : "none";
}

function limitsButton(queue, l) {
  const shown = (v) => (v === null ? "none" : String(v));
  const value = (w) => (w === "none" ? null : /^[0-9]+$/.test(w) ? Number(w) : w);
  const control = button("set", () => {
    const answer = prompt(`Limits of ${queue}: concurrency rate window_ms (none: no limit)`,
      `${shown(l.concurrency)} ${shown(l.rate)} ${l.window_ms}`);
    if (answer === null) return;
    const [concurrency, rate, windowMs] = answer.trim().split(/\s+/).map(value);
    act("limits", () => post(`api/queues/${q(queue)}/limits`,
      { concurrency, rate, window_ms: windowMs === undefined ? null : windowMs }));
  });
  control.dataset.limits = queue;
  return control;
}

// What each live worker runs and since when, by the server's clock.
function renderWorkers(answer) {
  const body = document.querySelector("#workers tbody");
  body.replaceChildren();
  const now = answer.server_time_ms;
  for (const w of answer.workers) {
    const row = body.insertRow();
    row.dataset.worker = w.key;
    // In hand, the job and how long it had run: as at the last beat (the job may have ended
    // since), never the time since then.
    [w.host, w.pid, w.queues.join(", ") || w.queue, w.wire, age(Math.max(0, now - w.started_ms)),
      w.running, w.job || (w.parked ? "parked" : "idle"), age(w.job_ran_ms), w.done, w.failed,
      `${age(Math.max(0, now - w.beat_ms))} ago`].forEach((v) => cell(row, v));
  }
  if (!answer.workers.length) cell(body.insertRow(), "no live workers", "empty").colSpan = 11;
}

function renderLanes(queues) {
  const lanes = document.getElementById("lanes");
  lanes.replaceChildren();
  for (const s of queues) {
    const paused = Object.entries(s.paused_lanes || {}).sort((a, b) => b[1] - a[1]);
    const all = paused.concat(Object.entries(s.lanes).sort((a, b) => b[1] - a[1]));
    if (!all.length) continue;
    const entries = all.slice(0, MAX_LANES_SHOWN);
    const card = document.createElement("div");
    card.className = "card";
    card.dataset.queue = s.name;
    const title = document.createElement("strong");
    title.textContent = `${s.name}: ${all.length} lane(s)` +
      (all.length > entries.length ? `, the ${entries.length} deepest shown` : "");
    const table = document.createElement("table");
    const head = table.createTHead().insertRow();
    cell(head, "lane", "text"); cell(head, "depth"); cell(head, "");
    const body = table.createTBody();
    for (const [group, depth] of entries) {
      const row = body.insertRow();
      row.dataset.lane = group;
      const isPaused = group in (s.paused_lanes || {});
      cell(row, isPaused ? `${group} (paused)` : group); cell(row, depth);
      row.insertCell().appendChild(pauseButton(s.name, group, isPaused));
    }
    card.append(title, table);
    lanes.appendChild(card);
  }
  if (!lanes.children.length) lanes.textContent = "no lanes in use";
}

async function act(what, run) {
  try {
    const answer = await run();
    document.getElementById("status").textContent = `${what}: ${JSON.stringify(answer)}`;
  } catch (error) {
    document.getElementById("status").textContent = `${what} failed: ${error.message}`;
  }
  await refresh();
}

function requeue(queue, ids, ask) {
  if (ask && !confirm(`Requeue ${ids.length} dead job(s) of ${queue}?`)) return;
  act("requeue", () => post(`api/queues/${q(queue)}/dead/requeue`, { ids }));
}

// Pause or resume a queue (lane null) or one of its lanes.
function pauseButton(queue, lane, paused) {
  const what = paused ? "resume" : "pause";
  const control = button(what, () => act(what, () => post(`api/queues/${q(queue)}/${what}`,
    lane === null ? {} : { lane })));
  control.dataset[what] = lane === null ? queue : `${queue}/${lane}`;
  return control;
}

function purge(queue, count) {
  if (!confirm(`Purge (delete) ${count} dead job(s) of ${queue}? This cannot be undone.`)) return;
  act("purge", () => post(`api/queues/${q(queue)}/dead/purge`, { limit: count }));
}

// Cancel one job: a waiting one never runs, a running one is told at its next heartbeat.
function cancelJob(queue, id) {
  if (!confirm(`Cancel job ${id} of ${queue}?`)) return;
  act("cancel", () => post(`api/queues/${q(queue)}/jobs/${q(id)}/cancel`, {}))
    .then(() => showJob(queue, id));
}

function button(text, onclick, cls) {
  const b = document.createElement("button");
  b.type = "button";
  b.textContent = text;
  b.onclick = onclick;
  if (cls) b.className = cls;
  return b;
}

async function renderDead(queue, total) {
  const jobs = await getJSON(`api/queues/${q(queue)}/dead?limit=100`);
  if (!jobs.length) return null;
  const card = document.createElement("div");
  card.className = "card";
  card.dataset.queue = queue;
  const title = document.createElement("strong");
  title.textContent = `${queue}: ${total} dead` + (total > jobs.length ? ` (oldest ${jobs.length} shown)` : "");
  const table = document.createElement("table");
  const head = table.createTHead().insertRow();
  [["", ""], ["job", "text"], ["task", "text"], ["attempts", ""], ["lane", "text"],
    ["died", ""], ["last error", "text"], ["", ""]].forEach(([h, cls]) => cell(head, h, cls));
  const body = table.createTBody();
  const now = Date.now() + serverSkewMs;
  for (const job of jobs) {
    const row = body.insertRow();
    row.dataset.job = job.id;
    const box = document.createElement("input");
    box.type = "checkbox";
    box.value = job.id;
    row.insertCell().appendChild(box);
    jobCell(row, queue, job.id);
    cell(row, job.task || "—", "text");
    cell(row, job.attempts);
    cell(row, job.lane || "—", "text");
    cell(row, age(Math.max(0, now - job.died_at_ms)) + " ago");
    cell(row, job.error.split("\n")[0], "error");
    const one = button("requeue", () => requeue(queue, [job.id], false));
    one.dataset.requeue = job.id;
    row.insertCell().appendChild(one);
  }
  const actions = document.createElement("div");
  actions.className = "actions";
  const filter = document.createElement("input");
  filter.type = "search";
  filter.placeholder = "filter: task, lane or error";
  filter.dataset.filter = queue;
  filter.value = deadFilter[queue] || "";
  const apply = () => {
    deadFilter[queue] = filter.value;
    const wanted = filter.value.toLowerCase();
    jobs.forEach((job, i) => {
      const said = [job.id, job.task || "", job.lane || "", job.error].join("\n").toLowerCase();
      body.rows[i].hidden = Boolean(wanted) && !said.includes(wanted);
    });
  };
  filter.oninput = apply;
  const shownJobs = () => jobs.filter((_, i) => !body.rows[i].hidden);
  const selected = () => [...body.querySelectorAll("tr:not([hidden]) input:checked")].map((b) => b.value);
  actions.append(
    button("requeue selected", () => { const ids = selected(); if (ids.length) requeue(queue, ids, true); }),
    button("requeue all shown", () => requeue(queue, shownJobs().map((j) => j.id), true)),
    button(`purge all ${total} dead`, () => purge(queue, total), "danger"));
  actions.lastChild.dataset.purge = queue;
  actions.children[1].dataset.requeueAll = queue;
  actions.prepend(filter);
  card.append(title, actions, table);
  apply();
  return card;
}

const PRIORITY_BAND = 2 ** 45;

async function showJob(queue, id) {
  const job = await getJSON(`api/queues/${q(queue)}/jobs/${q(id)}`);
  document.getElementById("job-id").textContent = `${id} (${queue})`;
  document.getElementById("job-page").href = `queues/${q(queue)}/jobs/${q(id)}`;
  const fields = document.getElementById("job-fields");
  fields.replaceChildren();
  const now = Date.now() + serverSkewMs;
  const means = { pending: "enqueued", active: "lease ends", delayed: "due", dead: "died",
    waiting: "waiting since" };
  const shown = { state: job.state };
  if (job.score !== null && job.state === "pending") {
    // A pending score is its priority's band and its admission time (echomq.engine.priority).
    const priority = -Math.floor(job.score / PRIORITY_BAND);
    const label = priority ? `enqueued (priority ${priority})` : "enqueued";
    shown[label] = moment(job.score + priority * PRIORITY_BAND, now);
  } else if (job.score !== null) shown[means[job.state] || "score"] = moment(job.score, now);
  shown["expires in"] = job.expires_in_ms === null ? "never" : age(job.expires_in_ms);
  for (const [key, value] of Object.entries(job.fields)) {
    shown[key] = key === "enqueued_at" && /^\d+$/.test(value) ? moment(Number(value), now) : value;
  }
  for (const [key, value] of Object.entries(shown)) {
    const dt = document.createElement("dt");
    dt.textContent = key;
    const dd = document.createElement("dd");
    dd.textContent = value === null ? "—" : value;
    fields.append(dt, dd);
  }
  document.getElementById("job-progress").textContent = job.progress === null ? "—" : job.progress;
  Pages.showWorkflow(queue, id);
  const cancel = document.getElementById("job-cancel");
  cancel.dataset.cancel = id;
  cancel.hidden = !["pending", "delayed", "active", "waiting"].includes(job.state);
  cancel.onclick = () => cancelJob(queue, id);
  document.getElementById("job-error").textContent = job.error || "—";
  document.getElementById("job-traceback").textContent = job.traceback || "—";
  document.getElementById("job-payload-size").textContent =
    `(${job.payload_size} bytes${job.payload_truncated ? ", preview" : ""})`;
  document.getElementById("job-payload").textContent = job.payload_preview;
  // The detail opens over the page, where the reader is, not below the list.
  const panel = document.getElementById("job");
  panel.hidden = false;
  panel.scrollTop = 0;
}

// How fast a counter of the workers grew between each two samples, per minute (a drop, when a
// worker left, counts as no growth).
function perMinute(history, column) {
  const rates = { series: {} };
  for (const [name, rows] of Object.entries(history.series)) {
    rates.series[name] = rows.slice(1).map((row, i) => {
      const minutes = Math.max(row[0] - rows[i][0], 1) / 60000;
      return [row[0], Math.max(0, row[column] - rows[i][column]) / minutes];
    });
  }
  return rates;
}

let lastRefresh = 0;

async function refresh() {
  lastRefresh = Date.now();
  try {
    const [queues, history, workers] = await Promise.all(
      [getJSON("api/queues"), getJSON("api/history"), getJSON("api/workers")]);
    EchoMQ.follow(queues);
    queues.forEach((s) => color(s.name));
    if (queues.length) serverSkewMs = queues[0].server_time_ms - Date.now();
    renderQueues(queues);
    renderLanes(queues);
    renderWorkers(workers);
    // The backlog counts lanes too: draw pending + in_lanes.
    const backlog = { series: {} };
    for (const [name, rows] of Object.entries(history.series)) {
      backlog.series[name] = rows.map((r) => [r[0], r[1] + r[5]]);
    }
    drawChart(document.getElementById("chart-backlog"), backlog, 1);
    drawChart(document.getElementById("chart-active"), history, COLUMN.active);
    drawChart(document.getElementById("chart-dead"), history, COLUMN.dead);
    drawChart(document.getElementById("chart-done"), perMinute(history, COLUMN.done), 1, "per min");
    drawChart(document.getElementById("chart-failed"), perMinute(history, COLUMN.failed), 1,
      "per min");
    const cards = await Promise.all(queues.filter((s) => s.dead).map((s) => renderDead(s.name, s.dead)));
    const dead = document.getElementById("dead");
    dead.replaceChildren(...cards.filter(Boolean));
    if (!dead.children.length) dead.textContent = "none";
    document.getElementById("status").dataset.updated = "1";
    document.getElementById("status").textContent =
      `${queues.length} queue(s), updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    document.getElementById("status").textContent = `cannot load: ${error.message}`;
  }
}

document.getElementById("find-job").onclick = () => {
  const queue = document.getElementById("find-queue").value.trim();
  const id = document.getElementById("find-id").value.trim();
  if (queue && id) {
    showJob(queue, id).catch((error) => {
      document.getElementById("status").textContent = `no job ${id} in ${queue}: ${error.message}`;
    });
  }
};
document.getElementById("job-close").onclick = () => { document.getElementById("job").hidden = true; };

// What live.js (the live list and the page's polling), loaded after this script, takes from it,
// named here rather than copied there. live.js sets `follow`, which each refresh calls with the
// queues it listed, and makes the first refresh. A job named in the job view's workflow
// (workflow.js) opens in this view, in place of its own page.
const EchoMQ = {
  getJSON, q, cell, jobCell, refresh, showJob, lastRefresh: () => lastRefresh, follow: () => {},
};
Pages.openJob = showJob;
