"""The playground's recent runs open their traces; a background run is followed live over its event stream; the
admin's Approve / Deny buttons are admin buttons. Real browser (Debian's Chromium), real worker (db_worker)."""

from __future__ import annotations

import re

from django.core.management import call_command
from playwright.sync_api import expect

from tests.browser.conftest import login
from tests.conftest import client_for, make_user
from tests.console.conftest import model_step, start_and_pause, stored_run, tool_step

DDG_ANSWER = {"Heading": "Django", "AbstractText": "Django is a Python web framework."}
ANSWER = "Django: Django is a Python web framework."
MARKUP = '<img src=x onerror="window.__xss=1"> <b>bold</b>'
RUN_URL = re.compile(r"/api/v1/runs/[0-9a-f-]{36}/?$")
EVENTS_URL = re.compile(r"/api/v1/runs/[0-9a-f-]{36}/events/?$")


def work() -> None:
    """What `manage.py db_worker` does, once: every queued task, then stop."""
    call_command("db_worker", "--batch", "--no-reload", "--no-startup-delay", verbosity=0)


def record_requests(page) -> list[str]:
    """'METHOD path' of every request the page makes from now on."""
    seen: list[str] = []
    page.on("request", lambda request: seen.append(f"{request.method} {re.sub(r'^https?://[^/]+', '', request.url)}"))
    return seen


def no_xss(page) -> None:
    page.wait_for_timeout(200)  # give a would-be onerror handler its chance
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.locator("img").count() == 0
    assert page.locator('b:text-is("bold")').count() == 0  # the page's own <b> labels are fine; this one is text


def calculator_run(owner):
    run = stored_run(owner, input="What is 12*7?", output="84", turns=2)
    model_step(run, thought="I need 12*7.", tool_calls=[{"id": "c1", "name": "calculator", "arguments": {"a": 1}}])
    tool_step(run, name="calculator", arguments={"expression": "12*7"}, output="84")
    model_step(run, thought="Done.", final_answer="84")
    return run


def markup_run(owner):
    run = stored_run(owner, input=f"look up {MARKUP}", output=f"answer {MARKUP}", turns=1)
    tool_step(run, name="search", arguments={"query": MARKUP}, output=f"found {MARKUP}")
    model_step(run, thought=f"thinking {MARKUP}", final_answer=f"answer {MARKUP}")
    return run


def test_clicking_a_recent_run_shows_its_trace(new_page, artifacts):
    alice, bob = make_user("alice"), make_user("bob")
    calc = calculator_run(alice)
    markup = markup_run(alice)
    stored_run(bob, input="bob's secret goal")
    page = new_page()
    login(page, "alice")
    links = page.locator("#recent a.open-run")
    expect(links).to_have_count(2)  # newest first; bob's run is not listed
    expect(links.nth(0)).to_have_text(f"look up {MARKUP}")
    expect(page.locator("#trace li.step")).to_have_count(0)
    requests = record_requests(page)

    links.nth(1).click()
    expect(page.locator("#trace li.step")).to_have_count(3)
    expect(page.locator("#trace li.step .action")).to_contain_text("calculator")
    expect(page.locator("#trace li.step .observation")).to_have_text("Observation: 84")
    expect(page.locator("#final-answer")).to_have_text("84")
    expect(page.locator("#status")).to_have_attribute("data-stop-reason", "final_answer")
    expect(page.locator("#run-goal")).to_have_text("What is 12*7?")
    expect(links.nth(1)).to_have_attribute("aria-current", "true")
    assert f"GET /api/v1/runs/{calc.pk}" in requests
    page.screenshot(path=str(artifacts / "playground-trace.png"), full_page=True)

    links.nth(0).click()  # another run replaces the trace on screen
    expect(page.locator("#run-goal")).to_have_text(f"look up {MARKUP}")
    expect(page.locator("#trace li.step")).to_have_count(2)
    expect(page.locator("#trace li.step .observation")).to_have_text(f"Observation: found {MARKUP}")
    expect(page.locator("#trace li.step").nth(1)).to_contain_text(f"thinking {MARKUP}")
    expect(page.locator("#final-answer")).to_have_text(f"answer {MARKUP}")
    expect(page).to_have_url(re.compile(rf"#run-{markup.pk}$"))
    no_xss(page)
    page.screenshot(path=str(artifacts / "playground-trace-markup.png"), full_page=True)

    page.reload()  # the address names the run: it opens again
    expect(page.locator("#trace li.step")).to_have_count(2)
    expect(page.locator("#final-answer")).to_have_text(f"answer {MARKUP}")
    assert page.errors == []


