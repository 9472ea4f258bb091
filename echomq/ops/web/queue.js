"use strict";
// The page of one queue, queues/<queue>?state=…: its jobs in one state, a page at a time from
// the API's list (api/queues/<queue>/jobs), with the filters and the search in the page's own
// query. Each state, lane, filter and page is a URL: the tabs and the pager are links, and the
// filter form navigates to the URL it makes, so back and forward go through the views.
(() => {
  const { getJSON, q, queueHref, jobHref, named, moment, node, link, say } = Pages;
  const STATES = [["pending", "pending"], ["delayed", "delayed"], ["running", "running"],
    ["waiting", "waiting on parents"], ["completed", "completed"], ["dead", "dead"]];
  const TIME_OF = { pending: "enqueued", delayed: "due", running: "lease ends",
    waiting: "admitted", completed: "enqueued", dead: "died" };
  const FILTERS = ["task", "lane", "priority", "older_than_s", "error", "args", "id"];
  const { queue } = named();
  const params = new URLSearchParams(location.search);
  const state = params.get("state") || "pending";

  // The page's query for another view of this queue (null values dropped).
  function view(changes) {
    const next = new URLSearchParams(params);
    next.delete("cursor");
    for (const [key, value] of Object.entries(changes)) {
      if (value === null || value === "") next.delete(key); else next.set(key, value);
    }
    return queueHref(queue, next.toString());
  }

  function counts(stats) {
    if (!stats) return {};
    const inLanes = Object.values(stats.lanes).reduce((a, b) => a + b, 0);
    return { pending: stats.pending + inLanes, delayed: stats.delayed, running: stats.active,
      waiting: stats.waiting, dead: stats.dead };
  }

  function renderStates(stats) {
    const shown = counts(stats);
    const tabs = document.getElementById("states");
    for (const [name, label] of STATES) {
      const count = name in shown ? ` (${shown[name]})` : "";
      const tab = link(label + count, view({ state: name, lane: null }), { "data-state": name });
      if (name === state) tab.setAttribute("aria-current", "page");
      tabs.append(tab);
    }
  }

  function renderLaneTabs(lanes) {
    if (state !== "pending" || !lanes.lanes.length) return;
    const nav = document.getElementById("lanes-nav");
    nav.hidden = false;
    nav.append(node("span", "lanes:"));
    const all = link("flat queue", view({ lane: null }), { "data-lane": "" });
    if (!params.get("lane")) all.setAttribute("aria-current", "page");
    nav.append(all);
    for (const row of lanes.lanes) {
      const note = row.state === "ready" ? "" : `, ${row.state}`;
      const tab = link(`${row.group} (${row.waiting}${note})`, view({ lane: row.group }),
        { "data-lane": row.group });
      if (params.get("lane") === row.group) tab.setAttribute("aria-current", "page");
      nav.append(tab);
    }
  }

  function fillForm() {
    const form = document.getElementById("filters");
    for (const name of FILTERS) form.elements[name].value = params.get(name) || "";
    form.elements.newest.checked = params.get("newest") === "1";
    form.onsubmit = (event) => {
      event.preventDefault();
      const changes = Object.fromEntries(FILTERS.map((name) => [name, form.elements[name].value.trim()]));
      changes.newest = form.elements.newest.checked ? "1" : null;
      location.assign(view(changes));
    };
    document.getElementById("clear").href = queueHref(queue, `state=${q(state)}`);
    document.getElementById("open-job").onsubmit = (event) => {
      event.preventDefault();
      const id = event.target.elements.job.value.trim();
      if (id) location.assign(jobHref(queue, id));
    };
  }

  // The API's query for this view: the page's, with its age in ms.
  function listQuery() {
    const query = new URLSearchParams({ state, limit: params.get("limit") || "50" });
    for (const name of ["task", "lane", "priority", "error", "args", "id", "cursor", "newest"]) {
      if (params.get(name)) query.set(name, params.get(name));
    }
    const older = params.get("older_than_s");
    if (older) query.set("older_than_ms", String(Math.round(Number(older) * 1000)));
    return query.toString();
  }

  function renderJobs(page) {
    const table = document.getElementById("jobs");
    table.classList.add("stacked");
    const head = table.tHead.insertRow();
    const titles = [["job", "text"], ["task", "text"], ["arguments", "text"], ["attempts", ""],
      ["priority", ""], ["lane", "text"], [TIME_OF[state], ""],
      [state === "completed" ? "outcome" : "last error", "text"]];
    for (const [title, cls] of titles) head.append(node("th", title, cls ? { class: cls } : {}));
    const body = table.tBodies[0];
    const now = page.server_time_ms;
    for (const job of page.jobs) {
      const row = body.insertRow();
      row.dataset.job = job.id;
      const first = row.insertCell();
      first.append(link(job.id, jobHref(queue, job.id), { class: "job" }));
      first.dataset.label = "job";
      const when = state === "completed" || job.at_ms === null ? job.enqueued_ms : job.at_ms;
      const texts = [job.task || "—", job.arguments_shown || "—", job.attempts, job.priority,
        job.lane || "—", moment(when, now),
        state === "completed" ? (job.cancelled ? "cancelled" : "done") : job.error || "—"];
      texts.forEach((text, i) => {
        const td = row.insertCell();
        td.textContent = text;
        td.dataset.label = titles[i + 1][0];  // a phone shows each cell under its title
        td.className = [0, 1, 4].includes(i) ? "text" : i === 6 && job.error ? "error" : "";
      });
    }
    if (!page.jobs.length) {
      const td = body.insertRow().insertCell();
      td.colSpan = 8;
      td.className = "empty";
      td.textContent = page.next ? "none on this page: the next page looks further" : "no jobs";
    }
  }

  function renderPager(page) {
    const next = document.getElementById("next");
    if (page.next) {
      const query = new URLSearchParams(params);
      query.set("cursor", page.next);
      next.href = queueHref(queue, query.toString());
      next.hidden = false;
    }
    const first = document.getElementById("first");
    if (params.get("cursor")) {
      first.href = view({});
      first.hidden = false;
    }
    const summary = document.getElementById("summary");
    const shown = `${page.jobs.length} job(s) shown`;
    if (page.bound === null) summary.textContent = shown;
    else {
      const end = page.next ? "" : page.looked >= page.bound
        ? `: the search's bound (${page.bound}); narrow the filters to look further` : ": all of them";
      summary.textContent = `${shown}, ${page.looked} looked at${end}`;
    }
    summary.dataset.looked = page.looked;
  }

  async function showQueue() {
    document.title = `${queue} · echomq`;
    document.getElementById("queue-name").textContent = queue;
    fillForm();
    try {
      const [queues, lanes, page] = await Promise.all([getJSON("api/queues"),
        getJSON(`api/queues/${q(queue)}/lanes`), getJSON(`api/queues/${q(queue)}/jobs?${listQuery()}`)]);
      renderStates(queues.find((s) => s.name === queue));
      renderLaneTabs(lanes);
      renderJobs(page);
      renderPager(page);
      say(`${STATES.find(([name]) => name === state)?.[1] || state}${params.get("lane") ? ` in lane ${params.get("lane")}` : ""}`);
      document.getElementById("status").dataset.updated = "1";
    } catch (error) {
      say(`cannot load: ${error.message}`);
      document.getElementById("status").dataset.updated = "1";
    }
  }

  showQueue();
})();
