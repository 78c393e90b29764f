"""Approvals v1.1 in the console: the queue shows every waiting call of a reply with its age and time left; the run
page decides the calls together or one by one (through services.decide_approval); expired approvals say so and can
be filtered."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.models import Run, Step
from agents.runs import review
from tests.conftest import make_user
from tests.console.conftest import (
    PENDING,
    RUNS,
    add_step,
    decide_url,
    logged_in,
    model_step,
    pause_three,
    run_page,
    stored_run,
)
from tests.console.test_approvals import _Forms

pytestmark = pytest.mark.django_db

NBSP = "\xa0"  # Django's timesince/timeuntil put one between a number and its unit


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def trace(run) -> list[dict]:
    return [s.as_event() for s in Step.objects.filter(run=run).order_by("index")]


def approvals(run) -> list[tuple]:
    return [(s["call_id"], s["approved"], s["reviewer"], s["reason"]) for s in trace(run) if s["kind"] == "approval"]


def searched(stub) -> list[str]:
    return [parse_qs(urlsplit(r.path).query)["q"][0] for r in stub.requests if r.method == "GET"]


class _Controls(HTMLParser):
    """The run page's decision controls: every <input>, <textarea> and <button> with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.controls: list[dict] = []

    def handle_starttag(self, tag, attrs):
        if tag in ("input", "textarea", "button"):
            self.controls.append({"tag": tag, **dict(attrs)})


def controls_of(html: str) -> list[dict]:
    parser = _Controls()
    parser.feed(html)
    return [c for c in parser.controls if c.get("form") == "decision-form"]


def posted_calls(client, run) -> dict[str, str]:
    """The hidden `call-<n>` fields of the page, as a browser would post them."""
    html = client.get(run_page(run)).content.decode()
    return {c["name"]: c["value"] for c in controls_of(html) if c.get("type") == "hidden"}


def paused_at(run, ago: timedelta) -> None:
    """Pretend the run paused `ago` ago (its calls expire approval_ttl_s after the pause)."""
    paused = timezone.now() - ago
    Run.objects.filter(pk=run.pk).update(
        updated_at=paused, approval_expires_at=paused + timedelta(seconds=run.approval_ttl_s)
    )


def three_call_row(owner, *, paused_ago=timedelta(minutes=5), history_steps: int = 0, word: str = "x"):
    """A stored paused run whose last reply asks for three sensitive searches (no engine needed)."""
    paused = timezone.now() - paused_ago
    run = stored_run(
        owner,
        status="awaiting_approval",
        stop_reason=None,
        output=None,
        approval_expires_at=paused + timedelta(days=1),
    )
    for i in range(history_steps):  # earlier turns: the queue must not need them
        model_step(run, tool_calls=[{"id": f"h{i}", "name": "calculator", "arguments": {"expression": "1+1"}}])
        add_step(run, "tool", call_id=f"h{i}", name="calculator", arguments={"expression": "1+1"}, output="2")
    calls = [{"id": f"s{i}", "name": "search", "arguments": {"query": f"{word} {i}"}} for i in range(3)]
    model_step(run, tool_calls=calls)
    return run


# --- the queue --------------------------------------------------------------------------------------------------------


def test_queue_shows_every_call_of_the_reply_with_age_and_time_left(superuser, alice, bob, llm):
    three = pause_three(alice, llm)
    paused_at(three, timedelta(minutes=90, seconds=30))
    single = three_call_row(bob, paused_ago=timedelta(minutes=10, seconds=30))
    Step.objects.filter(run=single).delete()
    model_step(single, tool_calls=[{"id": "only", "name": "search", "arguments": {"query": "alone"}}])

    response = logged_in(superuser).get(PENDING)
    assert [r.pk for r in response.context["cl"].result_list] == [three.pk, single.pk]  # oldest first
    html = response.content.decode()
    assert 'class="field-pending_tool">search<br>calculator<br>search<' in html
    arguments = re.search(r'class="field-pending_arguments">(.*?)</td>', html).group(1)
    assert arguments.split("<br>") == [
        "{&quot;query&quot;: &quot;django&quot;}",
        "{&quot;expression&quot;: &quot;2+2&quot;}",
        "{&quot;query&quot;: &quot;flask&quot;}",
    ]
    ages = re.findall(r'class="field-age">([^<]*)<', html)
    lefts = re.findall(r'class="field-time_left">([^<]*)<', html)
    assert ages == [f"1{NBSP}hour, 30{NBSP}minutes", f"10{NBSP}minutes"]
    assert lefts == [f"22{NBSP}hours, 29{NBSP}minutes", f"23{NBSP}hours, 49{NBSP}minutes"]
    for column in ("waiting_since", "age", "time_left"):
        assert f"column-{column}" in html


