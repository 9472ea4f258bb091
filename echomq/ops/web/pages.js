"use strict";
// What the queue page and the job page share (loaded before each page's own script): the app's
// root (where it is mounted; the server writes it into the page), the API's calls, links to
// pages, and how times read. Every view is a URL of its own: links are real links, so back and
// forward, a new tab and a bookmark all work.
const Pages = (() => {
  const ROOT = document.querySelector('meta[name="echomq-root"]').content;
  const CSRF = document.querySelector('meta[name="echomq-csrf"]').content;

  // The app's root without a user:token@ part: fetch refuses a URL that holds credentials,
  // while the browser still answers the server's challenge with the ones the page had.
  function api(path) {
    const root = new URL(`${ROOT}/`, location.href);
    root.username = "";
    root.password = "";
    return new URL(path, root).href;
  }

  async function getJSON(path) {
    const response = await fetch(api(path), { credentials: "same-origin" });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || response.status);
    return answer;
  }

  async function post(path, body) {
    const response = await fetch(api(path), {
      method: "POST", credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-EchoMQ-CSRF": CSRF },
      body: JSON.stringify(body),
    });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || response.status);
    return answer;
  }

  const q = encodeURIComponent;
  // A name as a segment of a page's path: ids read as they are (JOB:…), ':' being safe there.
  const segment = (name) => q(name).replace(/%3A/gi, ":");
  const queueHref = (queue, query) => `${ROOT}/queues/${segment(queue)}` + (query ? `?${query}` : "");
  const jobHref = (queue, id) => `${ROOT}/queues/${segment(queue)}/jobs/${segment(id)}`;

  // The queue (and job) this page is about, from its path below the root.
  function named() {
    const parts = location.pathname.slice(ROOT.length).split("/");
    return { queue: decodeURIComponent(parts[2] || ""), job: decodeURIComponent(parts[4] || "") };
  }

  function utc(ms) {
    return ms === null || ms === undefined ? "—"
      : new Date(ms).toISOString().replace("T", " ").replace("Z", " UTC");
  }

  function age(ms) {
    if (ms === null || ms === undefined) return "—";
    const s = Math.abs(ms) / 1000;
    if (s < 1) return `${Math.abs(ms)} ms`;
    if (s < 60) return `${s.toFixed(1)} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${Math.floor(s % 60)} s`;
    if (s < 86400) return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
    return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
  }

  // A moment on the server's clock as UTC and how long ago (or from now) it is.
  function moment(ms, now) {
    if (ms === null || ms === undefined) return "—";
    return ms <= now ? `${utc(ms)} (${age(now - ms)} ago)` : `${utc(ms)} (in ${age(ms - now)})`;
  }

  function node(tag, text, attrs = {}) {
    const made = document.createElement(tag);
    if (text !== undefined && text !== null) made.textContent = text;
    for (const [key, value] of Object.entries(attrs)) made.setAttribute(key, value);
    return made;
  }

  function link(text, href, attrs = {}) {
    return node("a", text, { href, ...attrs });
  }

  function say(text) { document.getElementById("status").textContent = text; }

  // `showWorkflow` is workflow.js's; `openJob`, when a page sets it, opens a job named in a
  // workflow in place (the dashboard's job view) rather than following the link to its page.
  return { ROOT, getJSON, post, q, queueHref, jobHref, named, utc, age, moment, node, link, say,
    showWorkflow: () => {}, openJob: null };
})();
