"""Pending approvals in the admin, and the Approve / Deny decision on the run page (through the services)."""

from __future__ import annotations

import json
from datetime import timedelta
from html.parser import HTMLParser
from urllib.parse import parse_qs, urlsplit

import pytest
from django.contrib.messages import get_messages
from django.utils import timezone

from agents.models import Run, Step
from agents.runs import review
from tests.console.conftest import (
    DDG_ANSWER,
    PENDING,
    RUNS,
    decide_url,
    logged_in,
    run_page,
    start_and_pause,
    stored_run,
)

pytestmark = pytest.mark.django_db

ANSWER = f"{DDG_ANSWER['Heading']}: {DDG_ANSWER['AbstractText']}"


def messages_of(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def steps_of(run) -> list[Step]:
    return list(Step.objects.filter(run=run).order_by("index"))


def queries_sent(stub) -> list[str]:
    return [parse_qs(urlsplit(r.path).query)["q"][0] for r in stub.requests if r.method == "GET"]


# --- the pending approvals page ---------------------------------------------------------------------------------------


def test_pending_lists_awaiting_runs_oldest_first(superuser, alice, bob):
    newest = start_and_pause(alice, "search gamma")
    oldest = start_and_pause(bob, "search alpha")
    middle = start_and_pause(alice, "search beta")
    now = timezone.now()
    for run, minutes in ((oldest, 30), (middle, 20), (newest, 10)):
        paused = now - timedelta(minutes=minutes)  # a paused run's calls expire approval_ttl_s after it paused
        Run.objects.filter(pk=run.pk).update(
            updated_at=paused, approval_expires_at=paused + timedelta(seconds=run.approval_ttl_s)
        )
    stored_run(alice, input="search done")  # done: not listed
    stored_run(alice, status="running", stop_reason=None, output=None)  # running: not listed
    response = logged_in(superuser).get(PENDING)
    assert response.status_code == 200
    assert [r.pk for r in response.context["cl"].result_list] == [oldest.pk, middle.pk, newest.pk]
    html = response.content.decode()
    positions = [html.index(f"{{&quot;query&quot;: &quot;{word}&quot;}}") for word in ("alpha", "beta", "gamma")]
    assert positions == sorted(positions)
    assert html.count('class="field-pending_tool">search<') == 3
    for column in ("short_id", "owner", "pending_tool", "pending_arguments", "waiting_since"):
        assert f"column-{column}" in html


def test_pending_arguments_are_escaped(superuser, alice):
    start_and_pause(alice, "search <script>alert(1)</script>")
    html = logged_in(superuser).get(PENDING).content.decode()
    assert "<script>alert(1)</script>" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_pending_row_leads_to_the_run_page(superuser, alice):
    run = start_and_pause(alice)
    client = logged_in(superuser)
    html = client.get(PENDING).content.decode()
    assert f"/admin/agents/pendingapproval/{run.pk}/change/" in html
    response = client.get(f"{PENDING}{run.pk}/change/")
    assert response.status_code == 302
    assert response["Location"] == run_page(run)
    assert client.get(f"{PENDING}add/").status_code == 403


def test_pending_page_is_empty_without_waiting_runs(superuser, alice):
    stored_run(alice)
    response = logged_in(superuser).get(PENDING)
    assert list(response.context["cl"].result_list) == []


# --- who sees the decision form, who may decide -----------------------------------------------------------------------


def test_reviewer_sees_the_decision_form(reviewer, alice):
    run = start_and_pause(alice)
    response = logged_in(reviewer).get(run_page(run))
    assert response.status_code == 200
    html = response.content.decode()
    for element in ('id="pending-approval"', 'id="decision-form"', 'id="id_arguments_1"', 'id="id_reason_1"'):
        assert element in html
    assert 'id="approve-button-1"' in html and 'id="deny-button-1"' in html
    assert 'id="decide-all-button"' not in html and 'id="id_choice_1_approve"' not in html  # one call: no batch
    assert f'action="{decide_url(run)}"' in html
    assert "Waiting for approval: search" in html
    assert "&quot;query&quot;: &quot;django&quot;" in html


def test_staff_without_review_permission_sees_no_buttons(staff_viewer, alice):
    run = start_and_pause(alice)
    response = logged_in(staff_viewer).get(run_page(run))
    assert response.status_code == 200
    html = response.content.decode()
    assert 'id="pending-approval"' in html  # they see what it waits for
    assert 'id="decision-form"' not in html
    assert 'id="approve-button-1"' not in html and 'id="deny-button-1"' not in html
    assert 'id="id_arguments_1"' not in html
    assert "agents.review_run" in html


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_staff_without_review_permission_cannot_decide(staff_viewer, alice, ddg, decision):
    run = start_and_pause(alice)
    response = logged_in(staff_viewer).post(decide_url(run), {"decision": decision, "reason": "sneaky"})
    assert response.status_code == 403
    run.refresh_from_db()
    assert run.status == "awaiting_approval"
    assert [s.kind for s in steps_of(run)] == ["model"]
    assert ddg.requests == []


def test_non_staff_owner_cannot_decide(alice, ddg):
    run = start_and_pause(alice)
    response = logged_in(alice).post(decide_url(run), {"decision": "approve"})
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    run.refresh_from_db()
    assert run.status == "awaiting_approval"


def test_get_on_decide_changes_nothing(superuser, alice, ddg):
    run = start_and_pause(alice)
    response = logged_in(superuser).get(decide_url(run), {"decision": "approve"})
    assert response.status_code == 302 and response["Location"] == run_page(run)
    run.refresh_from_db()
    assert run.status == "awaiting_approval"


# --- approve, deny, edited arguments ----------------------------------------------------------------------------------


@pytest.mark.parametrize("who", ["reviewer", "superuser"])
def test_approve_runs_the_tool_and_the_run_finishes(request, alice, ddg, who):
    user = request.getfixturevalue(who)
    run = start_and_pause(alice)  # a "step" run: the admin still drives it on to the end
    client = logged_in(user)
    response = client.post(decide_url(run), {"decision": "approve", "arguments": "", "reason": "looks fine"})
    assert response.status_code == 302 and response["Location"] == run_page(run)
    assert any("the run is now done" in m for m in messages_of(response))
    run.refresh_from_db()
    assert (run.status, run.stop_reason, run.output) == ("done", "final_answer", ANSWER)
    kinds = [s.kind for s in steps_of(run)]
    assert kinds == ["model", "approval", "tool", "model"]
    approval = steps_of(run)[1].data
    assert approval["approved"] is True
    assert approval["reviewer"] == user.username
    assert approval["reason"] == "looks fine"
    assert approval["arguments"] == approval["original_arguments"] == {"query": "django"}
    assert queries_sent(ddg) == ["django"]
    html = client.get(run_page(run)).content.decode()
    assert f'<pre class="final-answer">{ANSWER}</pre>' in html
    assert 'id="decision-form"' not in html
    assert f"by {user.username} — looks fine" in html


def test_deny_records_the_denial_and_the_run_goes_on(reviewer, alice, ddg):
    run = start_and_pause(alice)
    client = logged_in(reviewer)
    response = client.post(decide_url(run), {"decision": "deny", "reason": "not today"})
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == "done"
    assert run.stop_reason == "final_answer"
    assert "denied" in run.output
    steps = steps_of(run)
    assert [s.kind for s in steps] == ["model", "approval", "model"]  # no tool step: the model is told "denied"
    assert steps[1].data["approved"] is False
    assert (steps[1].data["reviewer"], steps[1].data["reason"]) == ("rita", "not today")
    assert ddg.requests == []  # the tool never ran
    html = client.get(run_page(run)).content.decode()
    assert "Denied" in html and "by rita — not today" in html


def test_approve_with_edited_arguments(reviewer, alice, ddg):
    run = start_and_pause(alice)
    edited = json.dumps({"query": "django admin"})
    logged_in(reviewer).post(decide_url(run), {"decision": "approve", "arguments": edited})
    run.refresh_from_db()
    assert run.status == "done"
    approval = steps_of(run)[1].data
    assert approval["original_arguments"] == {"query": "django"}
    assert approval["arguments"] == {"query": "django admin"}
    assert approval["reason"] is None
    assert queries_sent(ddg) == ["django admin"]


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ('{"query": ', "not valid JSON"),
        ("not json at all", "not valid JSON"),
        ('{"query": 5}', "schema"),
        ('{"query": ""}', "schema"),
        ('{"query": "x", "extra": 1}', "schema"),
        ("{}", "schema"),
        ('["django"]', "JSON object"),
        ('"django"', "JSON object"),
    ],
)
def test_bad_edited_arguments_record_nothing(reviewer, alice, ddg, raw, message):
    run = start_and_pause(alice)
    client = logged_in(reviewer)
    response = client.post(decide_url(run), {"decision": "approve", "arguments": raw, "reason": "r"})
    assert response.status_code == 302 and response["Location"] == run_page(run)
    notes = messages_of(response)
    assert any(message in m for m in notes), notes
    run.refresh_from_db()
    assert run.status == "awaiting_approval"
    assert [s.kind for s in steps_of(run)] == ["model"]
    assert ddg.requests == []
    html = client.get(run_page(run)).content.decode()
    assert 'id="decision-form"' in html  # still waiting: the reviewer can try again