def test_queue_says_when_an_approval_has_expired(superuser, alice):
    due = three_call_row(alice, paused_ago=timedelta(days=1, minutes=1))
    fresh = three_call_row(alice, paused_ago=timedelta(seconds=30))
    html = logged_in(superuser).get(PENDING).content.decode()
    assert re.findall(r'class="field-time_left">([^<]*)<', html) == ["expired", f"23{NBSP}hours, 59{NBSP}minutes"]
    assert html.index(str(due.pk)[:8]) < html.index(str(fresh.pk)[:8])


def test_queue_sorts_by_when_the_run_paused_not_its_last_change(superuser, alice):
    """A partial decision changes the run row, not how long its other calls have waited."""
    older = three_call_row(alice, paused_ago=timedelta(hours=3))
    newer = three_call_row(alice, paused_ago=timedelta(hours=1))
    Run.objects.filter(pk=older.pk).update(updated_at=timezone.now())  # e.g. one call decided just now
    response = logged_in(superuser).get(PENDING)
    assert [r.pk for r in response.context["cl"].result_list] == [older.pk, newer.pk]
    assert re.findall(r'class="field-age">([^<]*)<', response.content.decode()) == [
        f"3{NBSP}hours",
        f"1{NBSP}hour",
    ]


def queue_queries(client) -> int:
    with CaptureQueriesContext(connection) as queries:
        response = client.get(PENDING)
    assert response.status_code == 200
    return len(queries)


def test_queue_queries_do_not_grow_with_runs_calls_or_trace_length(superuser, alice, bob):
    client = logged_in(superuser)
    three_call_row(alice, word="first")
    few = queue_queries(client)
    for i in range(6):
        three_call_row(bob if i % 2 else alice, history_steps=5, word=f"more{i}")
    assert queue_queries(client) == few
    html = client.get(PENDING).content.decode()
    assert html.count('class="field-pending_tool">search<br>search<br>search<') == 7
    assert "more5 2" in html and "1+1" not in html  # every waiting call, none of the earlier turns


# --- the run page: every call, decided together or one by one ---------------------------------------------------------


def test_run_page_shows_every_waiting_call_with_its_own_controls(reviewer, alice, llm):
    run = pause_three(alice, llm)
    html = logged_in(reviewer).get(run_page(run)).content.decode()
    assert "Waiting for approval: search, calculator, search" in html
    for n, (call_id, tool, arguments) in enumerate([("c1", "search", "django"), ("c2", "calculator", "2+2")], 1):
        assert f"Call {n} of 3: {tool}" in html and call_id in html
        assert arguments in html
    names = {c.get("name") for c in controls_of(html)}
    for n in (1, 2, 3):
        assert {f"call-{n}", f"arguments-{n}", f"reason-{n}", f"choice-{n}"} <= names
    buttons = [c["value"] for c in controls_of(html) if c["tag"] == "button"]
    assert buttons == ["1:approve", "1:deny", "2:approve", "2:deny", "3:approve", "3:deny", "all"]
    assert [c["value"] for c in controls_of(html) if c.get("type") == "hidden"] == ["c1", "c2", "c3"]
    assert 'id="approval-expiry"' in html and "Time left to decide" in html
    parser = _Forms()
    parser.feed(html)
    assert not parser.nested
    assert parser.forms["decision-form"]["action"] == decide_url(run)
    for control in ("id_arguments_3", "id_reason_3", "id_choice_3_deny", "deny-button-3", "decide-all-button"):
        assert parser.owner[control] == "decision-form", control


def test_three_calls_decided_together_in_one_batch(reviewer, alice, llm, monkeypatch):
    calls = []
    original = review.decide_approval

    def spy(**kwargs):
        calls.append(kwargs)
        return original(**kwargs)

    monkeypatch.setattr(review, "decide_approval", spy)
    run = pause_three(alice, llm)
    client = logged_in(reviewer)
    form = {
        **posted_calls(client, run),
        "choice-1": "approve",
        "arguments-1": json.dumps({"query": "django tasks"}),
        "reason-1": "narrower",
        "choice-2": "approve",
        "arguments-2": "",
        "choice-3": "deny",
        "reason-3": "not needed",
        "decide": "all",
    }
    response = client.post(decide_url(run), form)
    assert response.status_code == 302 and response["Location"] == run_page(run)
    assert "3 decisions recorded; the run is now done." in messages_of(response)

    assert len(calls) == 1  # one batch, one service call
    assert calls[0]["continue_run"] is True and calls[0]["actor"].username == "rita"
    assert [(d["call_id"], d["approved"]) for d in calls[0]["decisions"]] == [("c1", True), ("c2", True), ("c3", False)]
    run.refresh_from_db()
    assert (run.status, run.stop_reason, run.output) == ("done", "final_answer", "done")
    assert approvals(run) == [
        ("c1", True, "rita", "narrower"),
        ("c2", True, "rita", None),
        ("c3", False, "rita", "not needed"),
    ]
    first = next(s for s in trace(run) if s["kind"] == "approval")
    assert (first["original_arguments"], first["arguments"]) == ({"query": "django"}, {"query": "django tasks"})
    assert [(s["call_id"], s["arguments"]) for s in trace(run) if s["kind"] == "tool"] == [
        ("c1", {"query": "django tasks"}),
        ("c2", {"expression": "2+2"}),
    ]
    assert searched(llm) == ["django tasks"]  # c3 never ran
    html = client.get(run_page(run)).content.decode()
    assert 'id="pending-approval"' not in html
    assert "by rita — narrower" in html and "by rita — not needed" in html


