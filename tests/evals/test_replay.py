"""`run_evals --replay`: exported runs replayed with their tool calls answered from fixtures, never by real tools."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest
import requests
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from agents.engine.dispatch import run_tool
from agents.evals.cases import CaseError, load_cases
from agents.evals.fixtures import Fixture, FixtureBook, canonical
from agents.evals.replay import replay_toolset
from agents.models import Run
from agents.runs import review
from agents.runs.runtime import tool_registry
from tests.conftest import make_user
from tests.evals.replaying import ARITHMETIC, SEARCH_ANSWER, demo_run, export_to, replay, run_action, script_search

pytestmark = pytest.mark.django_db


@pytest.fixture
def reviewer(db):
    return make_user("rita", staff=True, reviewer=True)


@pytest.fixture
def search_stub(stub, settings):
    return script_search(stub, settings)


def explode_real_tools(monkeypatch) -> list[str]:
    """From now on every registered tool, if it were ever called, raises; the names of the tools called."""
    calls: list[str] = []
    registry = tool_registry()
    for name in registry.names():
        tool = registry.get(name)

        def explode(arguments, context, name=name):
            calls.append(name)
            raise AssertionError(f"the real {name} tool was called")

        monkeypatch.setitem(registry._tools, name, replace(tool, func=explode))
    return calls


def refuse_network(monkeypatch) -> list[str]:
    """From now on any HTTP request through requests (the search tool's only way out) raises; the URLs tried."""
    attempts: list[str] = []

    def refuse(self, method, url, *args, **kwargs):
        attempts.append(url)
        raise AssertionError(f"network: {method} {url}")

    monkeypatch.setattr(requests.Session, "request", refuse)
    return attempts


def exported(tmp_path, run, user: str = "alice"):
    return export_to(tmp_path / "cases.yaml", "--run", str(run.pk), "--user", user)


def edit(path, old: str, new: str):
    """Edit the cases file as a person would: one textual change."""
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new), encoding="utf-8")
    return path


# --- the same answer ---------------------------------------------------------------------------------------------


def test_an_exported_run_replays_to_the_same_answer(alice, tmp_path, monkeypatch):
    run = demo_run(alice)
    real_tools_explode = explode_real_tools(monkeypatch)

    eval_run, table = replay(exported(tmp_path, run))

    assert (eval_run.total, eval_run.passed) == (1, 1) and eval_run.provider == "demo"
    assert eval_run.cases_file.endswith("cases.yaml (replay)")
    [result] = eval_run.results.select_related("run")
    assert (result.case_id, result.protocol, result.passed, result.reason) == (
        f"run-{run.pk.hex[:8]}",
        "tools",
        True,
        "",
    )
    assert result.output == run.output == "85"
    replayed = result.run
    assert replayed.pk != run.pk and replayed.owner.username.startswith("eval-")
    assert (replayed.status, replayed.stop_reason, replayed.turns) == ("done", "final_answer", 3)
    original = [(s.data["name"], s.data["arguments"], s.data["output"]) for s in run.steps.filter(kind="tool")]
    again = [(s.data["name"], s.data["arguments"], s.data["output"]) for s in replayed.steps.filter(kind="tool")]
    assert again == original
    assert real_tools_explode == []
    assert "1/1 passed" in table


def test_a_run_made_into_a_case_in_the_admin_replays_too(alice, tmp_path):
    run = demo_run(alice)
    response, _ = run_action(alice, [run])
    path = tmp_path / "from-admin.yaml"
    path.write_bytes(response.content)

    eval_run, _ = replay(path)

    assert (eval_run.total, eval_run.passed) == (1, 1)
    assert eval_run.results.get().output == "85"


def test_the_real_tools_would_have_been_caught(alice, tmp_path, monkeypatch):
    """The guard of the test above works: the same case run without --replay calls the (exploding) real tool."""
    path = exported(tmp_path, demo_run(alice))
    real_tools_explode = explode_real_tools(monkeypatch)

    with pytest.raises(SystemExit):
        call_command("run_evals", "--cases", str(path), "--provider", "demo", stdout=io.StringIO())

    assert real_tools_explode == ["calculator"]


