// The admin page of an unfinished run follows it (GET /api/v1/runs/{id}/events, server-sent events over the session
// cookie): the reply as the model writes it and a tool while it runs show at the end of the trace, as text; a
// committed step, a pause for approval or the end reloads the page, which shows them as stored. A decision being
// typed is never lost to a reload: the page says the run moved on instead.
(function () {
  "use strict";
  const trace = document.getElementById("trace");
  const url = trace && trace.dataset.events;
  if (!url || !window.EventSource) return;
  const list = trace.querySelector("ol.trace");
  const lastStep = Number(trace.dataset.lastStep);
  const source = new EventSource(url);
  const live = new Map(); // "turn:3" or "call:c1" -> its <li>
  let reloading = false;

  function edited() {
    return [...document.querySelectorAll('[form="decision-form"]')].some((el) =>
      el.type === "radio" ? el.checked !== el.defaultChecked : el.type !== "hidden" && el.value !== el.defaultValue);
  }

  function reload() {
    if (reloading) return;
    reloading = true;
    source.close();
    trace.dataset.stream = "closed";
    if (!edited()) {
      setTimeout(() => window.location.reload(), 200); // a step rarely comes alone: one reload for the lot
      return;
    }
    const note = document.createElement("p");
    note.className = "errornote";
    note.id = "run-moved-on";
    note.textContent = "The run has moved on: reload the page to see it (your decision above is not sent yet).";
    trace.prepend(note);
  }

  function entry(key, className, label) {
    let li = live.get(key);
    if (li) return li;
    const empty = document.getElementById("no-steps");
    if (empty) empty.remove();
    li = document.createElement("li");
    li.className = `step live ${className}`;
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.textContent = label;
    const pre = document.createElement("pre");
    pre.className = "live-text";
    li.append(meta, pre);
    list.appendChild(li);
    live.set(key, li);
    return li;
  }

  function drop(key) {
    const li = live.get(key);
    if (li) li.remove();
    live.delete(key);
  }

  function on(name, handle) {
    source.addEventListener(name, (event) => {
      let data;
      try {
        data = JSON.parse(event.data) || {};
      } catch (error) {
        return;
      }
      if (!reloading) handle(data);
    });
  }

  on("step", (step) => step.index > lastStep && reload());
  on("run", (run) => {
    const was = trace.dataset.status;
    if (run.status === was) return;
    if ([was, run.status].includes("awaiting_approval")) return reload(); // the decision controls come or go
    trace.dataset.status = run.status; // queued -> running: only the status field changes
    const field = document.querySelector(".field-status .readonly");
    if (field) field.textContent = run.status.charAt(0).toUpperCase() + run.status.slice(1);
  });
  on("done", reload);
  on("assistant.delta", (data) => {
    const turn = Number(data.turn);
    const li = entry(`turn:${turn}`, "kind-model", `turn ${turn} · being written…`);
    li.querySelector("pre").textContent += String(data.text ?? ""); // text, never HTML
  });
  on("assistant.retry", (data) => drop(`turn:${Number(data.turn)}`));
  on("tool.started", (data) => {
    if (live.has(`call:${data.call_id}`)) return;
    const li = entry(`call:${data.call_id}`, "kind-tool running", ` ${data.tool} is running… (${data.call_id})`);
    const spinner = document.createElement("span");
    spinner.className = "spinner";
    spinner.setAttribute("role", "progressbar");
    spinner.setAttribute("aria-label", `${data.tool} is running`);
    li.querySelector(".meta").prepend(spinner);
    li.querySelector("pre").textContent = JSON.stringify(data.arguments ?? {}, null, 2);
  });
  on("tool.finished", (data) => {
    const li = live.get(`call:${data.call_id}`);
    if (!li) return;
    li.classList.remove("running");
    li.classList.toggle("is-error", Boolean(data.is_error));
    const ended = `${data.is_error ? "failed" : "returned"} after ${data.latency_ms} ms`;
    li.querySelector(".meta").textContent = `${data.tool} ${ended} (${data.call_id}); its output follows…`;
  });
  source.addEventListener("open", () => reloading || (trace.dataset.stream = "open"));
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED) trace.dataset.stream = "closed"; // else it reconnects by itself
  });
})();