def test_calls_decided_one_by_one(reviewer, alice, llm, monkeypatch):
    run = pause_three(alice, llm)
    client = logged_in(reviewer)
    spied = []
    original = review.decide_approval
    monkeypatch.setattr(review, "decide_approval", lambda **kw: spied.append(kw) or original(**kw))

    # The last call first: the page posts every call's id, only the named one is decided.
    response = client.post(
        decide_url(run), {**posted_calls(client, run), "reason-3": "skip it", "choice-1": "deny", "decide": "3:deny"}
    )
    assert "Decision recorded; the run is now awaiting_approval." in messages_of(response)
    assert spied[-1]["decisions"] == [{"call_id": "c3", "approved": False, "reason": "skip it"}]
    assert approvals(run) == [("c3", False, "rita", "skip it")]
    html = client.get(run_page(run)).content.decode()
    assert "Waiting for approval: search, calculator" in html and "Call 2 of 2: calculator" in html
    assert posted_calls(client, run) == {"call-1": "c1", "call-2": "c2"}

    form = {**posted_calls(client, run), "arguments-1": '{"query": "django orm"}', "decide": "1:approve"}
    client.post(decide_url(run), form)
    run.refresh_from_db()
    assert run.status == "awaiting_approval"
    assert searched(llm) == ["django orm"]  # c1 ran as soon as it was approved; c2 still waits
    assert posted_calls(client, run) == {"call-1": "c2"}

    html = client.get(run_page(run)).content.decode()
    assert 'id="decide-all-button"' not in html  # one call left: its own buttons are enough
    response = client.post(decide_url(run), {**posted_calls(client, run), "decide": "1:approve"})
    assert "Decision recorded; the run is now done." in messages_of(response)
    run.refresh_from_db()
    assert (run.status, run.output) == ("done", "done")
    assert approvals(run) == [("c3", False, "rita", "skip it"), ("c1", True, "rita", None), ("c2", True, "rita", None)]
    assert [s["call_id"] for s in trace(run) if s["kind"] == "tool"] == ["c1", "c2"]
    assert all(len(kw["decisions"]) == 1 and kw["continue_run"] is True for kw in spied)


@pytest.mark.parametrize(
    ("edits", "message"),
    [
        ({"arguments-2": '{"expression": 5}'}, "The edited arguments (call c2) do not fit the tool's schema"),
        ({"arguments-1": '{"query": "ok", "extra": 1}'}, "(call c1) do not fit the tool's schema"),
        ({"arguments-3": "{not json"}, "The edited arguments of call 3 are not valid JSON."),
        ({"choice-2": ""}, "Choose approve or deny for every call (none chosen for call 2)."),
    ],
    ids=["schema", "extra-property", "json", "no-choice"],
)
def test_a_bad_batch_shows_the_error_and_records_nothing(reviewer, alice, llm, edits, message):
    run = pause_three(alice, llm)
    client = logged_in(reviewer)
    before = trace(run)
    form = {**posted_calls(client, run), "choice-1": "approve", "choice-2": "approve", "choice-3": "deny"}
    response = client.post(decide_url(run), {**form, **edits, "decide": "all"})
    assert response.status_code == 302 and response["Location"] == run_page(run)
    notes = messages_of(response)
    assert any(message in m for m in notes), notes
    assert not any("recorded" in m for m in notes)
    assert trace(run) == before
    run.refresh_from_db()
    assert (run.status, run.lease_owner) == ("awaiting_approval", "")
    assert searched(llm) == []
    assert 'id="decide-all-button"' in client.get(run_page(run)).content.decode()  # the reviewer can try again


def test_a_stale_page_cannot_decide_a_call_someone_else_decided(reviewer, alice, llm):
    run = pause_three(alice, llm)
    client = logged_in(reviewer)
    stale = posted_calls(client, run)
    client.post(decide_url(run), {**stale, "decide": "1:deny"})
    response = client.post(decide_url(run), {**stale, "decide": "1:approve"})
    assert any("not waiting" in m for m in messages_of(response)), messages_of(response)
    assert approvals(run) == [("c1", False, "rita", None)]
    bogus = client.post(decide_url(run), {**stale, "decide": "7:approve"})
    assert "Unknown decision: reload the page and try again." in messages_of(bogus)
    assert len(approvals(run)) == 1