def test_recorded_errors_replay_word_for_word(alice, tmp_path):
    run = demo_run(alice, "What is 1/0?")
    [recorded] = [s.data["output"] for s in run.steps.filter(kind="tool")]
    assert recorded.startswith("Tool 'calculator' failed: ")

    eval_run, _ = replay(exported(tmp_path, run))

    result = eval_run.results.select_related("run").get()
    assert result.passed and result.output == run.output
    [again] = result.run.steps.filter(kind="tool")
    assert (again.data["output"], again.data["is_error"]) == (recorded, True)


@pytest.mark.parametrize(
    "output",
    [
        "Tool 'search' failed: search failed: could not reach duckduckgo",
        "Tool 'search' timed out after 15 s.",
        "Invalid arguments for tool 'search': something else entirely",
    ],
)
def test_every_recorded_error_is_fed_back_as_it_was(output):
    book = FixtureBook([Fixture("search", {"query": "x"}, output, is_error=True)])
    toolset = replay_toolset(Run(tools=["search"]), book)

    result = run_tool(toolset, "search", {"query": "x"}, timeout_s=5)

    expected = output if output.startswith("Tool") else f"Tool 'search' failed: {output}"
    assert (result.output, result.is_error) == (expected, True)


def test_a_replay_in_the_other_protocol(alice, tmp_path):
    path = exported(tmp_path, demo_run(alice))

    eval_run, _ = replay(path, "--protocol", "react")

    [result] = eval_run.results.all()
    assert (result.protocol, result.passed, result.output) == ("react", True, "85")


def test_a_replayed_memory_run_needs_no_memory(alice, tmp_path, monkeypatch):
    """The recall is answered from its fixture: the replay's fresh user has no facts, and none is read or written."""
    demo_run(alice, "remember that my favourite colour is teal")
    run = demo_run(alice, "what do you remember about my favourite colour?")
    real_tools_explode = explode_real_tools(monkeypatch)

    eval_run, _ = replay(exported(tmp_path, run))

    result = eval_run.results.select_related("run__owner").get()
    assert result.passed and "teal" in result.output
    assert not result.run.owner.facts.exists() and real_tools_explode == []


# --- changed fixtures and unmatched calls ------------------------------------------------------------------------


def test_a_changed_output_fails_the_case_naming_the_difference(alice, tmp_path):
    path = edit(exported(tmp_path, demo_run(alice)), "output: '84'", "output: '83'")

    eval_run, table = replay(path)

    [result] = eval_run.results.select_related("run")
    assert (eval_run.passed, result.passed) == (0, False)
    # the model carried 83 on and asked for 83+1, which was never recorded
    assert result.reason == (
        'unmatched tool call calculator {"expression": "83+1"}; '
        'fixtures: calculator {"expression": "12*7"}; calculator {"expression": "84+1"}'
    )
    assert "FAIL" in table and "83+1" in table


def test_a_changed_final_output_fails_the_check_naming_both_answers(alice, tmp_path):
    path = edit(exported(tmp_path, demo_run(alice)), "output: '85'", "output: '86'")

    eval_run, _ = replay(path)

    [result] = eval_run.results.all()
    assert (result.passed, result.output, result.reason) == (False, "86", "expected exactly '85', got '86'")


def test_an_unmatched_call_fails_naming_the_call_and_stops_the_run(alice, tmp_path, monkeypatch):
    path = edit(exported(tmp_path, demo_run(alice)), "{expression: 12*7}", "{expression: 12*8}")
    real_tools_explode = explode_real_tools(monkeypatch)

    eval_run, _ = replay(path)

    [result] = eval_run.results.select_related("run")
    assert not result.passed
    assert result.reason.startswith('unmatched tool call calculator {"expression": "12*7"}; fixtures: ')
    assert 'calculator {"expression": "12*8"}' in result.reason
    run = result.run
    assert (run.status, run.stop_reason, run.turns) == ("done", "cancelled", 1)  # no model call after it
    assert run.error == f"replay stopped: {result.reason}"
    assert real_tools_explode == []


