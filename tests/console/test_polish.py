"""The console and the playground polished (issue 34, item 3), as far as the HTML shows it: eval runs out of the way,
the run page's created time, duration and thread, the error badge, an approval's arguments once, the page title, the
Agent form's widgets and list, eval figures for people, one date format, and the playground's recent runs and limit.
The layout at 1400 px is tested in a real browser (tests/browser/test_polish.py)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from agents.evals.cases import load_cases
from agents.evals.runner import EvalConfig, run_evals
from agents.models import Agent, Thread
from tests.conftest import client_for, make_user
from tests.console.conftest import PENDING, RUNS, add_step, logged_in, run_page, start_and_pause, stored_run, tool_step
from tests.evals.conftest import stored_eval_run

pytestmark = pytest.mark.django_db

AGENTS = "/admin/agents/agent/"
EVALS = "/admin/agents/evalrun/"
ISO_SECONDS = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"


def listed(client, query: str = "") -> set:
    response = client.get(RUNS + query)
    assert response.status_code == 200
    return {run.pk for run in response.context["cl"].result_list}


def owner_choices(client, query: str = "") -> list[str]:
    """The usernames the owner filter offers."""
    response = client.get(RUNS + query)
    (owner,) = [f for f in response.context["cl"].filter_specs if getattr(f, "field_path", "") == "owner"]
    return [name for _, name in owner.lookup_choices]


@pytest.fixture
def eval_run_runs(db):
    """An eval run made as evals are made (run_evals: each case as its own inactive eval-… user): its runs."""
    cases = load_cases(only="arith-chain-plus")
    eval_run = run_evals(cases=cases, config=EvalConfig(provider="demo", cases_file="agents/evals/cases.yaml"))
    return [result.run for result in eval_run.results.select_related("run", "run__owner")]


# --- eval runs and eval users stay out of the run list's way -------------------------------------------------------


def test_eval_runs_are_hidden_from_the_run_list_until_asked_for(superuser, alice, eval_run_runs):
    mine = stored_run(alice, input="a person's question")
    evals = {run.pk for run in eval_run_runs}
    assert len(evals) == 2 and all(run.owner.username.startswith("eval-") for run in eval_run_runs)
    client = logged_in(superuser)

    assert listed(client) == {mine.pk}
    assert listed(client, "?eval_runs=shown") == {mine.pk, *evals}
    assert listed(client, "?eval_runs=only") == evals
    html = client.get(RUNS).content.decode()
    assert "By eval runs" in html and "Hidden" in html  # the filter says what the default does
    counted = client.get(RUNS + "?_facets=True").content.decode()  # "Show counts"
    assert "Shown (3)" in counted and "Only (2)" in counted


def test_the_owner_filter_leaves_out_eval_users_unless_eval_runs_are_shown(superuser, alice, bob, eval_run_runs):
    stored_run(alice)
    stored_run(bob)
    client = logged_in(superuser)

    assert owner_choices(client) == ["alice", "bob"]
    shown = owner_choices(client, "?eval_runs=shown")
    assert shown[:2] == ["alice", "bob"] and len(shown) == 4
    assert all(name.startswith("eval-") for name in shown[2:])


def test_an_active_user_named_eval_is_a_person(superuser):
    person = User.objects.create_user("eval-uation-team")  # active: not one of the eval cases' users
    run = stored_run(person)
    assert listed(logged_in(superuser)) == {run.pk}


# --- the run page ----------------------------------------------------------------------------------------------------


def readonly(html: str, field: str) -> str:
    """The shown value of a read-only field of the run page."""
    match = re.search(rf'<div class="form-row field-{field}">.*?<div class="readonly">(.*?)</div>', html, re.S)
    assert match, field
    return match.group(1).strip()


def test_the_run_page_shows_created_time_duration_and_thread(superuser, alice):
    thread = Thread.objects.create(owner=alice, title="Trip planning")
    run = stored_run(alice, thread=thread)
    created = timezone.now() - timedelta(minutes=5)
    type(run).objects.filter(pk=run.pk).update(created_at=created, updated_at=created + timedelta(seconds=2.5))
    html = logged_in(superuser).get(run_page(run)).content.decode()

    assert re.fullmatch(ISO_SECONDS, readonly(html, "created_at"))
    assert readonly(html, "duration") == "2.50 s"
    assert "Trip planning</a>" in readonly(html, "thread_link")
    alone = logged_in(superuser).get(run_page(stored_run(alice))).content.decode()
    assert readonly(alone, "thread_link") == "—"


def test_a_failed_tool_has_an_error_badge_with_its_word(superuser, alice):
    run = stored_run(alice)
    tool_step(run, output="division by zero", is_error=True)
    html = logged_in(superuser).get(run_page(run)).content.decode()
    assert re.search(r'<span class="badge badge-error"[^>]*>error</span>', html)
    assert '<strong class="errornote">' not in html  # the admin's full-width message box, not a badge


def approval_html(client, run) -> str:
    html = client.get(run_page(run)).content.decode()
    return re.search(r'<li class="step kind-approval[^"]*" id="step-0">(.*?)</li>', html, re.S).group(1)


def test_an_approval_shows_its_arguments_once_unless_the_reviewer_edited_them(superuser, alice):
    client = logged_in(superuser)
    as_asked = stored_run(alice)
    same = {"query": "django"}
    add_step(as_asked, "approval", call_id="c1", name="search", original_arguments=same, arguments=same,
             approved=True, reviewer="rita", reason=None)  # fmt: skip
    shown = approval_html(client, as_asked)
    assert shown.count("&quot;query&quot;: &quot;django&quot;") == 1
    assert "Arguments:" in shown and "Ran with" not in shown

    edited = stored_run(alice)
    add_step(edited, "approval", call_id="c1", name="search", original_arguments=same,
             arguments={"query": "django admin"}, approved=True, reviewer="rita", reason=None)  # fmt: skip
    shown = approval_html(client, edited)
    assert "Asked:" in shown and "Ran with (edited by the reviewer):" in shown
    assert "&quot;django&quot;" in shown and "&quot;django admin&quot;" in shown


def test_a_paused_run_is_titled_in_words(superuser, alice, ddg):
    run = start_and_pause(alice)
    html = logged_in(superuser).get(run_page(run)).content.decode()
    assert f"run {str(run.pk)[:8]} (awaiting approval)" in html
    assert "(awaiting_approval)" not in html


# --- the Agents page ------------------------------------------------------------------------------------------------


def test_the_agent_form_shows_empty_fields_empty_and_offers_usable_providers(superuser, settings):
    settings.AGENT_ALLOWED_PROVIDERS = ["demo", "openai", "anthropic"]
    settings.OPENAI_API_KEY, settings.ANTHROPIC_API_KEY = "sk-test", ""
    html = logged_in(superuser).get(f"{AGENTS}add/").content.decode()

    assert not re.search(r"<textarea[^>]*>\s*(null|\[\])\s*</textarea>", html)  # no raw JSON for "nothing"
    provider = re.search(r'<select name="provider" id="id_provider">(.*?)</select>', html, re.S).group(1)
    assert re.findall(r'<option value="([^"]*)"', provider) == ["", "demo", "openai"]  # anthropic has no key
    assert "default (demo)" in provider
    tools = re.findall(r'<input type="checkbox" name="tools" value="([^"]+)"', html)
    assert {"calculator", "search"} <= set(tools)
    assert re.search(r'<textarea name="output_schema"[^>]*>\s*</textarea>', html)


def test_an_agent_saved_with_nothing_checked_keeps_the_defaults(superuser):
    client = logged_in(superuser)
    data = {"name": "plain", "instructions": "", "provider": "", "model": "", "protocol": "", "max_turns": "",
            "timeout_s": "", "temperature": "", "max_output_tokens": "", "output_schema": ""}  # fmt: skip
    assert client.post(f"{AGENTS}add/", data).status_code == 302
    agent = Agent.objects.get(name="plain")
    assert (agent.tools, agent.sensitive_tools, agent.output_schema, agent.provider) == (None, [], None, "")

    html = client.get(f"{AGENTS}{agent.pk}/change/").content.decode()
    assert not re.search(r"<textarea[^>]*>\s*(null|\[\])\s*</textarea>", html)
    assert not re.search(r'name="tools" value="[^"]+"[^>]*checked', html)


def test_an_agents_provider_that_is_no_longer_usable_stays_listed(superuser, settings):
    settings.OPENAI_API_KEY = ""
    agent = Agent.objects.create(name="old", provider="openai", tools=["calculator"])
    html = logged_in(superuser).get(f"{AGENTS}{agent.pk}/change/").content.decode()
    assert re.search(r'<option value="openai" selected>openai \(not usable here now\)</option>', html)
    assert re.search(r'name="tools" value="calculator"[^>]*checked', html)


def test_a_new_agent_in_the_list_shows_no_red_cross(superuser):
    Agent.objects.create(name="helper")
    Agent.objects.create(name="structured", output_schema={"type": "object"})
    html = logged_in(superuser).get(AGENTS).content.decode()
    assert "icon-no.svg" not in html and "icon-yes.svg" not in html
    assert "free text" in html and "JSON (output schema)" in html


# --- eval results for people -----------------------------------------------------------------------------------------


def test_eval_figures_are_rounded_for_people_and_rows_have_no_headings(superuser, alice):
    results = {(f"case-{n:02}", "tools"): n != 0 for n in range(27)}  # 26 of 27 pass: 96.296296…
    eval_run = stored_eval_run(results, owner=alice, mean_turns=2.6666666666666665, p50_latency_ms=243.1004900000744,
                               p95_latency_ms=1234.56789)  # fmt: skip
    eval_run.results.update(latency_ms=243.1004900000744)
    client = logged_in(superuser)

    page = client.get(f"{EVALS}{eval_run.pk}/change/").content.decode()
    assert "96.3 %" in page and "2.7" in page and "243 ms" in page and "1,235 ms" in page
    assert "0.96296" not in page and "243.10" not in page and "2.666" not in page
    assert 'class="original"' not in page and "[tools] pass" not in page  # no heading repeated over each row
    assert len(re.findall(r'<tr class="form-row result"', page)) == 27

    listing = client.get(EVALS).content.decode()
    assert "96.3 %" in listing and "1,235 ms" in listing and "1234.5" not in listing


# --- one date format --------------------------------------------------------------------------------------------------


def test_dates_are_written_one_way_everywhere(superuser, alice, ddg):
    paused = start_and_pause(alice)
    thread = Thread.objects.create(owner=alice, title="t")
    stored_run(alice, thread=thread)
    stored_eval_run({("a", "tools"): True})
    client = logged_in(superuser)
    pages = [RUNS, run_page(paused), PENDING, f"/admin/agents/thread/{thread.pk}/change/", EVALS, "/admin/"]
    for url in pages:
        html = client.get(url).content.decode()
        assert not re.search(r"\b(a\.m\.|p\.m\.|noon|midnight)", html), url
        assert not re.search(r"\b(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)\.? \d{1,2}, \d{4}", html), url
    assert re.search(ISO_SECONDS, client.get(PENDING).content.decode())  # waiting since
    page = client.get(run_page(paused)).content.decode()
    assert re.search(rf"expires at {ISO_SECONDS}", page)


# --- the playground: its own recent runs, and the limit it says ---------------------------------------------------


def test_a_reviewers_own_runs_are_listed_apart_from_everyone_elses(superuser, alice):
    theirs, own = stored_run(alice), stored_run(superuser)
    api = client_for(superuser)
    everyone = {r["id"] for r in api.get("/api/v1/runs").json()["results"]}
    assert everyone == {str(theirs.pk), str(own.pk)}  # a reviewer sees every run
    assert [r["id"] for r in api.get("/api/v1/runs?mine=true").json()["results"]] == [str(own.pk)]
    assert [r["id"] for r in client_for(alice).get("/api/v1/runs?mine=true").json()["results"]] == [str(theirs.pk)]
    assert api.get("/api/v1/runs?mine=yes").json() == {"mine": ["Must be true or false."]}  # a 400, never ignored


def test_the_playground_never_cuts_a_goal_silently(settings):
    settings.AGENT_MAX_INPUT_CHARS = 1234
    client = logged_in(make_user("paula"))
    html = client.get("/").content.decode()
    assert "maxlength" not in html  # a browser cuts a paste at maxlength without a word
    assert html.count('data-max-chars="1234"') == 2  # the goal and the follow-up, as the server counts
    assert 'id="input-count"' in html and 'id="followup-count"' in html