def test_an_expired_approval_shows_the_error_and_the_system_denies_it(reviewer, alice, llm):
    run = pause_three(alice, llm)
    client = logged_in(reviewer)
    form = {**posted_calls(client, run), "choice-1": "approve", "choice-2": "approve", "choice-3": "approve"}
    paused_at(run, timedelta(seconds=run.approval_ttl_s + 60))

    html = client.get(run_page(run)).content.decode()
    assert "Expired at" in html and "the system denies these calls" in html
    assert 'id="decision-form"' not in html and 'id="decide-all-button"' not in html
    assert "agents.review_run" not in html  # not a permission problem

    response = client.post(decide_url(run), {**form, "decide": "all"})  # a page loaded before the expiry
    assert any("expired" in m for m in messages_of(response)), messages_of(response)
    assert approvals(run) == []
    assert searched(llm) == []

    assert review.sweep_expired_approvals() == 1
    assert approvals(run) == [(c, False, None, "expired") for c in ("c1", "c2", "c3")]
    html = client.get(run_page(run)).content.decode()
    assert html.count("by the system — expired") == 3
    assert "by None" not in html


def test_expired_filter_finds_exactly_the_runs_with_expired_approvals(superuser, alice, llm):
    swept = pause_three(alice, llm)
    paused_at(swept, timedelta(seconds=swept.approval_ttl_s + 1))
    review.sweep_expired_approvals()

    def with_approval(**data):
        run = stored_run(alice)
        add_step(run, "approval", call_id="c1", name="search", original_arguments={}, arguments={}, **data)
        return run

    stored_expired = with_approval(approved=False, reviewer=None, reason="expired")
    by_reviewer = with_approval(approved=False, reviewer="rita", reason="expired")  # a person's reason, not expiry
    denied = with_approval(approved=False, reviewer="rita", reason="no")
    approved = with_approval(approved=True, reviewer="rita", reason=None)
    plain = stored_run(alice)
    client = logged_in(superuser)

    def found(value: str) -> set:
        response = client.get(RUNS, {"approval_expired": value})
        assert response.status_code == 200
        return {r.pk for r in response.context["cl"].result_list}

    assert found("yes") == {swept.pk, stored_expired.pk}
    assert found("no") == {by_reviewer.pk, denied.pk, approved.pk, plain.pk}
    html = client.get(RUNS).content.decode()
    assert "By approval expired" in html and "?approval_expired=yes" in html


# --- who may decide ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("decide", ["all", "1:approve", "2:deny"])
def test_staff_without_review_permission_cannot_decide(staff_viewer, alice, llm, decide):
    run = pause_three(alice, llm)
    client = logged_in(staff_viewer)
    html = client.get(run_page(run)).content.decode()
    assert "Call 3 of 3: search" in html  # they see what it waits for
    assert controls_of(html) == [] and 'id="decision-form"' not in html
    assert "agents.review_run" in html
    form = {"call-1": "c1", "call-2": "c2", "call-3": "c3", "choice-1": "approve", "choice-2": "approve"}
    response = client.post(decide_url(run), {**form, "choice-3": "approve", "decide": decide})
    assert response.status_code == 403
    assert approvals(run) == [] and searched(llm) == []


def test_non_staff_owner_cannot_decide_a_batch(alice, llm):
    run = pause_three(alice, llm)
    form = {"call-1": "c1", "call-2": "c2", "call-3": "c3", "choice-1": "approve", "choice-2": "approve"}
    response = logged_in(alice).post(decide_url(run), {**form, "choice-3": "approve", "decide": "all"})
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert approvals(run) == []


def test_call_ids_and_arguments_are_escaped_on_the_run_page(reviewer, alice, llm):
    markup = '<img src=x onerror="alert(1)">'
    run = pause_three(alice, llm, calls=[(f"c{markup}", "search", {"query": markup}), ("c2", "search", {"query": "b"})])
    html = logged_in(reviewer).get(run_page(run)).content.decode()
    assert markup not in html
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html
    assert {c["value"] for c in controls_of(html) if c.get("type") == "hidden"} == {f"c{markup}", "c2"}


def test_a_reviewer_without_staff_is_not_enough(alice, llm):
    """agents.review_run without is_staff: the admin itself is closed."""
    from django.contrib.auth.models import Permission

    user = make_user("nostaff")
    user.user_permissions.add(Permission.objects.get(codename="review_run"))
    run = pause_three(alice, llm)
    response = logged_in(user).post(decide_url(run), {"call-1": "c1", "decide": "1:approve"})
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    assert approvals(run) == []
