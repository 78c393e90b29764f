"""The console and the playground at 1400 px in a real browser (issue 34, item 3): no page is cut off on the right
(the run list's table fits its box, its last header is on screen), each page's screenshot is a real PNG, the error
badge is a word, the usage chart shows the demo model's tokens, and the playground says a goal is too long, lists
only the user's own runs and keeps its options and its button with the follow-up form."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.sync_api import expect

from agents.evals.cases import load_cases
from agents.evals.runner import EvalConfig, run_evals
from agents.models import Agent, Run, Thread
from agents.runs import drive, submit
from tests.browser.conftest import login
from tests.conftest import make_user
from tests.console.conftest import DDG_ANSWER, add_step, start_and_pause, stored_run, tool_step

WIDE = {"width": 1400, "height": 900}
ARITHMETIC = "What is 12*7, plus 1?"
PNG = b"\x89PNG\r\n\x1a\n"

# The run list's table against its scrolling box, its last header against the window, and the page's own width.
FIT = """() => {
  const table = document.querySelector("#result_list");
  const headers = table ? table.querySelectorAll("thead th") : [];
  return {
    table: table ? table.scrollWidth : 0,
    box: table ? table.parentElement.clientWidth : 0,
    lastHeader: headers.length ? headers[headers.length - 1].getBoundingClientRect().right : 0,
    page: document.documentElement.scrollWidth,
    window: window.innerWidth,
  };
}"""


def snapshot(page, tmp_path: Path, artifacts: Path, name: str) -> Path:
    """A full-page screenshot in the test's temporary folder (checked: a non-empty PNG), kept in test-artifacts too."""
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    data = path.read_bytes()
    assert data.startswith(PNG) and len(data) > 10_000, name
    (artifacts / f"polish-{name}.png").write_bytes(data)
    return path


def assert_fits(page, name: str) -> None:
    sizes = page.evaluate(FIT)
    assert sizes["page"] <= sizes["window"], (name, sizes)  # no horizontal scroll of the page
    if sizes["table"]:
        assert sizes["table"] <= sizes["box"], (name, sizes)  # the run list is not cut off in its box
        assert sizes["lastHeader"] <= sizes["window"], (name, sizes)  # "created" is on screen


@pytest.fixture
def busy_console(ddg):
    """A console with what crowds it: a person's finished, paused and failed runs (one in a long-titled thread, on a
    long model name), an eval run's runs of its eval users, and an agent."""
    ddg.add("GET", "/", json=DDG_ANSWER, repeat=True)
    alice = make_user("alice")
    done = drive.execute(run_id=submit.start_run(owner=alice, options=submit.RunOptions(input=ARITHMETIC)).pk)
    paused = start_and_pause(alice)
    thread = Thread.objects.create(owner=alice, title="Planning a trip to the mountains of Switzerland in the winter")
    failed = stored_run(
        alice,
        input="Find the population of every city in France and sum them, then compare with Germany and Italy",
        thread=thread,
        provider="openrouter",
        model="anthropic/claude-3.5-sonnet-20241022",
        stop_reason="model_error",
        prompt_tokens=123_456,
        completion_tokens=7_890,
    )
    tool_step(failed, output="division by zero", is_error=True)
    add_step(failed, "error", message="The provider failed after 3 retries.")
    eval_run = run_evals(
        cases=load_cases(only="arith-*"), config=EvalConfig(provider="demo", cases_file="agents/evals/cases.yaml")
    )
    Agent.objects.create(name="helper")
    return {"done": done, "paused": paused, "failed": failed, "eval_run": eval_run}


