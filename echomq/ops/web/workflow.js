"use strict";
// A job's workflow, on the job page and in the dashboard's job view: the jobs it waits on (its
// parents, by state, with a sample) and the jobs waiting on it, as a tree, each with its state
// and a link to its own page. Loaded after pages.js, it takes that script's helpers and hands
// back `showWorkflow` (its names stay in this function).
(() => {
  const { getJSON, q, jobHref } = Pages;

  function jobLink(queue, job) {
    const item = document.createElement("li");
    item.dataset.job = job.id;
    const link = document.createElement("a");
    link.className = "job";
    link.textContent = job.id;
    link.href = jobHref(queue, job.id);
    link.onclick = (event) => {
      if (!Pages.openJob) return;  // the job page: the link leads to the job's own page
      event.preventDefault();
      Pages.openJob(queue, job.id);
    };
    const state = document.createElement("span");
    state.className = `state ${job.state}`;
    state.textContent = ` ${job.state}`;
    item.append(link, state);
    return item;
  }

  function tree(queue, nodes) {
    const list = document.createElement("ul");
    for (const node of nodes) {
      const item = jobLink(queue, node);
      if (node.dependents.length) item.append(tree(queue, node.dependents));
      list.append(item);
    }
    return list;
  }

  function summary(text) {
    const line = document.createElement("p");
    line.textContent = text;
    return line;
  }

  async function showWorkflow(queue, id) {
    const box = document.getElementById("job-workflow");
    box.replaceChildren();
    let flow;
    try {
      flow = await getJSON(`api/queues/${q(queue)}/jobs/${q(id)}/workflow`);
    } catch (error) {
      box.append(summary("—"));
      return;
    }
    const parents = flow.parents;
    if (!parents.count && !flow.dependents.length) {
      box.append(summary("not part of a workflow"));
      return;
    }
    if (parents.count) {
      const counts = Object.entries(parents.states).map(([s, n]) => `${n} ${s}`).join(", ");
      const waits = flow.waits === null ? "" : `; waiting for ${flow.waits}`;
      const counted = parents.counted < parents.count ? ` (first ${parents.counted})` : "";
      box.append(summary(`waits on ${parents.count} jobs${counted}: ${counts}${waits}` +
                         ` (if one dies: ${flow.policy})`));
      const sample = document.createElement("ul");
      sample.className = "parents";
      for (const job of parents.shown) sample.append(jobLink(queue, job));
      box.append(sample);
    }
    if (flow.dependents.length) {
      box.append(summary("waiting on it:"));
      const grown = tree(queue, flow.dependents);
      grown.className = "dependents";
      box.append(grown);
    }
  }

  Pages.showWorkflow = showWorkflow;
})();
