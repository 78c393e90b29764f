"""The playground at `/` and the admin run page, in a real browser (headless Chromium via Playwright)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import login
from tests.conftest import make_user

ARITHMETIC = "What is 12*7, plus 1?"
DDG_ANSWER = {"Heading": "Django", "AbstractText": "Django is a Python web framework."}
ANSWER = "Django: Django is a Python web framework."
XSS_QUERY = "<script>window.__xss=1</script>"
XSS_ABSTRACT = '<img src=x onerror="window.__xss=1"> and <b>bold</b>'


def run(page, goal: str) -> None:
    page.fill("#input", goal)
    expect(page.locator("#provider")).to_have_value("demo")
    page.click("#run-button")


def no_xss(page) -> None:
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert page.locator("script:has-text('__xss')").count() == 0
    assert page.locator("img[src='x']").count() == 0


def test_arithmetic_run_in_the_playground(new_page, artifacts):
    make_user("alice")
    page = new_page()
    login(page, "alice")
    expect(page.locator("h1")).to_have_text("Agent playground")
    expect(page.locator("#whoami")).to_have_text("alice")
    run(page, ARITHMETIC)
    expect(page.locator("#status")).to_have_attribute("data-stop-reason", "final_answer")
    expect(page.locator("#status")).to_contain_text("Done: final_answer")
    actions = page.locator("#trace li.step .action")
    expect(actions.first).to_contain_text("calculator")
    expect(actions).to_have_count(2)  # 12*7, then 84+1
    expect(page.locator("#trace li.step .observation").first).to_contain_text("84")
    expect(page.locator("#final-answer")).to_have_text("85")
    expect(page.locator("#final")).to_be_visible()
    expect(page.locator("#approval")).to_be_hidden()
    expect(page.locator("#recent li").first).to_contain_text(ARITHMETIC)
    expect(page.locator("#recent li").first).to_contain_text("85")
    page.screenshot(path=str(artifacts / "playground.png"), full_page=True)
    assert page.errors == []


def test_user_waits_for_staff_who_approve_in_the_admin(new_page, ddg, artifacts):
    ddg.add("GET", "/", json=DDG_ANSWER, repeat=True)
    make_user("alice")
    make_user("rita", staff=True, reviewer=True)

    user = new_page()
    login(user, "alice")
    run(user, "search django")
    expect(user.locator("#approval")).to_be_visible()
    expect(user.locator("#approval-text")).to_contain_text('Waiting for approval: search {"query":"django"}')
    expect(user.locator("#approval-text")).to_contain_text("a staff reviewer must decide")
    expect(user.locator("#approval-buttons")).to_be_hidden()
    expect(user.locator("#approve-button")).to_be_hidden()
    expect(user.locator("#status")).to_contain_text("Paused")
    user.screenshot(path=str(artifacts / "playground-awaiting.png"), full_page=True)

    staff = new_page()
    login(staff, "rita", next_url="/admin/agents/pendingapproval/")
    row = staff.locator("#result_list tbody tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("search")
    expect(row).to_contain_text('{"query": "django"}')
    row.locator("a").first.click()
    expect(staff).to_have_url(re.compile(r"/admin/agents/run/[0-9a-f-]{36}/change/$"))
    expect(staff.locator("#pending-approval")).to_contain_text("Waiting for approval: search")
    staff.screenshot(path=str(artifacts / "admin-run-pending.png"), full_page=True)
    staff.fill("#id_reason_1", "fine by me")
    staff.click("#approve-button-1")
    expect(staff.locator(".messagelist")).to_contain_text("the run is now done")
    expect(staff.locator("#pending-approval")).to_have_count(0)
    expect(staff.locator("#trace .final-answer")).to_have_text(ANSWER)
    expect(staff.locator("#trace li.kind-approval")).to_contain_text("by rita — fine by me")
    expect(staff.locator("#trace li.kind-tool .tool-output")).to_have_text(ANSWER)
    staff.screenshot(path=str(artifacts / "admin-run.png"), full_page=True)

    # the user's page was polling: it carries on and shows the answer
    expect(user.locator("#status")).to_have_attribute("data-stop-reason", "final_answer", timeout=10_000)
    expect(user.locator("#final-answer")).to_have_text(ANSWER)
    expect(user.locator("#approval")).to_be_hidden()
    assert ddg.count("GET", "/") == 1
    assert user.errors == [] and staff.errors == []


def test_tool_output_with_markup_is_shown_as_text(new_page, ddg, artifacts):
    ddg.add("GET", "/", json={"Heading": XSS_QUERY, "AbstractText": XSS_ABSTRACT}, repeat=True)
    make_user("rita", staff=True, reviewer=True)
    page = new_page()
    login(page, "rita")
    run(page, f"search {XSS_QUERY}")
    expect(page.locator("#approval-buttons")).to_be_visible()  # a reviewer may decide on the playground
    expect(page.locator("#approval-text")).to_contain_text(XSS_QUERY)
    page.click("#approve-button")
    expect(page.locator("#status")).to_have_attribute("data-stop-reason", "final_answer")
    expected = f"{XSS_QUERY}: {XSS_ABSTRACT}"
    expect(page.locator("#final-answer")).to_have_text(expected)
    expect(page.locator("#trace .observation")).to_contain_text(XSS_ABSTRACT)
    expect(page.locator("#recent li").first).to_contain_text(XSS_QUERY)
    expect(page.locator("#turns li.turn .question .text")).to_have_text(f"search {XSS_QUERY}")  # the conversation
    expect(page.locator("#turns li.turn .answer .text")).to_have_text(expected)
    page.wait_for_timeout(200)  # give a would-be onerror handler its chance
    no_xss(page)
    assert page.locator("#final-answer b").count() == 0  # <b> is not markup either
    assert page.locator("#turns b").count() == 2  # the "You:" and "Agent:" labels, nothing from the run
    page.screenshot(path=str(artifacts / "playground-markup.png"), full_page=True)

    from agents.models import Run

    run_id = Run.objects.get().pk
    page.goto(f"/admin/agents/run/{run_id}/change/")
    expect(page.locator("#trace .final-answer")).to_have_text(expected)
    expect(page.locator("#trace li.kind-tool .tool-output")).to_have_text(expected)
    expect(page.locator("#trace li.kind-model").first).to_contain_text(XSS_QUERY)
    page.wait_for_timeout(200)
    no_xss(page)
    assert page.locator("#trace b").count() == 0
    page.screenshot(path=str(artifacts / "admin-run-markup.png"), full_page=True)
    assert page.errors == []


def test_admin_rejects_bad_arguments_then_denies(new_page, ddg):
    make_user("alice")
    make_user("root", staff=True, superuser=True)
    user = new_page()
    login(user, "alice")
    run(user, "search django")
    expect(user.locator("#approval")).to_be_visible()

    from agents.models import Run

    run_id = Run.objects.get().pk
    staff = new_page()
    login(staff, "root", next_url=f"/admin/agents/run/{run_id}/change/")
    staff.fill("#id_arguments_1", '{"query": 5}')
    staff.click("#approve-button-1")
    expect(staff.locator(".messagelist .error")).to_contain_text("do not fit the tool's schema")
    expect(staff.locator("#pending-approval")).to_be_visible()  # nothing recorded: still waiting
    staff.fill("#id_arguments_1", "{not json")
    staff.click("#deny-button-1")
    expect(staff.locator(".messagelist .error")).to_contain_text("not valid JSON")
    staff.fill("#id_arguments_1", "")
    staff.fill("#id_reason_1", "not today")
    staff.click("#deny-button-1")
    expect(staff.locator(".messagelist .success")).to_contain_text("the run is now done")
    expect(staff.locator("#trace li.kind-approval")).to_contain_text("Denied search by root — not today")
    expect(staff.locator("#trace .final-answer")).to_contain_text("a reviewer denied the call")
    expect(user.locator("#final-answer")).to_contain_text("a reviewer denied the call", timeout=10_000)
    expect(user.locator("#trace")).to_contain_text("search denied by root — not today")
    assert ddg.requests == []  # denied: the tool never ran
    assert user.errors == [] and staff.errors == []


@pytest.mark.parametrize("username", ["alice"])
def test_playground_needs_login(new_page, username):
    make_user(username)
    page = new_page()
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/$"))
    page.fill("#id_username", username)
    page.fill("#id_password", "wrong")
    page.click("#login-button")
    expect(page.locator(".error")).to_contain_text("didn't match")


CONVERSATION = [(ARITHMETIC, "85"), ("now divide that by 5", "17"), ("and add 2", "19")]


def follow_up(page, question: str) -> None:
    expect(page.locator("#followup-form")).to_be_visible()
    page.fill("#followup-input", question)
    page.click("#followup-button")


def test_a_conversation_continues_in_one_thread(new_page, artifacts):
    from agents.models import Run, Thread

    make_user("alice")
    page = new_page()
    login(page, "alice")
    expect(page.locator("#conversation")).to_be_hidden()
    expect(page.locator("#followup-form")).to_be_hidden()
    run(page, ARITHMETIC)
    turns = page.locator("#turns li.turn")
    expect(turns).to_have_count(1)
    expect(turns.nth(0).locator(".answer .text")).to_have_text("85")
    expect(page.locator("#goal-field")).to_be_hidden()  # the next question is a follow-up
    for number, (question, answer) in enumerate(CONVERSATION[1:], start=2):
        follow_up(page, question)
        expect(turns).to_have_count(number)
        expect(turns.nth(number - 1).locator(".answer .text")).to_have_text(answer)
        expect(page.locator("#final-answer")).to_have_text(answer)  # the latest run's trace, as before
        expect(page.locator("#status")).to_have_attribute("data-stop-reason", "final_answer")
    expect(turns.locator(".question .text")).to_have_text([q for q, _ in CONVERSATION])
    expect(turns.locator(".answer .text")).to_have_text([a for _, a in CONVERSATION])
    expect(page.locator("#thread-meta")).to_contain_text("3 runs")
    expect(page.locator("#trace li.step .action").first).to_contain_text("calculator")  # (85)+2, worked out
    page.screenshot(path=str(artifacts / "playground-conversation.png"), full_page=True)

    runs = list(Run.objects.order_by("created_at"))
    thread = Thread.objects.get()
    assert [(r.input, r.output) for r in runs] == CONVERSATION
    assert {r.thread_id for r in runs} == {thread.pk}  # three runs, one thread
    assert [t["input"] for t in runs[2].history] == [ARITHMETIC, "now divide that by 5"]
    expect(page.locator("#conversation")).to_have_attribute("data-thread-id", str(thread.pk))

    make_user("root", staff=True, superuser=True)
    staff = new_page()
    login(staff, "root", next_url=f"/admin/agents/thread/{thread.pk}/change/")
    expect(staff.locator("#thread-runs .run-output")).to_have_text([a for _, a in CONVERSATION])
    staff.screenshot(path=str(artifacts / "admin-thread.png"), full_page=True)
    staff.locator("#thread-runs a.run-link").last.click()  # the last run's trace, one click away
    expect(staff.locator("#trace .final-answer")).to_have_text("19")
    expect(staff.locator("#thread-link")).to_have_attribute("href", f"/admin/agents/thread/{thread.pk}/change/")
    assert staff.errors == []

    page.click("#new-conversation")
    expect(page.locator("#conversation")).to_be_hidden()
    expect(page.locator("#followup-form")).to_be_hidden()
    expect(page.locator("#trace li.step")).to_have_count(0)
    expect(page.locator("#goal-field")).to_be_visible()
    run(page, ARITHMETIC)
    expect(turns).to_have_count(1)
    expect(turns.nth(0).locator(".answer .text")).to_have_text("85")
    assert Thread.objects.count() == 2
    assert Run.objects.order_by("-created_at").first().thread_id != thread.pk
    assert page.errors == []


def test_a_run_deleted_elsewhere_leaves_the_conversation(new_page):
    """The conversation keeps a run it started itself until the server lists it, but a run the server listed before
    and no longer lists was deleted meanwhile: it goes (it stayed listed as "(running…)" for good)."""
    from agents.models import Run, Thread
    from tests.console.conftest import stored_run

    alice = make_user("alice")
    page = new_page()
    login(page, "alice")
    run(page, ARITHMETIC)
    answers = page.locator("#turns li.turn .answer .text")
    expect(answers).to_have_text("85")
    thread = Thread.objects.get()
    first = Run.objects.get(thread=thread)
    other = stored_run(
        alice, thread=thread, input="asked in another tab", status="running", stop_reason=None, output=None
    )
    page.goto(f"/?again#run-{first.pk}")  # opened again: the conversation is read with the other tab's run in it
    expect(answers).to_have_text(["85", "(running…)"])

    other.delete()  # deleted elsewhere (the admin, the API)
    follow_up(page, "now divide that by 5")
    expect(answers).to_have_text(["85", "17"])
    assert page.errors == []


def test_a_follow_up_on_a_busy_or_deleted_thread_says_why(new_page):
    from agents.models import Run, Thread
    from tests.console.conftest import stored_run

    alice = make_user("alice")
    page = new_page()
    login(page, "alice")
    run(page, ARITHMETIC)
    expect(page.locator("#turns li.turn .answer .text")).to_have_text("85")
    thread = Thread.objects.get()
    busy = stored_run(
        alice, thread=thread, input="asked in another tab", status="running", stop_reason=None, output=None
    )

    follow_up(page, "now divide that by 5")
    expect(page.locator("#status")).to_have_attribute("data-error", "409")
    expect(page.locator("#status")).to_contain_text("the conversation's latest run has not finished")
    expect(page.locator("#followup-form")).to_be_visible()
    expect(page.locator("#followup-input")).to_have_value("now divide that by 5")  # kept, to try again
    expect(page.locator("#followup-button")).to_be_enabled()
    assert Run.objects.filter(thread=thread).count() == 2  # nothing was created

    busy.delete()  # the other run is gone: the same follow-up now goes through
    page.click("#followup-button")
    expect(page.locator("#turns li.turn .answer .text")).to_have_text(["85", "17"])
    expect(page.locator("#status")).not_to_have_attribute("data-error", re.compile(".*"))

    Thread.objects.filter(pk=thread.pk).delete()  # deleted elsewhere (the API, the admin)
    follow_up(page, "and add 2")
    expect(page.locator("#status")).to_have_attribute("data-error", "400")
    expect(page.locator("#status")).to_contain_text("This conversation no longer exists: start a new conversation.")
    expect(page.locator("#status")).to_contain_text("refused: thread_id: No thread with this id. This conversation")
    assert not Run.objects.exists()
    assert page.errors == []