def test_a_case_without_fixtures_fails_at_its_first_call(alice, tmp_path):
    path = exported(tmp_path, demo_run(alice))
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: text.index("  fixtures:")] + "  fixtures: []\n", encoding="utf-8")

    eval_run, _ = replay(path)

    assert eval_run.results.get().reason == 'unmatched tool call calculator {"expression": "12*7"}; fixtures: none'


def test_replay_needs_cases_with_fixtures():
    with pytest.raises(CommandError, match="--replay needs cases with fixtures") as exc:
        call_command("run_evals", "--replay", "--only", "arith-chain-plus")  # the repo's cases have none
    assert exc.value.returncode == 2


# --- sensitive tools ---------------------------------------------------------------------------------------------


def test_an_approved_search_replays_without_network(alice, reviewer, search_stub, tmp_path, monkeypatch):
    run = demo_run(alice, "search for python")
    review.decide_approval(run_id=run.pk, actor=reviewer, approved=True)
    path = exported(tmp_path, run)
    asked = len(search_stub.requests)
    assert asked == 1
    no_network = refuse_network(monkeypatch)

    eval_run, _ = replay(path)

    result = eval_run.results.select_related("run").get()
    assert (result.passed, result.output) == (True, SEARCH_ANSWER)
    steps = [(s.kind, s.data) for s in result.run.steps.exclude(kind="model").order_by("index")]
    assert [kind for kind, _ in steps] == ["approval", "tool"]
    approval, tool = steps[0][1], steps[1][1]
    assert (approval["approved"], approval["reviewer"], approval["reason"]) == (True, None, "replay")
    assert (tool["name"], tool["arguments"], tool["output"]) == ("search", {"query": "python"}, SEARCH_ANSWER)
    assert len(search_stub.requests) == asked and no_network == []


def test_the_network_guard_catches_a_real_search(alice, reviewer, search_stub, monkeypatch):
    """The guard of the test above works: a real search goes through requests and is refused."""
    no_network = refuse_network(monkeypatch)
    run = demo_run(alice, "search for python")
    run = review.decide_approval(run_id=run.pk, actor=reviewer, approved=True)
    assert no_network == [search_stub.url + "/"] and run.output == f"Tool 'search' failed: network: GET {no_network[0]}"


def test_an_edited_search_replays_with_the_reviewers_arguments(alice, reviewer, search_stub, tmp_path, monkeypatch):
    run = demo_run(alice, "search for python")
    review.decide_approval(run_id=run.pk, actor=reviewer, approved=True, arguments={"query": "python language"})
    no_network = refuse_network(monkeypatch)

    eval_run, _ = replay(exported(tmp_path, run))

    result = eval_run.results.select_related("run").get()
    assert result.passed
    approval = result.run.steps.get(kind="approval").data
    assert (approval["original_arguments"], approval["arguments"]) == (
        {"query": "python"},
        {"query": "python language"},
    )
    assert no_network == []


def test_a_denied_search_replays_as_denied(alice, reviewer, search_stub, tmp_path, monkeypatch):
    run = demo_run(alice, "search for python")
    run = review.decide_approval(run_id=run.pk, actor=reviewer, approved=False, reason="not today")
    asked = len(search_stub.requests)
    no_network = refuse_network(monkeypatch)

    eval_run, _ = replay(exported(tmp_path, run))

    result = eval_run.results.select_related("run").get()
    assert (
        result.passed and result.output == run.output == "I could not use the search tool: a reviewer denied the call."
    )
    approval = result.run.steps.get(kind="approval").data
    assert (approval["approved"], approval["reason"]) == (False, "not today")
    assert not result.run.steps.filter(kind="tool").exists() and len(search_stub.requests) == asked == 0
    assert no_network == []


# --- stored and compared like any eval run -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_replays_run_in_parallel_like_any_evals(tmp_path):
    alice = make_user("alice")
    runs = [demo_run(alice), demo_run(alice, "What is 1/0?"), demo_run(alice, "What is 2^10, minus 24?")]
    path = export_to(tmp_path / "cases.yaml", "--run", *[str(r.pk) for r in runs], "--user", "alice")

    eval_run, _ = replay(path, "--concurrency", "3")

    assert (eval_run.total, eval_run.passed) == (3, 3)
    assert {r.output for r in eval_run.results.all()} == {r.output for r in runs}


