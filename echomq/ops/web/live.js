"use strict";
// The echomq dashboard's live list, and the page's polling. Loaded after dashboard.js, it takes
// that script's helpers from its EchoMQ namespace (none is copied here), hands back `follow`,
// which each refresh calls with the queues listed, and starts the polling: its names stay in
// this function.
//
// Each queue with an events stream is followed by a long poll of its events (prepended to the
// live list, and a refresh soon after); the 5 s poll below goes on only while some queue has no
// stream. A failed poll backs off and tries again. A browser opens about 6 connections to one
// server, and each long poll holds one: at most MAX_LIVE queues are followed so, the others
// polled.
(() => {
  const { getJSON, q, cell, jobCell, refresh, lastRefresh } = EchoMQ;
  const MAX_LIVE = 3;
  const LIVE_ROWS = 200;
  const LIVE_BLOCK_MS = 10000;
  const liveQueues = new Set();
  const quietUntil = {};  // a queue seen without a stream is asked again after a minute
  let shownQueues = [];
  let refreshSoon = null;

  function refreshShortly() {
    if (refreshSoon !== null) return;
    refreshSoon = setTimeout(() => { refreshSoon = null; refresh(); }, 300);
  }

  function showEvents(queue, events) {
    const body = document.querySelector("#events tbody");
    if (events.length) body.querySelector("tr.none")?.remove();
    for (const e of events) {
      const row = body.insertRow(0);
      row.dataset.event = e.id;
      row.dataset.queue = queue;
      cell(row, queue, "text");
      cell(row, e.kind, "text").dataset.kind = e.kind;
      jobCell(row, queue, e.job_id);
      cell(row, e.attempt);
      cell(row, new Date(e.at_ms).toISOString().replace("T", " ").replace("Z", " UTC"));
    }
    while (body.rows.length > LIVE_ROWS) body.deleteRow(-1);
  }

  async function live(queue) {
    liveQueues.add(queue);
    let since = null;
    let backoff = 1000;
    while (shownQueues.includes(queue)) {  // a queue gone from the list is no longer followed
      try {
        const query = since === null ? "count=50" : `since=${q(since)}&block_ms=${LIVE_BLOCK_MS}`;
        const answer = await getJSON(`api/queues/${q(queue)}/events?${query}`);
        if (since === null && !answer.enabled) {
          liveQueues.delete(queue);  // no stream: polled, and asked again a minute on
          quietUntil[queue] = Date.now() + 60000;
          return;
        }
        showEvents(queue, answer.events);
        if (since !== null && answer.events.length) refreshShortly();
        since = answer.last;
        backoff = 1000;
      } catch (error) {
        await new Promise((resolve) => setTimeout(resolve, backoff));
        backoff = Math.min(backoff * 2, 30000);
      }
    }
    liveQueues.delete(queue);
  }

  function follow(queues) {
    shownQueues = queues.map((s) => s.name);  // before the loops start: each checks it
    for (const name of shownQueues) {
      const asked = !liveQueues.has(name) && !(quietUntil[name] > Date.now());
      if (asked && liveQueues.size < MAX_LIVE) live(name);
    }
  }

  EchoMQ.follow = follow;  // before the first refresh, which calls it
  refresh();
  // Every 5 s while some queue has no events stream (or there is none yet); with every queue
  // followed live, the events refresh the page, and this only every 30 s (workers, charts).
  setInterval(() => {
    const allLive = shownQueues.length > 0 && shownQueues.every((name) => liveQueues.has(name));
    if (!allLive || Date.now() - lastRefresh() >= 30000) refresh();
  }, 5000);
})();
