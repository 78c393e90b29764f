"""The work in progress, live (issue 32): the playground and the admin run page show the model's reply as it is
written and a tool while it runs, then the committed step in its place. Real browser (Debian's Chromium), the demo
model writing word by word (AGENT_DEMO_WORD_PAUSE_S), a real worker (db_worker) in a thread of its own."""

from __future__ import annotations

import threading
from unittest import mock

from django.core.management import call_command
from django.db import connection
from django_tasks_db.management.commands import db_worker
from playwright.sync_api import expect

from tests.browser.conftest import login
from tests.conftest import make_user

ARITHMETIC = "What is 12*7?"
TURN_1 = 'Thought: I need to compute 12*7.\nAction: calculator\nAction Input: {"expression": "12*7"}'
TURN_2 = "Thought: I now know the final answer.\nFinal Answer: 84"
MARKUP = '<img src=x onerror="window.__xss=1"> <b>bold</b>'
ABSTRACT = f"{MARKUP} is shown as text, never as markup."  # words after the markup: time to look at it
COMMITTED = "#trace li.step:not(.live)"
LIVE = "#trace li.live"
# What the page shows right now, read at once (the run goes on while a test looks).
SNAPSHOT = """() => ({
  committed: [...document.querySelectorAll('#trace li.step:not(.live)')].map((li) => li.className),
  live: [...document.querySelectorAll('#trace li.live')].map((li) => li.className),
  text: [...document.querySelectorAll('#trace li.live .live-text')].map((el) => el.textContent),
})"""


def work_in_thread() -> threading.Thread:
    """What `manage.py db_worker` does, once, beside the test: the page is watched while the worker runs."""

    def work() -> None:
        try:
            # Signal handlers can be set on the main thread only: this worker is stopped by its batch ending.
            with mock.patch.object(db_worker.Worker, "configure_signals", lambda worker: None):
                call_command("db_worker", "--batch", "--no-reload", "--no-startup-delay", verbosity=0)
        finally:
            connection.close()

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    return thread


def test_a_background_run_shows_the_reply_as_it_is_written(new_page, settings, artifacts):
    settings.AGENT_DEMO_WORD_PAUSE_S = 0.2  # TURN_1 is 12 words: about 2.2 s to write
    make_user("alice")
    page = new_page()
    login(page, "alice")
    page.fill("#input", ARITHMETIC)
    page.select_option("#protocol", "react")  # the react protocol writes its tool calls as text too
    page.select_option("#mode", "background")
    page.click("#run-button")
    expect(page.locator("#trace")).to_have_attribute("data-stream", "open")
    expect(page.locator("#status")).to_have_attribute("data-status", "queued")
    page.evaluate("window.__samePage = true")
    worker = work_in_thread()

    # Turn 1 while it is written: a few words on screen, nothing committed yet.
    expect(page.locator(f"{LIVE}.kind-model .live-text .text")).to_contain_text("Thought: I need")
    now = page.evaluate(SNAPSHOT)
    assert now["committed"] == [] and len(now["live"]) == 1, now
    [partial] = now["text"]
    written = partial.removeprefix("Writing: ")
    assert TURN_1.startswith(written) and "Action Input" not in written, now  # a part of it, as it came
    page.screenshot(path=str(artifacts / "playground-live-text.png"), full_page=True)

    # Turn 2 while it is written: turn 1's text has become its committed step (and the tool's), shown once.
    expect(page.locator(f"{LIVE} .live-text .text")).to_contain_text("Thought: I now")
    now = page.evaluate(SNAPSHOT)
    assert len(now["committed"]) == 2 and now["committed"][0].startswith("step kind-model"), now
    assert len(now["live"]) == 1 and "Final Answer: 84" not in now["text"][0], now
    assert TURN_2.startswith(now["text"][0].removeprefix("Writing: ")), now
    expect(page.locator(COMMITTED).first).to_contain_text("Thought: I need to compute 12*7.")
    expect(page.locator(f"{COMMITTED} .action")).to_contain_text('calculator {"expression":"12*7"}')

    expect(page.locator("#status")).to_have_attribute("data-stop-reason", "final_answer")
    worker.join(30)
    expect(page.locator(COMMITTED)).to_have_count(3)
    expect(page.locator(LIVE)).to_have_count(0)
    expect(page.locator("#final-answer")).to_have_text("84")
    trace = page.locator("#trace").inner_text()
    assert trace.count("I need to compute 12*7.") == 1 and trace.count("I now know the final answer.") == 1, trace
    assert "Writing:" not in trace
    assert page.evaluate("window.__samePage") is True  # pushed live, never reloaded
    assert page.errors == []


