// The playground. A "step" run is driven by this page, one unit at a time; a "background" run is advanced by a task
// worker and this page follows its event stream (GET /api/v1/runs/{id}/events, server-sent events over the session
// cookie). A recent run opens its trace. Everything from the model or a tool is inserted as text, never as HTML.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const RUN_HASH = /^#run-([0-9a-f-]{36})$/;
  // The run on screen. Work started for a view that is no longer on screen (another run was opened) is dropped.
  let view = { run: null, shown: 0, source: null, polling: null, driving: false };
  let opening = 0; // the latest click on a recent run wins over slower earlier ones

  function csrfToken() {
    const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    return match ? decodeURIComponent(match[1]) : "";
  }

  async function api(method, url, body) {
    const response = await fetch(url, {
      method,
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken() },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const data = response.status === 204 ? null : await response.json().catch(() => null);
    if (!response.ok) {
      const detail = data && (data.detail || Object.entries(data).map(([k, v]) => `${k}: ${[].concat(v).join(" ")}`).join("; "));
      throw new Error(detail || `HTTP ${response.status}`);
    }
    return data;
  }

  // Markdown-ish at most: `code` and **bold**, built as DOM nodes from text.
  function formatted(text) {
    const span = document.createElement("span");
    span.className = "text";
    const parts = String(text ?? "").split(/(`[^`\n]+`|\*\*[^*\n]+\*\*)/);
    for (const part of parts) {
      if (/^`[^`]+`$/.test(part)) {
        const code = document.createElement("code");
        code.textContent = part.slice(1, -1);
        span.appendChild(code);
      } else if (/^\*\*[^*]+\*\*$/.test(part)) {
        const strong = document.createElement("strong");
        strong.textContent = part.slice(2, -2);
        span.appendChild(strong);
      } else {
        span.appendChild(document.createTextNode(part));
      }
    }
    return span;
  }

  function line(label, content, className) {
    const div = document.createElement("div");
    if (className) div.className = className;
    const b = document.createElement("b");
    b.textContent = label + " ";
    div.appendChild(b);
    div.appendChild(content instanceof Node ? content : formatted(content));
    return div;
  }

  function stepBody(li, step) {
    if (step.kind === "model") {
      if (step.thought) li.appendChild(line("Thought:", step.thought));
      for (const call of step.tool_calls || []) {
        li.appendChild(line("Action:", `${call.name} ${JSON.stringify(call.arguments)}`, "action"));
      }
      if (step.final_answer !== null && step.final_answer !== undefined) li.appendChild(line("Final Answer:", step.final_answer));
    } else if (step.kind === "tool") {
      li.appendChild(line(step.is_error ? "Observation (error):" : "Observation:", step.output, "observation"));
    } else if (step.kind === "approval") {
      const verdict = step.approved ? "approved" : "denied";
      li.appendChild(line("Approval:", `${step.name} ${verdict} by ${step.reviewer}${step.reason ? " — " + step.reason : ""}`));
    } else {
      li.appendChild(line("Error:", step.message, "error"));
    }
  }

  function renderStep(step) {
    const li = document.createElement("li");
    li.className = `step kind-${step.kind}` + (step.is_error ? " is-error" : "");
    li.dataset.index = step.index;
    stepBody(li, step);
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.textContent = `#${step.index} · ${step.kind} · ${step.latency_ms} ms`;
    li.appendChild(meta);
    return li;
  }

  function showStatus(text) {
    $("status").textContent = text;
  }

  // --- the run on screen ------------------------------------------------------------------------------------------

  const current = (v) => v === view;

  function closeView() {
    clearTimeout(view.polling);
    if (view.source) view.source.close();
    view.source = null;
    $("trace").dataset.stream = "closed";
  }

  function showRunHeader(run) {
    $("current-run").hidden = false;
    $("run-meta").textContent = run.id ? `Run ${run.id.slice(0, 8)} · ${run.mode} · ${run.protocol} · ${run.provider}` : "New run";
    $("run-goal").replaceChildren(formatted(run.input));
  }

  function newView(run, driving) {
    closeView();
    view = { run, shown: 0, source: null, polling: null, driving };
    $("trace").replaceChildren();
    $("final").hidden = true;
    $("approval").hidden = true;
    delete $("status").dataset.stopReason;
    delete $("status").dataset.status;
    showRunHeader(run);
    markRecent();
    return view;
  }

  function addSteps(v, steps) {
    if (!current(v)) return;
    for (const step of steps) {
      if (step.index < v.shown) continue; // already on screen (a replay after a reconnect)
      $("trace").appendChild(renderStep(step));
      v.shown = step.index + 1;
    }
  }

  async function refresh(v) {
    const run = await api("GET", `/api/v1/runs/${v.run.id}`);
    if (current(v)) v.run = run;
    addSteps(v, run.steps);
    return run;
  }

  // --- a step run: this page advances it ---------------------------------------------------------------------------

  async function drive(v) {
    let run = await refresh(v);
    while (run.status === "running" && current(v)) {
      showStatus(`Running… (turn ${run.turns} of ${run.max_turns})`);
      await api("POST", `/api/v1/runs/${run.id}/advance`, {});
      run = await refresh(v);
    }
    if (!current(v)) return;
    if (run.status === "awaiting_approval") return pause(v, run);
    finish(v, run);
  }

  function pause(v, run) {
    const pending = run.pending_action || {};
    $("approval").hidden = false;
    $("approval-text").textContent = `Waiting for approval: ${pending.tool} ${JSON.stringify(pending.arguments)}` +
      (window.PLAYGROUND.mayDecide ? "" : " — a staff reviewer must decide; this page will go on when they do.");
    $("approval-buttons").hidden = !window.PLAYGROUND.mayDecide;
    showStatus("Paused: a sensitive tool call needs a human decision.");
    // A followed run needs no polling: its event stream brings the decision and what follows.
    if (v.driving && !window.PLAYGROUND.mayDecide) v.polling = setTimeout(() => poll(v).catch(fail), 2000);
  }

  async function poll(v) {
    const run = await refresh(v);
    if (!current(v)) return;
    if (run.status === "awaiting_approval") {
      v.polling = setTimeout(() => poll(v).catch(fail), 2000);
      return;
    }
    $("approval").hidden = true;
    run.status === "running" ? drive(v).catch(fail) : finish(v, run);
  }

  async function decide(approved) {
    const v = view;
    $("approval").hidden = true;
    await api("POST", `/api/v1/runs/${v.run.id}/advance`, { approval: approved });
    if (v.driving) await drive(v); // else the event stream shows what comes next
  }

  // --- a background run (or any unfinished run opened from the list): follow its event stream ------------------

  function follow(v) {
    const source = new EventSource(`/api/v1/runs/${v.run.id}/events`);
    v.source = source;
    source.addEventListener("open", () => current(v) && ($("trace").dataset.stream = "open"));
    source.addEventListener("step", (event) => addSteps(v, [JSON.parse(event.data)]));
    source.addEventListener("run", (event) => {
      if (!current(v)) return;
      progress(v, JSON.parse(event.data));
      loadRecent().catch(() => {}); // the list shows the new status too
    });
    source.addEventListener("done", (event) => finish(v, JSON.parse(event.data)));
    source.addEventListener("error", () => {
      // CONNECTING means the browser reconnects by itself (with Last-Event-ID); CLOSED means the server refused.
      if (current(v) && source.readyState === EventSource.CLOSED) fail(new Error("the run's event stream was refused"));
    });
  }

  function progress(v, run) {
    v.run = run;
    $("status").dataset.status = run.status;
    if (run.status === "awaiting_approval") return pause(v, run);
    $("approval").hidden = true;
    if (run.status === "queued") showStatus("Queued: waiting for a worker…");
    if (run.status === "running") showStatus("Running…");
  }

  function finish(v, run) {
    if (!current(v)) return;
    closeView();
    v.run = run;
    $("status").dataset.status = run.status;
    showStatus(`Done: ${run.stop_reason} after ${run.turns} turn(s).`);
    $("status").dataset.stopReason = run.stop_reason;
    if (run.output !== null) {
      $("final").hidden = false;
      $("final-answer").replaceChildren(formatted(run.output));
    }
    $("run-button").disabled = false;
    loadRecent().catch(() => {});
  }

  function fail(error) {
    showStatus(`Error: ${error.message}`);
    $("run-button").disabled = false;
  }

  // --- starting a run, opening a recent one ---------------------------------------------------------------------

  async function start() {
    const mode = $("mode").value;
    $("run-button").disabled = true;
    const v = newView({ input: $("input").value }, mode === "step");
    showStatus("Starting…");
    const run = await api("POST", "/api/v1/runs", {
      input: $("input").value,
      provider: $("provider").value,
      protocol: $("protocol").value,
      max_turns: Number($("max_turns").value),
      mode,
    });
    if (!current(v)) return;
    v.run = run;
    showRunHeader(run);
    history.replaceState(null, "", `#run-${run.id}`);
    loadRecent().catch(() => {});
    if (v.driving) return drive(v);
    $("run-button").disabled = false; // a worker runs it: the page is free to start another
    progress(v, run);
    follow(v);
  }

  async function openRun(id) {
    const ticket = ++opening;
    const run = await api("GET", `/api/v1/runs/${id}`);
    if (ticket !== opening) return;
    const v = newView(run, false);
    $("run-button").disabled = false;
    addSteps(v, run.steps);
    if (run.status === "done") return finish(v, run);
    progress(v, run);
    follow(v);
  }

  function clip(text, length) {
    const value = String(text ?? "");
    return value.length > length ? value.slice(0, length) + "…" : value;
  }

  function recentEntry(run) {
    const li = document.createElement("li");
    const link = document.createElement("a");
    link.className = "open-run";
    link.href = `#run-${run.id}`;
    link.dataset.runId = run.id;
    link.textContent = clip(run.input, 80);
    const summary = ` — ${run.status}${run.stop_reason ? " / " + run.stop_reason : ""}` +
      (run.output ? ` → ${clip(run.output, 80)}` : "");
    li.append(link, document.createTextNode(summary));
    return li;
  }

  function markRecent() {
    for (const link of $("recent").querySelectorAll("a.open-run")) {
      const shown = Boolean(view.run && link.dataset.runId === view.run.id);
      shown ? link.setAttribute("aria-current", "true") : link.removeAttribute("aria-current");
    }
  }

  async function loadRecent() {
    const page = await api("GET", "/api/v1/runs?limit=10");
    $("recent").replaceChildren(...page.results.map(recentEntry));
    markRecent();
  }

  $("run-form").addEventListener("submit", (event) => {
    event.preventDefault();
    start().catch(fail);
  });
  $("recent").addEventListener("click", (event) => {
    const link = event.target.closest("a.open-run");
    if (!link) return;
    event.preventDefault();
    history.replaceState(null, "", `#run-${link.dataset.runId}`);
    openRun(link.dataset.runId).catch(fail);
  });
  $("approve-button").addEventListener("click", () => decide(true).catch(fail));
  $("deny-button").addEventListener("click", () => decide(false).catch(fail));
  loadRecent().catch(() => {});
  const linked = RUN_HASH.exec(window.location.hash);
  if (linked) openRun(linked[1]).catch(fail);
})();
