"""The runs list and the run page of the admin: columns, filters, search, read-only, the trace timeline, escaping."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.conftest import make_user
from tests.console.conftest import (
    RUNS,
    add_step,
    logged_in,
    model_step,
    run_page,
    stored_run,
    tool_step,
)

pytestmark = pytest.mark.django_db

COLUMNS = [
    "short_id", "owner", "input_summary", "thread_title", "status_reason", "provider_model", "turns", "tokens",
    "duration", "created",
]  # fmt: skip
SCRIPT = "<script>alert(1)</script>"
SCRIPT_ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;"
BOLD = "<b>bold</b>"
BOLD_ESCAPED = "&lt;b&gt;bold&lt;/b&gt;"


def listed(response) -> list:
    assert response.status_code == 200
    return list(response.context["cl"].result_list)


def ids(response) -> set:
    return {run.pk for run in listed(response)}


# --- the list -------------------------------------------------------------------------------------------------------


def test_list_has_the_columns(superuser, alice):
    run = stored_run(alice, provider="demo", model="demo-1", protocol="react", turns=3)
    run.prompt_tokens, run.completion_tokens = 120, 30
    run.save()
    response = logged_in(superuser).get(RUNS)
    html = response.content.decode()
    for column in COLUMNS:
        assert f"column-{column}" in html, column
    row = re.search(r'<tr[^>]*>\s*<td class="action-checkbox">.*?</tr>', html, re.S).group(0)
    assert str(run.pk)[:8] in row
    assert "alice" in row
    assert "demo / demo-1 (react)" in row  # the protocol beside the model
    assert "done: final answer" in row  # the status with its stop reason
    assert ">150<" in row  # tokens: prompt + completion
    assert re.search(r"\d+\.\d\d s", row)  # duration
    assert re.search(r">\d{4}-\d\d-\d\d \d\d:\d\d:\d\d<", row)  # created, in the site's one date format


def input_cell(html: str, run) -> str:
    """The text of the input column in the run's row (still escaped, as sent)."""
    rows = re.findall(r"<tr[^>]*>.*?</tr>", html, re.S)
    row = next(r for r in rows if str(run.pk)[:8] in r)
    return re.search(r'<td class="field-input_summary">(.*?)</td>', row, re.S).group(1)


def test_list_shows_the_input_cut_short(superuser, alice):
    long_goal = "Find the population of every city in France and sum them, " + "then more words " * 10
    long_run = stored_run(alice, input=long_goal)
    short_run = stored_run(alice, input="What is 2+2?")
    multiline = stored_run(alice, input="first line\n\n   second line")
    html = logged_in(superuser).get(RUNS).content.decode()
    cut = input_cell(html, long_run)
    assert cut.endswith("…") and len(cut) == 60
    assert long_goal.startswith(cut[:-1])
    assert input_cell(html, short_run) == "What is 2+2?"
    assert input_cell(html, multiline) == "first line second line"  # one line in the table


def test_list_input_is_escaped_after_cutting(superuser, alice):
    run = stored_run(alice, input=SCRIPT + "x" * 100)
    html = logged_in(superuser).get(RUNS).content.decode()
    assert input_cell(html, run).startswith(SCRIPT_ESCAPED)
    assert SCRIPT not in html


def test_thread_column_shows_the_title_or_a_dash(alice):
    from types import SimpleNamespace

    from django.contrib import admin

    from agents.models import Run

    model_admin = admin.site._registry[Run]
    assert model_admin.thread_title(SimpleNamespace(thread=None)) == "—"
    titled = SimpleNamespace(thread=SimpleNamespace(pk="0123456789", title="Trip to " + "Paris " * 20))
    assert model_admin.thread_title(titled).startswith("Trip to Paris") and len(model_admin.thread_title(titled)) == 60
    untitled = SimpleNamespace(thread=SimpleNamespace(pk="0123456789", title=""))
    assert model_admin.thread_title(untitled) == "01234567"