def test_a_step_run_streams_while_the_page_drives_it_and_a_running_tool_spins(new_page, ddg, settings, artifacts):
    settings.AGENT_DEMO_WORD_PAUSE_S = 0.2
    ddg.add("GET", "/", json={"Heading": "Django", "AbstractText": ABSTRACT}, repeat=True, delay_s=1.5)
    make_user("rita", staff=True, reviewer=True)  # a reviewer: the playground lets her approve the call
    page = new_page()
    login(page, "rita")
    page.fill("#input", "search django")
    page.select_option("#protocol", "react")
    page.click("#run-button")  # step mode: this page drives the run
    expect(page.locator("#approval-buttons")).to_be_visible()  # turn 1 ran with the run's creation
    expect(page.locator("#trace")).to_have_attribute("data-stream", "open")  # the stream is open beside the driving
    expect(page.locator(COMMITTED)).to_have_count(1)
    expect(page.locator(LIVE)).to_have_count(0)

    page.click("#approve-button")
    spinner = page.locator(f"{LIVE}.kind-tool.running .spinner")
    expect(spinner).to_be_visible()  # the search answers after 1.5 s: it is running
    assert page.evaluate("getComputedStyle(document.querySelector('#trace .spinner')).animationName") == "spin"
    expect(page.locator(f"{LIVE}.kind-tool .action")).to_contain_text('search {"query":"django"}')
    assert page.locator(f"{COMMITTED}.kind-tool").count() == 0  # no output yet
    page.screenshot(path=str(artifacts / "playground-live-tool.png"), full_page=True)

    answer = f"Django: {ABSTRACT}"
    observation = page.locator(f"{COMMITTED}.kind-tool .observation")
    expect(observation).to_have_text(f"Observation: {answer}")  # the committed step took the running tool's place
    expect(page.locator("#trace .spinner")).to_have_count(0)
    expect(page.locator(f"{LIVE}.kind-tool")).to_have_count(0)

    # The next advance: the final answer as it is written (the page opened the stream before driving, so all of it).
    expect(page.locator(f"{LIVE}.kind-model .live-text .text")).to_contain_text("<b>bold</b>")  # markup is text
    now = page.evaluate(SNAPSHOT)
    assert len(now["committed"]) == 3 and len(now["live"]) == 1, now
    written = now["text"][0].removeprefix("Writing: ")
    final = f"Thought: I have the tool's answer.\nFinal Answer: {answer}"
    assert final.startswith(written) and written.startswith("Thought: I have") and written != final, now
    assert page.locator("#trace img").count() == 0 and page.locator("#trace .live-text b").count() == 1  # the label

    expect(page.locator("#status")).to_have_attribute("data-stop-reason", "final_answer")
    expect(page.locator("#final-answer")).to_have_text(answer)
    expect(page.locator(LIVE)).to_have_count(0)
    kinds = page.locator(COMMITTED).evaluate_all("(lis) => lis.map((li) => li.className)")
    assert kinds == ["step kind-model", "step kind-approval", "step kind-tool", "step kind-model"], kinds
    expect(page.locator("#trace")).to_have_attribute("data-stream", "closed")
    assert page.locator("#trace").inner_text().count("I have the tool's answer.") == 1
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert ddg.count("GET", "/") == 1
    assert page.errors == []


def test_the_admin_page_of_a_running_run_shows_its_live_text(new_page, settings, artifacts):
    from agents.runs import submit

    settings.AGENT_DEMO_WORD_PAUSE_S = 0.2
    alice = make_user("alice")
    make_user("root", staff=True, superuser=True)
    options = submit.RunOptions(input=ARITHMETIC, mode="background", protocol="react", provider="demo")
    run = submit.submit_run(owner=alice, options=options)
    page = new_page()
    login(page, "root", next_url=f"/admin/agents/run/{run.pk}/change/")
    trace = page.locator("#trace")
    expect(trace).to_have_attribute("data-stream", "open")
    expect(trace).to_have_attribute("data-status", "queued")
    expect(page.locator("#no-steps")).to_be_visible()
    page.evaluate("window.__samePage = true")
    worker = work_in_thread()

    pre = page.locator(f"{LIVE}.kind-model pre.live-text")
    expect(pre).to_contain_text("Thought: I need")
    written = pre.inner_text()
    assert TURN_1.startswith(written) and "Action Input" not in written, written  # partial: still being written
    assert page.locator("#trace li.step:not(.live)").count() == 0
    assert page.locator("#no-steps").count() == 0
    expect(trace).to_have_attribute("data-status", "running")  # the worker took it: the status field says so
    expect(page.locator(".field-status .readonly")).to_have_text("Running")
    assert page.evaluate("window.__samePage") is True  # shown in place, not by a reload
    page.screenshot(path=str(artifacts / "admin-run-live-text.png"), full_page=True)

    # Each committed step reloads the page, which shows it as stored; at the run's end the page no longer follows.
    expect(page.locator("#trace .final-answer")).to_have_text("84", timeout=20_000)
    worker.join(30)
    expect(page.locator("#trace li.step")).to_have_count(3)
    expect(page.locator(LIVE)).to_have_count(0)
    assert trace.get_attribute("data-events") is None and trace.get_attribute("data-status") == "done"  # not followed
    assert page.evaluate("typeof window.__samePage") == "undefined"
    assert page.locator("#trace").inner_text().count("I need to compute 12*7.") == 1
    assert page.errors == []