def test_a_background_run_streams_its_steps_live(new_page, ddg, artifacts):
    ddg.add("GET", "/", json=DDG_ANSWER, repeat=True)
    make_user("alice")
    reviewer = make_user("rita", staff=True, reviewer=True)
    page = new_page()
    login(page, "alice")
    requests = record_requests(page)
    page.fill("#input", "search django")
    page.select_option("#mode", "background")
    page.click("#run-button")
    expect(page.locator("#trace")).to_have_attribute("data-stream", "open")
    expect(page.locator("#status")).to_have_attribute("data-status", "queued")
    expect(page.locator("#status")).to_contain_text("Queued")
    expect(page.locator("#trace li.step")).to_have_count(0)
    page.evaluate("window.__samePage = true")

    work()  # the worker's first share: one model call, then the pause before `search`
    expect(page.locator("#status")).to_have_attribute("data-status", "awaiting_approval")
    expect(page.locator("#trace li.step")).to_have_count(1)
    expect(page.locator("#trace li.step .action")).to_contain_text('search {"query":"django"}')
    expect(page.locator("#approval-text")).to_contain_text("a staff reviewer must decide")
    expect(page.locator("#final")).to_be_hidden()
    page.screenshot(path=str(artifacts / "playground-stream-paused.png"), full_page=True)

    from agents.models import Run

    run_id = Run.objects.get().pk
    decided = client_for(reviewer).post(f"/api/v1/runs/{run_id}/advance", {"approval": True}, format="json")
    assert decided.json()["status"] == "running"  # the tool ran; the next turn is the worker's
    expect(page.locator("#trace li.step")).to_have_count(3)  # the approval and the tool's output, pushed
    expect(page.locator("#trace li.kind-tool .observation")).to_have_text(f"Observation: {ANSWER}")
    expect(page.locator("#approval")).to_be_hidden()
    expect(page.locator("#status")).to_have_attribute("data-status", "running")
    expect(page.locator("#final")).to_be_hidden()

    work()
    expect(page.locator("#status")).to_have_attribute("data-stop-reason", "final_answer")
    expect(page.locator("#trace li.step")).to_have_count(4)
    expect(page.locator("#final-answer")).to_have_text(ANSWER)
    expect(page.locator("#trace")).to_have_attribute("data-stream", "closed")
    page.screenshot(path=str(artifacts / "playground-stream-done.png"), full_page=True)
    assert page.evaluate("window.__samePage") is True  # no reload: the page was pushed every step
    api_calls = [r for r in requests if "/api/v1/runs/" in r]
    assert [r for r in api_calls if EVENTS_URL.search(r)] == [f"GET /api/v1/runs/{run_id}/events"]
    assert not [r for r in api_calls if RUN_URL.search(r) or "/advance" in r]  # no polling, no driving
    assert page.errors == []


def test_admin_decision_buttons_are_admin_buttons(new_page, artifacts):
    alice = make_user("alice")
    make_user("root", staff=True, superuser=True)
    run = start_and_pause(alice)
    page = new_page()
    login(page, "root", next_url=f"/admin/agents/run/{run.pk}/change/")
    approve, deny = page.locator("#approve-button-1"), page.locator("#deny-button-1")
    close = page.locator("a.closelink")
    expect(approve).to_have_class(re.compile(r"\bbutton\b.*\bdefault\b"))
    expect(deny).to_have_class(re.compile(r"\bbutton\b"))
    expect(approve).to_have_css("background-color", "rgb(32, 80, 103)")  # the admin's --default-button-bg
    expect(deny).to_have_css("background-color", "rgb(186, 33, 33)")  # the admin's --delete-button-bg
    for button in (approve, deny):
        expect(button).to_have_css("padding", "10px 15px")
        expect(button).to_have_css("color", "rgb(255, 255, 255)")
        assert round(button.bounding_box()["height"]) == round(close.bounding_box()["height"])  # as the admin's
    page.locator("#pending-approval").screenshot(path=str(artifacts / "admin-decision-buttons.png"))
    page.screenshot(path=str(artifacts / "admin-run-decision.png"), full_page=True)

    page.goto("/admin/agents/run/")
    expect(page.locator("#result_list td.field-input_summary")).to_have_text("search django")
    page.screenshot(path=str(artifacts / "admin-run-list.png"), full_page=True)
    assert page.errors == []
