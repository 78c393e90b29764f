// The playground. A "step" run is driven by this page, one unit at a time; a "background" run is advanced by a task
// worker and this page follows its event stream (GET /api/v1/runs/{id}/events, server-sent events over the session
// cookie). A step run's stream is open too while the page drives it: both show the work in progress, the reply as
// the model writes it and a tool while it runs, until the committed step replaces it. A recent run opens its trace.
// Runs happen in a thread: the first run of a conversation creates one, and a follow-up is a new run in the same
// thread (the model sees the earlier runs). Everything from the model, a tool or the user is inserted as text, never
// as HTML.
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const RUN_HASH = /^#run-([0-9a-f-]{36})$/;
  // The run on screen. Work started for a view that is no longer on screen (another run was opened) is dropped.
  // turns: the model turns known to be committed (their live text is history); toolsDone: call ids with a tool step.
  const blankView = (run, driving) =>
    ({ run, shown: 0, source: null, polling: null, driving, turns: (run && run.turns) || 0, toolsDone: new Set() });
  let view = blankView(null, false);
  let opening = 0; // the latest click on a recent run (or start, follow-up, new conversation) wins over slower ones
  // The conversation on screen: its thread (null before the first run) and its runs, oldest first.
  let chat = { id: null, runs: [], listed: new Set() }; // listed: the runs the server's last answer had

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
      const error = new Error(detail || `HTTP ${response.status}`);
      error.status = response.status;
      error.data = data;
      throw error;
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

  // A run's input is a string, or a list of parts (text and images): its text, and its images as thumbnails (base64
  // ones shown from their data: URL; a URL one only as a link, so the page loads nothing from elsewhere).
  function inputText(input) {
    if (!Array.isArray(input)) return String(input ?? "");
    return input.filter((p) => p.type === "text").map((p) => p.text).join("\n\n");
  }

  function thumbnails(input) {
    const images = Array.isArray(input) ? input.filter((p) => p.type === "image") : [];
    if (!images.length) return [];
    const div = document.createElement("div");
    div.className = "thumbnails";
    for (const image of images) {
      if (image.url) {
        const link = document.createElement("a");
        link.href = image.url;
        link.rel = "noopener noreferrer nofollow";
        link.target = "_blank";
        link.textContent = "image link";
        div.appendChild(link);
      } else {
        const img = document.createElement("img");
        img.className = "thumb";
        img.alt = `an image (${image.media_type})`;
        img.src = `data:${image.media_type};base64,${image.data}`;
        div.appendChild(img);
      }
    }
    return [div];
  }

  // What the form sends: the text alone, or (with images picked) a list of parts, each image as base64.
  async function inputValue(text, picker) {
    const files = picker ? Array.from(picker.files || []) : [];
    if (!files.length) return text;
    const images = await Promise.all(files.map(readImage));
    return (text.trim() ? [{ type: "text", text }] : []).concat(images);
  }

  function readImage(file) {
    return new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => resolve({ type: "image", data: String(reader.result).split(",", 2)[1], media_type: file.type });
      reader.onerror = () => reject(new Error(`could not read ${file.name}`));
      reader.readAsDataURL(file);
    });
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
    } else if (step.kind === "summary") { // history "summarize": the thread's earlier turns, condensed
      if (step.summary === null) li.appendChild(line("Summary failed:", `${step.error} (the earlier turns are left out)`, "error"));
      else li.appendChild(line(`Summary of the thread's first ${step.runs} runs:`, step.summary));
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

  // --- the length of a goal: the server takes AGENT_MAX_INPUT_CHARS characters; the page says so as you type and
  // refuses to send more (a textarea's maxlength would cut a long paste without a word) -----------------------------

  const grouped = (n) => n.toLocaleString("en-US");

  function length(textarea) {
    const count = [...textarea.value].length; // code points, as the server counts them
    return { count, max: Number(textarea.dataset.maxChars), over: count > Number(textarea.dataset.maxChars) };
  }

  function showLength(textarea, counter) {
    const { count, max, over } = length(textarea);
    counter.textContent = over
      ? `${grouped(count)} / ${grouped(max)} characters: ${grouped(count - max)} over the limit. Shorten it to send it.`
      : `${grouped(count)} / ${grouped(max)} characters`;
    counter.classList.toggle("over", over);
    textarea.setAttribute("aria-invalid", String(over));
  }

  // Whether the text may be sent; if not, the page says why, naming the limit.
  function fits(textarea, what) {
    const { count, max, over } = length(textarea);
    if (over) {
      showStatus(`Not sent: the ${what} has ${grouped(count)} characters; the limit is ${grouped(max)} ` +
        "(AGENT_MAX_INPUT_CHARS). Shorten it and try again.", "too-long");
      textarea.focus();
    }
    return !over;
  }

  function showStatus(text, error) {
    $("status").textContent = text;
    $("status").classList.toggle("error", Boolean(error));
    error ? ($("status").dataset.error = error) : delete $("status").dataset.error;
  }

  function busy(flag) {
    $("run-button").disabled = flag;
    $("followup-button").disabled = flag;
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
    $("run-goal").replaceChildren(formatted(inputText(run.input)), ...thumbnails(run.input));
  }

  function newView(run, driving) {
    closeView();
    view = blankView(run, driving);
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
      if (step.kind === "tool" && step.call_id) {
        v.toolsDone.add(step.call_id);
        dropLive(v, (li) => li.dataset.callId === step.call_id && step.index < v.shown);
      }
      if (step.index < v.shown) continue; // already on screen (a replay after a reconnect, or both stream and page)
      placeStep(v, step);
      v.shown = step.index + 1;
    }
  }

  // A committed step takes the place of what showed it in progress: a model step the text of the oldest turn being
  // written, a tool step its running call. Any other step goes before the work in progress, which is newer.
  function placeStep(v, step) {
    const li = renderStep(step);
    const live = [...$("trace").querySelectorAll(":scope > li.live")];
    let stand = null;
    if (step.kind === "model") stand = live.find((el) => el.dataset.turn !== undefined);
    if (step.kind === "tool" && step.call_id) stand = live.find((el) => el.dataset.callId === step.call_id);
    if (stand) {
      stand.replaceWith(li);
      if (stand.dataset.turn !== undefined) committedTurns(v, Number(stand.dataset.turn));
    } else {
      $("trace").insertBefore(li, live[0] || null);
    }
  }

  async function refresh(v) {
    const run = await api("GET", `/api/v1/runs/${v.run.id}`);
    if (current(v)) v.run = run;
    addSteps(v, run.steps);
    if (current(v)) committedTurns(v, run.turns);
    return run;
  }

  // --- the work in progress: live events, never stored, replaced by the committed steps -----------------------------

  function dropLive(v, which) {
    if (!current(v)) return;
    for (const li of $("trace").querySelectorAll(":scope > li.live")) if (which(li)) li.remove();
  }

  // Turns up to `turns` are committed: text still shown for them (a late piece, a call that failed) goes.
  function committedTurns(v, turns) {
    v.turns = Math.max(v.turns, Number(turns) || 0);
    dropLive(v, (li) => li.dataset.turn !== undefined && Number(li.dataset.turn) <= v.turns);
  }

  function liveText(v, turn) {
    for (const li of $("trace").querySelectorAll(":scope > li.live")) if (li.dataset.turn === String(turn)) return li;
    const li = document.createElement("li");
    li.className = "step kind-model live";
    li.dataset.turn = turn;
    const body = line("Writing:", document.createElement("span"), "live-text");
    body.lastChild.className = "text";
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.textContent = `turn ${turn} · being written…`;
    li.append(body, meta);
    $("trace").appendChild(li);
    return li;
  }

  function onDelta(v, data) {
    const turn = Number(data.turn);
    if (!current(v) || !(turn > v.turns) || typeof data.text !== "string") return;
    liveText(v, turn).querySelector(".live-text .text").textContent += data.text; // text, never HTML
  }

  function onRetry(v, data) {
    dropLive(v, (li) => li.dataset.turn === String(Number(data.turn))); // the call is made again: its text goes
  }

  function liveTool(v, callId) {
    return [...$("trace").querySelectorAll(":scope > li.live")].find((li) => li.dataset.callId === callId) || null;
  }

  function onToolStarted(v, data) {
    const callId = String(data.call_id);
    if (!current(v) || v.toolsDone.has(callId) || liveTool(v, callId)) return;
    const li = document.createElement("li");
    li.className = "step kind-tool live running";
    li.dataset.callId = callId;
    const spinner = document.createElement("span");
    spinner.className = "spinner";
    spinner.setAttribute("role", "progressbar");
    spinner.setAttribute("aria-label", `${data.tool} is running`);
    const what = line("Running:", `${data.tool} ${JSON.stringify(data.arguments ?? {})}`, "action");
    what.prepend(spinner);
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.textContent = `${callId} · running…`;
    li.append(what, meta);
    $("trace").appendChild(li);
  }

  function onToolFinished(v, data) {
    if (!current(v)) return;
    const li = liveTool(v, String(data.call_id));
    if (!li) return;
    li.classList.remove("running");
    li.classList.toggle("is-error", Boolean(data.is_error));
    const spinner = li.querySelector(".spinner");
    if (spinner) spinner.remove();
    li.querySelector(".action b").textContent = data.is_error ? "Failed: " : "Ran: ";
    const after = `returned after ${data.latency_ms} ms`;
    li.querySelector(".meta").textContent = `${li.dataset.callId} · ${after}; its output follows…`;
  }

  function liveEvents(v, source) {
    const on = (name, handle) => source.addEventListener(name, (event) => {
      let data;
      try {
        data = JSON.parse(event.data);
      } catch (error) {
        return;
      }
      handle(v, data || {});
    });
    on("assistant.delta", onDelta);
    on("assistant.retry", onRetry);
    on("tool.started", onToolStarted);
    on("tool.finished", onToolFinished);
  }

  // --- a step run: this page advances it ---------------------------------------------------------------------------

  async function drive(v) {
    await watch(v);
    let run = await refresh(v);
    while (run.status === "running" && current(v)) {
      showStatus(`Running… (turn ${run.turns} of ${run.max_turns})`);
      await api("POST", `/api/v1/runs/${run.id}/advance`, {});
      run = await refresh(v);
      dropLive(v, () => true); // the unit is over: what it showed in progress is in its steps now
    }
    if (!current(v)) return;
    if (run.status === "awaiting_approval") return pause(v, run);
    finish(v, run);
  }

  // The stream beside a driven run: the reply as it is written during each advance, and the steps (those the page
  // reads itself are not shown twice). The page drives the run whatever the stream does; the first advance waits a
  // little for the stream to open, so it misses none of that unit's words.
  function watch(v) {
    if (v.source || !current(v) || v.run.status === "done") return Promise.resolve();
    const source = new EventSource(`/api/v1/runs/${v.run.id}/events`);
    v.source = source;
    liveEvents(v, source);
    source.addEventListener("step", (event) => addSteps(v, [JSON.parse(event.data)]));
    source.addEventListener("run", (event) => current(v) && committedTurns(v, JSON.parse(event.data).turns));
    source.addEventListener("done", () => {
      source.close(); // the page's own reads finish the run on screen
      if (current(v) && v.source === source) $("trace").dataset.stream = "closed";
    });
    source.addEventListener("error", () => {
      const refused = source.readyState === EventSource.CLOSED; // else it reconnects by itself (Last-Event-ID)
      if (refused && current(v) && v.source === source) $("trace").dataset.stream = "closed";
    });
    return new Promise((resolve) => {
      source.addEventListener("open", () => {
        if (current(v) && v.source === source) $("trace").dataset.stream = "open";
        resolve();
      });
      setTimeout(resolve, 2000);
    });
  }

  function pause(v, run) {
    dropLive(v, () => true); // nothing is in progress while a call waits for a decision
    updateTurn(run);
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
    liveEvents(v, source);
    source.addEventListener("open", () => current(v) && ($("trace").dataset.stream = "open"));
    source.addEventListener("step", (event) => addSteps(v, [JSON.parse(event.data)]));
    source.addEventListener("run", (event) => {
      if (!current(v)) return;
      const run = JSON.parse(event.data);
      committedTurns(v, run.turns);
      progress(v, run);
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
    updateTurn(run);
    $("status").dataset.status = run.status;
    if (run.status === "awaiting_approval") return pause(v, run);
    $("approval").hidden = true;
    if (run.status === "queued") showStatus("Queued: waiting for a worker…");
    if (run.status === "running") showStatus("Running…");
  }

  function finish(v, run) {
    if (!current(v)) return;
    closeView();
    dropLive(v, () => true);
    v.run = run;
    $("status").dataset.status = run.status;
    showStatus(`Done: ${run.stop_reason} after ${run.turns} turn(s).`);
    $("status").dataset.stopReason = run.stop_reason;
    if (run.output !== null) {
      $("final").hidden = false;
      $("final-answer").replaceChildren(formatted(run.output));
    }
    busy(false);
    loadRecent().catch(() => {});
    if (run.thread_id && run.thread_id === chat.id) answered(run);
  }

  // What went wrong, in words: a busy thread (409) and a refused request (400) say what to do about it.
  function problem(error) {
    if (error.status === 409) {
      return "Can't start this run yet: the conversation's latest run has not finished. " +
        `Wait for it to finish (or cancel it), then try again. (${error.message})`;
    }
    if (error.status === 400) {
      const gone = error.data && error.data.thread_id;
      return `The request was refused: ${error.message.replace(/\.$/, "")}.` +
        (gone ? " This conversation no longer exists: start a new conversation." : "");
    }
    return `Error: ${error.message}`;
  }

  function fail(error) {
    showStatus(problem(error), String(error.status || "error"));
    busy(false);
    if (chat.id !== null) $("followup-form").hidden = false; // the typed follow-up is still there to retry
  }

  // --- starting a run, opening a recent one ---------------------------------------------------------------------

  function runBody(input, threadId) {
    const agent = $("agent") ? $("agent").value : "";
    if (agent) {  // the agent's own provider, protocol and budget apply (the server merges them)
      return { input, thread_id: threadId, agent, mode: $("mode").value };
    }
    return {
      input,
      thread_id: threadId,
      provider: $("provider").value,
      protocol: $("protocol").value,
      max_turns: Number($("max_turns").value),
      mode: $("mode").value,
    };
  }

  // The first run of a conversation: a new thread, then the run in it.
  async function start() {
    const ticket = ++opening;
    busy(true);
    showStatus("Starting…");
    const thread = await api("POST", "/api/v1/threads", {});
    let run;
    try {
      run = await api("POST", "/api/v1/runs", runBody(await inputValue($("input").value, $("images")), thread.id));
    } catch (error) {
      api("DELETE", `/api/v1/threads/${thread.id}`).catch(() => {}); // nothing was asked in it: not kept
      throw error;
    }
    if (ticket !== opening) return;
    setConversation(thread.id, []);
    launch(run);
  }

  // A follow-up: a new run in the same thread.
  async function followUp() {
    const ticket = ++opening;
    busy(true);
    showStatus("Starting…");
    const input = await inputValue($("followup-input").value, $("followup-images"));
    const run = await api("POST", "/api/v1/runs", runBody(input, chat.id));
    if (ticket !== opening) return;
    $("followup-input").value = "";
    showLength($("followup-input"), $("followup-count"));
    if ($("followup-images")) $("followup-images").value = "";
    launch(run);
  }

  function launch(run) {
    const v = newView(run, run.mode === "step");
    $("followup-form").hidden = true;
    chat.runs.push(run); // the question shows at once; its answer when the run is done
    renderConversation();
    history.replaceState(null, "", `#run-${run.id}`);
    loadRecent().catch(() => {});
    if (v.driving) return drive(v);
    $("run-button").disabled = false; // a worker runs it: the page is free to start another conversation
    progress(v, run);
    follow(v);
  }

  // --- the conversation: each run's input and output, oldest first --------------------------------------------------

  function setConversation(id, runs) {
    chat = { id, runs, listed: new Set() };
    const on = id !== null;
    $("conversation").hidden = !on;
    $("conversation").dataset.threadId = id || "";
    // In a conversation the next question is a follow-up: the options go with it, beside its button, and the first
    // goal's form goes (it used to stay, options and all but its button, between the conversation and the trace).
    $("run-form").hidden = on;
    if (on) $("followup-options").appendChild($("options"));
    else $("run-form").insertBefore($("options"), $("run-form").querySelector(".actions"));
    $("followup-form").hidden = true;
    renderConversation();
  }

  function textLine(label, text, className) {
    const div = document.createElement("div");
    div.className = className;
    const b = document.createElement("b");
    b.textContent = label + " ";
    const span = document.createElement("span");
    span.className = "text";
    span.textContent = String(text ?? "");
    div.append(b, span);
    return div;
  }

  function answerText(run) {
    if (run.output !== null && run.output !== undefined) return run.output;
    if (run.status === "done") return `(no answer: ${run.stop_reason})`;
    return run.status === "awaiting_approval" ? "(waiting for approval…)" : `(${run.status}…)`;
  }

  function turnEntry(run) {
    const li = document.createElement("li");
    li.className = "turn";
    li.dataset.runId = run.id;
    li.dataset.status = run.status;
    const link = document.createElement("a");
    link.className = "open-run meta";
    link.href = `#run-${run.id}`;
    link.dataset.runId = run.id;
    link.textContent = "trace";
    li.append(textLine("You:", inputText(run.input), "question"), ...thumbnails(run.input));
    li.append(textLine("Agent:", answerText(run), "answer"), link);
    return li;
  }

  function renderConversation() {
    const count = chat.runs.length;
    const runs = `${count} run${count === 1 ? "" : "s"}`;
    $("thread-meta").textContent = chat.id ? `thread ${chat.id.slice(0, 8)} · ${runs}` : "";
    $("turns").replaceChildren(...chat.runs.map(turnEntry));
  }

  // The conversation's entry for a run whose status changed (paused, running again, done).
  function updateTurn(run) {
    if (!run.thread_id || run.thread_id !== chat.id) return;
    const i = chat.runs.findIndex((r) => r.id === run.id);
    i >= 0 ? (chat.runs[i] = run) : chat.runs.push(run);
    renderConversation();
  }

  // A run of the conversation finished: show its answer now, then the thread as the server has it; offer a follow-up.
  function answered(run) {
    updateTurn(run);
    $("followup-form").hidden = false;
    loadConversation(chat.id).catch(() => {});
  }

  async function loadConversation(id) {
    const thread = await api("GET", `/api/v1/threads/${id}`);
    if (chat.id !== id) return; // started over meanwhile
    const known = new Set(thread.runs.map((r) => r.id));
    // A run started since stays listed; one the server listed before and no longer does was deleted meanwhile.
    chat.runs = thread.runs.concat(chat.runs.filter((r) => !known.has(r.id) && !chat.listed.has(r.id)));
    chat.listed = known;
    renderConversation();
  }

  function newConversation() {
    ++opening; // a run still being created or opened is dropped
    closeView();
    view = blankView(null, false);
    setConversation(null, []);
    $("current-run").hidden = true;
    $("trace").replaceChildren();
    $("final").hidden = true;
    $("approval").hidden = true;
    delete $("status").dataset.stopReason;
    delete $("status").dataset.status;
    showStatus("");
    busy(false);
    history.replaceState(null, "", window.location.pathname + window.location.search);
    markRecent();
    $("input").value = "";
    showLength($("input"), $("input-count"));
    if ($("images")) $("images").value = "";
    $("input").focus();
  }

  async function openRun(id) {
    const ticket = ++opening;
    const run = await api("GET", `/api/v1/runs/${id}`);
    if (ticket !== opening) return;
    const v = newView(run, false);
    busy(false);
    setConversation(run.thread_id || null, run.thread_id ? [run] : []); // the run's own conversation, if any
    if (run.thread_id && run.status !== "done") loadConversation(run.thread_id).catch(() => {}); // else finish() does
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
    const images = Array.isArray(run.input) ? run.input.filter((p) => p.type === "image").length : 0;
    link.textContent = clip(inputText(run.input), 80) + (images ? ` [${images} image${images > 1 ? "s" : ""}]` : "");
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
    const page = await api("GET", "/api/v1/runs?limit=10&mine=true"); // a reviewer's list too: their own runs
    const none = document.createElement("li");
    none.className = "meta";
    none.textContent = "None yet: the runs you start appear here.";
    $("recent").replaceChildren(...(page.results.length ? page.results.map(recentEntry) : [none]));
    markRecent();
  }

  $("run-form").addEventListener("submit", (event) => {
    event.preventDefault();
    if (fits($("input"), "goal")) start().catch(fail);
  });
  function openClicked(event) {
    const link = event.target.closest("a.open-run");
    if (!link) return;
    event.preventDefault();
    history.replaceState(null, "", `#run-${link.dataset.runId}`);
    openRun(link.dataset.runId).catch(fail);
  }
  $("recent").addEventListener("click", openClicked);
  $("turns").addEventListener("click", openClicked);
  $("followup-form").addEventListener("submit", (event) => {
    event.preventDefault();
    if (fits($("followup-input"), "follow-up")) followUp().catch(fail);
  });
  for (const [textarea, counter] of [[$("input"), $("input-count")], [$("followup-input"), $("followup-count")]]) {
    textarea.addEventListener("input", () => showLength(textarea, counter));
    showLength(textarea, counter);
  }
  $("new-conversation").addEventListener("click", newConversation);
  $("approve-button").addEventListener("click", () => decide(true).catch(fail));
  $("deny-button").addEventListener("click", () => decide(false).catch(fail));
  loadRecent().catch(() => {});
  const linked = RUN_HASH.exec(window.location.hash);
  if (linked) openRun(linked[1]).catch(fail);
})();