def test_decision_goes_through_the_services(reviewer, alice, ddg, monkeypatch):
    calls = []
    original = review.decide_approval

    def spy(**kwargs):
        calls.append(kwargs)
        return original(**kwargs)

    monkeypatch.setattr(review, "decide_approval", spy)
    run = start_and_pause(alice)
    logged_in(reviewer).post(decide_url(run), {"decision": "approve", "reason": "ok"})
    assert len(calls) == 1
    call = calls[0]
    assert call["run_id"] == run.pk
    assert call["actor"].username == "rita"
    assert call["approved"] is True
    assert call["reason"] == "ok"
    assert call["continue_run"] is True


def test_deciding_twice_is_an_error_message_not_a_second_step(reviewer, alice, ddg):
    run = start_and_pause(alice)
    client = logged_in(reviewer)
    client.post(decide_url(run), {"decision": "approve"})
    response = client.post(decide_url(run), {"decision": "deny"})
    assert response.status_code == 302
    assert any("not awaiting approval" in m for m in messages_of(response))
    assert [s.kind for s in steps_of(run)].count("approval") == 1


def test_decide_on_unknown_run_is_404(reviewer):
    import uuid

    assert logged_in(reviewer).post(f"{RUNS}{uuid.uuid4()}/decide/", {"decision": "approve"}).status_code == 404


