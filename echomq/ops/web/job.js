"use strict";
// The page of one job, queues/<queue>/jobs/<id>: its story (api/…/story: the call, attempts,
// result, why it waits, its timeline), its row's error, traceback and progress (api/…/jobs/<id>)
// and its workflow both ways (workflow.js), every other job named as a link to its own page.
(() => {
  const { getJSON, post, q, queueHref, named, utc, moment, node, say } = Pages;
  const { queue, job } = named();
  const CANCELLABLE = ["pending", "delayed", "running", "waiting"];
  const path = `api/queues/${q(queue)}/jobs/${q(job)}`;

  function fact(list, term, value) {
    list.append(node("dt", term), node("dd", value === null || value === undefined ? "—" : String(value)));
  }

  function renderFacts(story, detail) {
    const facts = document.getElementById("facts");
    const now = story.server_time_ms;
    fact(facts, "task", story.task);
    fact(facts, "attempts", story.attempts);
    fact(facts, "priority", story.priority);
    fact(facts, "lane", story.lane);
    fact(facts, "dedupe key", story.dedupe);
    fact(facts, "enqueued", story.enqueued_ms === null ? null : moment(story.enqueued_ms, now));
    fact(facts, "row kept", detail.expires_in_ms === null ? "until it ends"
      : `for ${Pages.age(detail.expires_in_ms)} more (a tombstone)`);
    if (detail.fields.fence) fact(facts, "fence", detail.fields.fence);
  }

  // Short values on one line, longer ones laid out.
  function pretty(value) {
    const line = JSON.stringify(value);
    return line.length <= 72 ? line : JSON.stringify(value, null, 2);
  }

  function renderCall(story, detail) {
    const args = document.getElementById("arguments");
    if (story.args !== null) {
      args.textContent = `args: ${pretty(story.args)}\nkwargs: ${pretty(story.kwargs || {})}`;
    } else {
      args.textContent = detail.payload_size ? `not a task's call: ${detail.payload_size} bytes\n${detail.payload_preview}`
        : "— (the row keeps no payload)";
    }
    const result = story.result;
    document.getElementById("result").textContent = result === null ? "—"
      : typeof result === "string" ? result : "value" in result ? pretty(result.value) : result.text;
    document.getElementById("error").textContent = detail.error || "—";
    const traceback = document.getElementById("traceback");
    traceback.textContent = detail.traceback;
    traceback.hidden = !detail.traceback;
    document.getElementById("progress").textContent = detail.progress === null ? "—" : detail.progress;
  }

  function renderWhy(story) {
    const list = document.getElementById("why");
    const said = story.why.length ? story.why : [`${story.state}`];
    for (const line of said) list.append(node("li", line));
  }

  function renderTimeline(timeline) {
    const note = document.getElementById("timeline-note");
    const body = document.querySelector("#timeline tbody");
    if (!timeline.enabled) {
      note.textContent = "this queue keeps no events (its Queues are made without events=True)";
      return;
    }
    note.textContent = timeline.complete ? "" :
      `from the newest ${timeline.looked} events of the queue; earlier ones are not looked at`;
    for (const event of timeline.events) {
      const row = body.insertRow();
      row.dataset.event = event.kind;
      [utc(event.at_ms), event.kind, event.attempt, event.said].forEach((text, i) => {
        const td = row.insertCell();
        td.textContent = text;
        td.dataset.label = ["at", "event", "attempt", "what happened"][i];
        if (i === 1 || i === 3) td.className = "text";
      });
    }
    if (!timeline.events.length) {
      const td = body.insertRow().insertCell();
      td.colSpan = 4;
      td.className = "empty";
      td.textContent = "no event of this job among those kept";
    }
  }

  function renderCancel(story) {
    const button = document.getElementById("cancel");
    button.hidden = !CANCELLABLE.includes(story.state);
    button.onclick = async () => {
      if (!confirm(`Cancel job ${job} of ${queue}?`)) return;
      try {
        const answer = await post(`${path}/cancel`, {});
        location.reload();
        say(`cancel: ${answer.verdict}`);
      } catch (error) {
        say(`cancel failed: ${error.message}`);
      }
    };
  }

  async function showStory() {
    document.title = `${job} · ${queue} · echomq`;
    const back = document.getElementById("queue-link");
    back.textContent = queue;
    back.href = queueHref(queue, "");
    document.getElementById("job-id").textContent = job;
    try {
      const [story, detail] = await Promise.all([getJSON(`${path}/story`), getJSON(path)]);
      const state = document.getElementById("state");
      state.textContent = story.state;
      state.classList.add(story.state);
      back.href = queueHref(queue, `state=${q(story.state)}`);
      renderWhy(story);
      renderFacts(story, detail);
      renderCall(story, detail);
      Pages.showWorkflow(queue, job);
      renderTimeline(story.timeline);
      renderCancel(story);
      say("");
    } catch (error) {
      say(`no job ${job} in ${queue}: ${error.message}`);
    }
    document.getElementById("status").dataset.updated = "1";
  }

  showStory();
})();
