// The playground: starts a run in "step" mode and advances it one unit at a time, drawing each step.
// Everything from the model or a tool is inserted as text (textContent), never as HTML.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const state = { run: null, shown: 0, polling: null };

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

  function renderStep(step) {
    const li = document.createElement("li");
    li.className = `step kind-${step.kind}` + (step.is_error ? " is-error" : "");
    li.dataset.index = step.index;
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
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.textContent = `#${step.index} · ${step.kind} · ${step.latency_ms} ms`;
    li.appendChild(meta);
    return li;
  }

  async function refresh() {
    const run = await api("GET", `/api/v1/runs/${state.run.id}`);
    state.run = run;
    for (const step of run.steps.slice(state.shown)) $("trace").appendChild(renderStep(step));
    state.shown = run.steps.length;
    return run;
  }

  function showStatus(text) {
    $("status").textContent = text;
  }

  async function drive() {
    let run = await refresh();
    while (run.status === "running") {
      showStatus(`Running… (turn ${run.turns} of ${run.max_turns})`);
      await api("POST", `/api/v1/runs/${run.id}/advance`, {});
      run = await refresh();
    }
    if (run.status === "awaiting_approval") return pause(run);
    finish(run);
  }

  function pause(run) {
    const pending = run.pending_action || {};
    $("approval").hidden = false;
    $("approval-text").textContent = `Waiting for approval: ${pending.tool} ${JSON.stringify(pending.arguments)}` +
      (window.PLAYGROUND.mayDecide ? "" : " — a staff reviewer must decide; this page will go on when they do.");
    $("approval-buttons").hidden = !window.PLAYGROUND.mayDecide;
    showStatus("Paused: a sensitive tool call needs a human decision.");
    if (!window.PLAYGROUND.mayDecide) state.polling = setTimeout(poll, 2000);
  }

  async function poll() {
    const run = await refresh();
    if (run.status === "awaiting_approval") {
      state.polling = setTimeout(poll, 2000);
      return;
    }
    $("approval").hidden = true;
    run.status === "running" ? drive().catch(fail) : finish(run);
  }

  async function decide(approved) {
    $("approval").hidden = true;
    await api("POST", `/api/v1/runs/${state.run.id}/advance`, { approval: approved });
    await drive();
  }

  function finish(run) {
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

  async function loadRecent() {
    const page = await api("GET", "/api/v1/runs?limit=10");
    const list = $("recent");
    list.replaceChildren();
    for (const run of page.results) {
      const li = document.createElement("li");
      li.textContent = `${run.input.slice(0, 80)} — ${run.status}${run.stop_reason ? " / " + run.stop_reason : ""}` +
        (run.output ? ` → ${run.output.slice(0, 80)}` : "");
      list.appendChild(li);
    }
  }

  $("run-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    clearTimeout(state.polling);
    $("trace").replaceChildren();
    $("final").hidden = true;
    $("approval").hidden = true;
    $("run-button").disabled = true;
    delete $("status").dataset.stopReason;
    state.shown = 0;
    showStatus("Starting…");
    try {
      state.run = await api("POST", "/api/v1/runs", {
        input: $("input").value,
        provider: $("provider").value,
        protocol: $("protocol").value,
        max_turns: Number($("max_turns").value),
        mode: "step",
      });
      loadRecent().catch(() => {});
      await drive();
    } catch (error) {
      fail(error);
    }
  });
  $("approve-button").addEventListener("click", () => decide(true).catch(fail));
  $("deny-button").addEventListener("click", () => decide(false).catch(fail));
  loadRecent().catch(() => {});
})();