def test_list_is_read_only(superuser, alice):
    run = stored_run(alice)
    client = logged_in(superuser)
    html = client.get(RUNS).content.decode()
    assert "/admin/agents/run/add/" not in html
    assert client.get(f"{RUNS}add/").status_code == 403
    page = client.get(run_page(run))
    assert page.status_code == 200
    body = page.content.decode()
    assert 'name="_save"' not in body
    assert 'name="_continue"' not in body
    assert 'name="_addanother"' not in body
    # a forged POST changes nothing
    assert client.post(run_page(run), {"input": "changed", "status": "running"}).status_code == 403
    run.refresh_from_db()
    assert (run.input, run.status) == ("stored", "done")


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=running", {"running"}),
        ("status=awaiting_approval", {"awaiting"}),
        ("stop_reason=cancelled", {"cancelled"}),
        ("stop_reason=final_answer", {"done"}),
        ("provider=openai", {"openai"}),
        ("protocol=react", {"react"}),
    ],
)
def test_list_filters(superuser, alice, query, expected):
    runs = {
        "running": stored_run(alice, status="running", stop_reason=None, output=None),
        "awaiting": stored_run(alice, status="awaiting_approval", stop_reason=None, output=None),
        "cancelled": stored_run(alice, stop_reason="cancelled", output=None),
        "done": stored_run(alice, protocol="tools", provider="demo"),
        "openai": stored_run(alice, provider="openai", model="gpt-4.1-mini", stop_reason="model_error"),
        "react": stored_run(alice, protocol="react", stop_reason="max_turns"),
    }
    response = logged_in(superuser).get(f"{RUNS}?{query}")
    assert ids(response) == {runs[name].pk for name in expected}


def test_list_filters_by_owner_and_date(superuser, alice, bob):
    mine, theirs = stored_run(alice), stored_run(bob)
    old = stored_run(bob)
    type(old).objects.filter(pk=old.pk).update(created_at=timezone.now() - timedelta(days=30))
    client = logged_in(superuser)
    html = client.get(RUNS).content.decode()
    assert "By owner" in html or "By Owner" in html.title()
    assert ids(client.get(f"{RUNS}?owner__id__exact={alice.pk}")) == {mine.pk}
    assert ids(client.get(f"{RUNS}?owner__id__exact={bob.pk}")) == {theirs.pk, old.pk}
    now = timezone.now()
    window = {
        "created_at__gte": (now - timedelta(days=7)).isoformat(),
        "created_at__lt": (now + timedelta(days=1)).isoformat(),
    }
    recent = client.get(RUNS, window)
    assert ids(recent) == {mine.pk, theirs.pk}
    year = timezone.localtime(timezone.now()).year
    assert mine.pk in ids(client.get(f"{RUNS}?created_at__year={year}"))  # the date hierarchy


def test_owner_filter_lists_only_owners(superuser, alice, bob):
    stored_run(alice)
    make_user("nobody")
    html = logged_in(superuser).get(RUNS).content.decode()
    filters = html[html.index('id="changelist-filter"') :]
    assert "alice" in filters
    assert "nobody" not in filters


@pytest.mark.parametrize("term", ["input", "id", "short id", "username"])
def test_search(superuser, alice, bob, term):
    target = stored_run(alice, input="How tall is the Eiffel tower?")
    other = stored_run(bob, input="What is 2+2?")
    query = {
        "input": "eiffel",
        "id": str(target.pk),
        "short id": str(target.pk)[:8],
        "username": "alice",
    }[term]
    response = logged_in(superuser).get(RUNS, {"q": query})
    found = ids(response)
    assert target.pk in found
    assert other.pk not in found


def test_search_matches_nothing_without_error(superuser, alice):
    stored_run(alice)
    assert ids(logged_in(superuser).get(RUNS, {"q": str(uuid.uuid4())})) == set()


def test_list_needs_staff(alice):
    response = logged_in(alice).get(RUNS)
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


# --- the run page: the trace timeline -------------------------------------------------------------------------------