def test_replays_are_compared_like_any_eval_run(alice, tmp_path):
    path = exported(tmp_path, demo_run(alice))
    passing, _ = replay(path)
    failing, _ = replay(edit(path, "output: '85'", "output: '86'"))
    root = make_user("root", staff=True, superuser=True)
    client = Client()
    client.force_login(root)

    data = {"action": "compare", "_selected_action": [str(passing.pk), str(failing.pk)], "index": "0"}
    response = client.post("/admin/agents/evalrun/", data)

    html = response.content.decode()
    assert response.status_code == 200 and 'class="changed"' in html
    assert "expected exactly &#x27;85&#x27;, got &#x27;86&#x27;" in html


# --- the fixtures' format and matching rule ----------------------------------------------------------------------


def test_arguments_match_as_json_values():
    assert canonical({"b": 1, "a": [1.0, {"y": 2, "x": 3}]}) == canonical({"a": [1, {"x": 3, "y": 2.0}], "b": 1.0})
    assert canonical({"a": True}) != canonical({"a": 1})
    assert canonical({"q": "a"}) != canonical({"q": "a "})
    assert canonical({"q": "A"}) != canonical({"q": "a"})


def test_fixtures_answer_in_order_then_the_last_repeats():
    book = FixtureBook([Fixture("search", {"query": "x"}, "first"), Fixture("search", {"query": "x"}, "second")])

    answers = [book.answer("search", {"query": "x"}) for _ in range(3)]

    assert [f.output for f in answers if f] == ["first", "second", "second"] and book.problem is None
    assert book.answer("calculator", {"query": "x"}) is None  # the tool's name matters too
    assert (
        book.problem
        == 'unmatched tool call calculator {"query": "x"}; fixtures: search {"query": "x"}; search {"query": "x"}'
    )


def test_a_denied_fixture_decides_but_never_answers():
    book = FixtureBook([Fixture("search", {"query": "x"}, denied=True, reason="no")])

    assert book.decide("search", {"query": "x"}).denied
    assert book.answer("search", {"query": "x"}) is None
    assert book.problem.endswith('fixtures: search {"query": "x"} (denied)')


@pytest.mark.parametrize(
    ("fixtures", "message"),
    [
        ("fixtures: {tool: calculator}", "fixtures must be a list"),
        ("fixtures: [calculator]", "fixture #1 must be a mapping"),
        ("fixtures: [{arguments: {}, output: '1'}]", "fixture #1 needs a tool name"),
        ("fixtures: [{tool: t, arguments: [1], output: '1'}]", "fixture #1: arguments must be a mapping"),
        ("fixtures: [{tool: t, arguments: {}}]", "fixture #1 needs an output"),
        ("fixtures: [{tool: t, arguments: {}, output: '1', outptu: '2'}]", "fixture #1 has unknown key(s): outptu"),
        (
            "fixtures: [{tool: t, arguments: {}, output: '1', is_error: 'no'}]",
            "fixture #1: denied and is_error must be true or false",
        ),
    ],
)
def test_malformed_fixtures_are_named(tmp_path, fixtures, message):
    path = tmp_path / "cases.yaml"
    path.write_text(f"- id: broken\n  input: x\n  check: {{type: exact, value: y}}\n  {fixtures}\n", encoding="utf-8")

    with pytest.raises(CaseError, match=f"case 'broken': {message}".replace("(", r"\(").replace(")", r"\)")):
        load_cases(path)


def test_an_output_edited_without_quotes_is_still_text(tmp_path):
    path = tmp_path / "cases.yaml"
    path.write_text(
        f"- id: x\n  input: {ARITHMETIC!r}\n  check: {{type: exact, value: '85'}}\n"
        "  fixtures: [{tool: calculator, arguments: {expression: 12*7}, output: 84}]\n",
        encoding="utf-8",
    )

    [case] = load_cases(path)

    assert case.fixtures[0].output == "84" and case.fixtures[0].is_error is False