def test_the_console_fits_1400_px(new_page, busy_console, tmp_path, artifacts):
    make_user("root", staff=True, superuser=True)
    page = new_page()
    page.set_viewport_size(WIDE)
    login(page, "root", next_url="/admin/agents/run/")
    runs = busy_console

    expect(page.locator("#result_list tbody tr")).to_have_count(3)  # alice's three; the eval runs are hidden
    headers = page.locator("#result_list thead th")
    for column in ("provider / model", "turns", "tokens", "duration", "created"):
        expect(headers.filter(has_text=column).first).to_be_in_viewport()
    expect(page.locator("#changelist-filter")).to_contain_text("By eval runs")
    expect(page.locator("#changelist-filter")).not_to_contain_text("eval-")  # no eval user in the owner filter
    assert_fits(page, "runs")
    shot = snapshot(page, tmp_path, artifacts, "runs")
    assert shot.stat().st_size > 0

    pages = {
        "runs-with-evals": "/admin/agents/run/?eval_runs=shown",
        "run-failed": f"/admin/agents/run/{runs['failed'].pk}/change/",
        "run-paused": f"/admin/agents/run/{runs['paused'].pk}/change/",
        "run-done": f"/admin/agents/run/{runs['done'].pk}/change/",
        "agents": "/admin/agents/agent/",
        "agent-form": "/admin/agents/agent/add/",
        "eval-runs": "/admin/agents/evalrun/",
        "eval-run": f"/admin/agents/evalrun/{runs['eval_run'].pk}/change/",
        "approvals": "/admin/agents/pendingapproval/",
        "threads": "/admin/agents/thread/",
        "index": "/admin/",
    }
    for name, url in pages.items():
        page.goto(url)
        assert_fits(page, name)
        snapshot(page, tmp_path, artifacts, name)
        if name == "runs-with-evals":
            expect(page.locator("#result_list tbody tr")).to_have_count(3 + runs["eval_run"].total)
        if name == "run-failed":
            badge = page.locator("#step-0 .badge-error")
            expect(badge).to_have_text("error")
            box = badge.bounding_box()
            assert box and 0 < box["width"] < 100 and box["height"] < 30  # a word in a pill, not an empty box
            expect(page.locator("#run-thread")).to_contain_text("Planning a trip")
        if name == "run-paused":
            title = f"run {str(runs['paused'].pk)[:8]} (awaiting approval)"  # words, not awaiting_approval
            expect(page.locator("#content h2").first).to_have_text(title)
        if name == "index":  # the demo model's tokens, counted: the chart is not empty offline
            assert int(page.locator("#tokens-today").inner_text().replace(",", "")) > 0
            today = page.locator("#usage-chart g.day.today rect.bar")
            assert today.bounding_box()["height"] > 0
    assert page.errors == []


def test_the_playground_at_1400_px(new_page, settings, tmp_path, artifacts):
    limit = settings.AGENT_MAX_INPUT_CHARS
    root = make_user("root", staff=True, superuser=True)
    other = stored_run(make_user("bob"), input="bob's own question")
    page = new_page()
    page.set_viewport_size(WIDE)
    login(page, "root")
    expect(page.locator("#recent")).to_contain_text("None yet")  # the admin has none: bob's run is not listed
    expect(page.locator("#recent")).not_to_contain_text("bob's own question")

    # A paste longer than the limit is kept whole and refused with the limit named, never cut without a word.
    page.focus("#input")
    page.keyboard.insert_text("x" * (limit + 1000))
    assert page.eval_on_selector("#input", "el => el.value.length") == limit + 1000
    expect(page.locator("#input-count")).to_have_text(
        f"{limit + 1000:,} / {limit:,} characters: 1,000 over the limit. Shorten it to send it."
    )
    expect(page.locator("#input-count")).to_have_class("counter meta over")
    page.click("#run-button")
    expect(page.locator("#status")).to_contain_text(f"the limit is {limit:,} (AGENT_MAX_INPUT_CHARS)")
    assert Run.objects.count() == 1  # bob's only: nothing was sent
    snapshot(page, tmp_path, artifacts, "playground-too-long")

    page.fill("#input", ARITHMETIC)
    expect(page.locator("#input-count")).to_have_text(f"{len(ARITHMETIC)} / {limit:,} characters")
    page.click("#run-button")
    expect(page.locator("#final-answer")).to_have_text("85")
    expect(page.locator("#recent li")).to_have_count(1)
    expect(page.locator("#recent")).to_contain_text(ARITHMETIC)

    # In the conversation the options sit in the follow-up form, with its button, below the trace.
    expect(page.locator("#run-form")).to_be_hidden()
    form = page.locator("#followup-form")
    expect(form.locator("#options")).to_be_visible()
    expect(form.locator("#followup-button")).to_be_visible()
    trace_bottom = page.locator("#trace").bounding_box()
    options_top = page.locator("#options").bounding_box()
    assert options_top["y"] >= trace_bottom["y"] + trace_bottom["height"]
    assert_fits(page, "playground")
    snapshot(page, tmp_path, artifacts, "playground-conversation")

    page.select_option("#protocol", "react")
    page.fill("#followup-input", "now divide that by 5")
    page.click("#followup-button")
    expect(page.locator("#final-answer")).to_have_text("17")
    assert Run.objects.filter(owner=root).order_by("-created_at").first().protocol == "react"  # the options apply

    page.click("#new-conversation")
    expect(page.locator("#run-form #options")).to_be_visible()  # back with the first goal's form
    expect(page.locator("#run-button")).to_be_visible()
    assert other.owner.username == "bob"
    assert page.errors == []