@pytest.fixture
def traced_run(alice):
    """A run with every kind of step: thought, tool call, output, error, approval, final answer."""
    run = stored_run(alice, input="What is 12*7, plus 1?", output="85", turns=3, prompt_tokens=70, completion_tokens=9)
    model_step(
        run,
        thought="I need to compute 12*7.",
        tool_calls=[{"id": "c1", "name": "calculator", "arguments": {"expression": "12*7"}}],
        usage={"prompt_tokens": 40, "completion_tokens": 5, "total_tokens": 45},
        latency_ms=321,
    )
    tool_step(run, name="calculator", arguments={"expression": "12*7"}, output="84", latency_ms=7)
    tool_step(run, name="calculator", arguments={"expression": "1/0"}, output="division by zero", is_error=True)
    add_step(
        run,
        "approval",
        call_id="c2",
        name="search",
        original_arguments={"query": "django"},
        arguments={"query": "django admin"},
        approved=True,
        reviewer="rita",
        reason="fine by me",
    )
    add_step(run, "error", message="The reply could not be parsed.")
    model_step(
        run,
        thought="I now know the final answer.",
        final_answer="85",
        usage={"prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34},
        latency_ms=55,
    )
    return run


def step_html(html: str, index: int) -> str:
    match = re.search(rf'<li class="step[^"]*" id="step-{index}">(.*?)</li>', html, re.S)
    assert match, f"step {index} not rendered"
    return match.group(0)


def test_trace_is_a_timeline(superuser, traced_run):
    html = logged_in(superuser).get(run_page(traced_run)).content.decode()
    assert 'id="trace"' in html
    assert "Trace (6 steps)" in html
    assert "3 turns, 79 tokens" in html
    first = step_html(html, 0)
    assert "kind-model" in first
    assert "Thought:" in first and "I need to compute 12*7." in first
    assert "Action:" in first and "calculator" in first
    assert "{&quot;expression&quot;: &quot;12*7&quot;}" in first
    assert "321 ms" in first  # latency per step
    assert "40 + 5 tokens" in first  # tokens per step
    tool = step_html(html, 1)
    assert "kind-tool" in tool and "calculator" in tool
    assert "&quot;expression&quot;: &quot;12*7&quot;" in tool  # arguments
    assert re.search(r'<pre class="tool-output">84</pre>', tool)  # output
    assert "7 ms" in tool
    last = step_html(html, 5)
    assert re.search(r'<pre class="final-answer">85</pre>', last)
    assert "55 ms" in last and "30 + 4 tokens" in last
    # order of the timeline
    assert html.index('id="step-0"') < html.index('id="step-1"') < html.index('id="step-5"')


def test_tool_errors_are_highlighted(superuser, traced_run):
    html = logged_in(superuser).get(run_page(traced_run)).content.decode()
    failed = step_html(html, 2)
    assert "is-error" in failed
    assert re.search(r'<span class="badge badge-error"[^>]*>error</span>', failed) and "division by zero" in failed
    assert "is-error" not in step_html(html, 1)
    error = step_html(html, 4)
    assert "kind-error" in error and "errornote" in error and "The reply could not be parsed." in error


def test_approval_shows_reviewer_reason_and_arguments(superuser, traced_run):
    html = logged_in(superuser).get(run_page(traced_run)).content.decode()
    approval = step_html(html, 3)
    assert "kind-approval" in approval
    assert "Approved" in approval
    assert "search" in approval and "by rita" in approval and "fine by me" in approval
    assert "&quot;query&quot;: &quot;django&quot;" in approval  # as asked
    assert "&quot;query&quot;: &quot;django admin&quot;" in approval  # as run


def test_denial_is_shown(superuser, alice):
    run = stored_run(alice)
    add_step(
        run,
        "approval",
        call_id="c1",
        name="search",
        original_arguments={"query": "x"},
        arguments={"query": "x"},
        approved=False,
        reviewer="rita",
        reason=None,
    )
    approval = step_html(logged_in(superuser).get(run_page(run)).content.decode(), 0)
    assert "Denied" in approval and "by rita" in approval
    assert "Ran with" not in approval


def test_long_output_is_collapsed(superuser, alice):
    run = stored_run(alice)
    long_output = "line of search results\n" * 100
    tool_step(run, name="search", arguments={"query": "x"}, output=long_output)
    tool_step(run, name="calculator", arguments={"expression": "1+1"}, output="2")
    html = logged_in(superuser).get(run_page(run)).content.decode()
    long_step, short_step = step_html(html, 0), step_html(html, 1)
    assert "<details>" in long_step and "<summary>" in long_step
    assert long_step.count("line of search results") == 100 + len(long_output[:400].split("\n")) - 1
    assert "<details>" not in short_step


def test_run_without_steps(superuser, alice):
    run = stored_run(alice, status="running", stop_reason=None, output=None)
    html = logged_in(superuser).get(run_page(run)).content.decode()
    assert "No steps yet." in html
    assert 'id="pending-approval"' not in html


def test_unknown_run_is_not_a_server_error(superuser):
    client = logged_in(superuser)
    assert client.get(f"{RUNS}{uuid.uuid4()}/change/").status_code in (302, 404)
    assert client.get(f"{RUNS}not-a-uuid/change/").status_code in (302, 404)


# --- everything is escaped --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("payload,escaped", [(SCRIPT, SCRIPT_ESCAPED), (BOLD, BOLD_ESCAPED)])
def test_tool_output_is_escaped(superuser, alice, payload, escaped):
    run = stored_run(alice)
    tool_step(run, name="search", arguments={"query": "x"}, output=f"before {payload} after")
    html = logged_in(superuser).get(run_page(run)).content.decode()
    assert escaped in step_html(html, 0)
    assert payload not in html


def test_long_tool_output_is_escaped_in_both_halves(superuser, alice):
    run = stored_run(alice)
    tool_step(run, name="search", arguments={"query": "x"}, output=SCRIPT + "x" * 1000 + BOLD)
    html = logged_in(superuser).get(run_page(run)).content.decode()
    step = step_html(html, 0)
    assert "<details>" in step
    assert step.count(SCRIPT_ESCAPED) == 2  # the head and the full output
    assert BOLD_ESCAPED in step
    assert SCRIPT not in html and BOLD not in html


def test_every_field_of_the_trace_is_escaped(superuser, alice):
    run = stored_run(alice, input=f"goal {SCRIPT}", output=f"answer {BOLD}", error=f"error {SCRIPT}")
    model_step(
        run,
        thought=f"thinking {SCRIPT}",
        tool_calls=[{"id": "c1", "name": "search", "arguments": {"query": BOLD}}],
    )
    tool_step(run, name="search", arguments={"query": SCRIPT}, output=BOLD, is_error=True)
    add_step(
        run,
        "approval",
        call_id="c1",
        name="search",
        original_arguments={"query": SCRIPT},
        arguments={"query": BOLD},
        approved=True,
        reviewer="rita",
        reason=f"because {SCRIPT}",
    )
    add_step(run, "error", message=f"unparsable {BOLD}")
    model_step(run, thought=None, final_answer=f"final {SCRIPT}")
    html = logged_in(superuser).get(run_page(run)).content.decode()
    assert SCRIPT not in html
    assert BOLD not in html
    assert "<script>alert" not in html
    for index in range(5):
        step = step_html(html, index)
        assert SCRIPT_ESCAPED in step or BOLD_ESCAPED in step, index
    assert f"goal {SCRIPT_ESCAPED}" in html  # the run's own fields too
    assert f"answer {BOLD_ESCAPED}" in html


def test_list_escapes_user_text(superuser, alice):
    stored_run(alice, input=SCRIPT, model=BOLD)
    html = logged_in(superuser).get(RUNS).content.decode()
    assert SCRIPT not in html and BOLD not in html
    assert BOLD_ESCAPED in html