class _Forms(HTMLParser):
    """Records nested <form> tags and which form each named control belongs to."""

    def __init__(self) -> None:
        super().__init__()
        self.depth, self.nested, self.current = 0, False, None
        self.forms: dict[str, dict] = {}
        self.owner: dict[str, str | None] = {}

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.nested |= self.depth > 0
            self.depth += 1
            self.current = attrs.get("id")
            self.forms[self.current] = attrs
        elif tag in ("input", "textarea", "button", "select") and attrs.get("id"):
            self.owner[attrs["id"]] = attrs.get("form") or (self.current if self.depth else None)

    def handle_endtag(self, tag):
        if tag == "form":
            self.depth -= 1
            self.current = None


def test_decision_form_is_not_nested_in_the_admin_form(reviewer, alice):
    """Browsers drop a <form> nested in another: the buttons would then post the read-only admin form (403)."""
    run = start_and_pause(alice)
    parser = _Forms()
    parser.feed(logged_in(reviewer).get(run_page(run)).content.decode())
    assert not parser.nested
    assert parser.forms["decision-form"]["action"] == decide_url(run)
    assert parser.forms["decision-form"]["method"] == "post"
    for control in ("id_arguments_1", "id_reason_1", "approve-button-1", "deny-button-1"):
        assert parser.owner[control] == "decision-form", control


def test_pending_list_shows_only_the_call_waiting_not_those_already_run(superuser, alice):
    """A reply with two calls, the first already run: the list shows the second (the one awaiting a decision)."""
    from tests.console.conftest import model_step, stored_run, tool_step

    run = stored_run(alice, status="awaiting_approval", stop_reason=None, output=None)
    calls = [
        {"id": "c1", "name": "calculator", "arguments": {"expression": "1+1"}},
        {"id": "c2", "name": "search", "arguments": {"query": "pending one"}},
    ]
    model_step(run, tool_calls=calls)
    tool_step(run, call_id="c1", arguments={"expression": "1+1"}, output="2")

    html = logged_in(superuser).get(PENDING).content.decode()
    assert 'class="field-pending_tool">search<' in html
    assert "pending one" in html
    assert "1+1" not in html
