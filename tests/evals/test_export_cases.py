"""`manage.py export_cases` and the admin action "Make eval case": stored runs as eval cases with fixtures."""

from __future__ import annotations

import pytest
import yaml
from django.contrib import admin
from django.core.management.base import CommandError
from django.test import Client

from agents.evals import export as exporting
from agents.evals.actions import make_eval_case
from agents.evals.cases import load_cases
from agents.models import Run
from agents.runs import review, submit
from tests.conftest import make_user
from tests.evals.conftest import stored_run
from tests.evals.replaying import ARITHMETIC, SEARCH_ANSWER, demo_run, export, run_action, script_search

pytestmark = pytest.mark.django_db


@pytest.fixture
def reviewer(db):
    return make_user("rita", staff=True, reviewer=True)


@pytest.fixture
def search_stub(stub, settings):
    return script_search(stub, settings)


def loaded(tmp_path, text: str):
    path = tmp_path / "cases.yaml"
    path.write_text(text, encoding="utf-8")
    return load_cases(path)


# --- the command -------------------------------------------------------------------------------------------------


def test_a_run_becomes_a_case_that_load_cases_reads(alice, tmp_path):
    run = demo_run(alice)
    assert run.output == "85"

    out, err = export("--run", str(run.pk), "--user", "alice")

    assert out.startswith("# Eval cases made by export_cases")
    [case] = loaded(tmp_path, out)
    assert case.id == f"run-{run.pk.hex[:8]}" and case.source_run == str(run.pk)
    assert case.input == ARITHMETIC and case.protocols == ("tools",) and set(case.tools) == set(run.tools)
    assert (case.max_turns, case.timeout_s) == (run.max_turns, run.timeout_s)
    assert case.check == {"type": "exact", "value": "85"}
    assert [(f.tool, f.arguments, f.output, f.is_error) for f in case.fixtures] == [
        ("calculator", {"expression": "12*7"}, "84", False),
        ("calculator", {"expression": "84+1"}, "85", False),
    ]
    assert f"run {run.pk} → case {case.id} (2 fixture(s))" in err and "1 case(s)" in err


def test_the_fixtures_follow_the_steps_exactly(alice, tmp_path):
    run = demo_run(alice, "What is 1/0?")
    tool_steps = [s.data for s in run.steps.filter(kind="tool").order_by("index")]
    assert tool_steps and tool_steps[0]["is_error"]

    [case] = loaded(tmp_path, export("--run", str(run.pk), "--user", "alice")[0])

    assert [(f.tool, f.arguments, f.output, f.is_error) for f in case.fixtures] == [
        (s["name"], s["arguments"], s["output"], s["is_error"]) for s in tool_steps
    ]


def test_several_runs_keep_the_order_given(alice, tmp_path):
    first, second = demo_run(alice, "What is 2^10, minus 24?"), demo_run(alice)

    cases = loaded(tmp_path, export("--run", str(second.pk), str(first.pk), "--user", "alice")[0])

    assert [c.source_run for c in cases] == [str(second.pk), str(first.pk)]


def test_runs_without_a_final_answer_are_skipped_with_a_message(alice, tmp_path):
    good = demo_run(alice)
    spent = stored_run(alice, stop_reason="max_turns", output=None)
    waiting = stored_run(alice, status="awaiting_approval", stop_reason=None, output=None)

    out, err = export("--run", str(good.pk), str(spent.pk), str(waiting.pk), "--user", "alice")

    assert [c.source_run for c in loaded(tmp_path, out)] == [str(good.pk)]
    assert f"run {spent.pk}: skipped, no final answer (stopped: max_turns)" in err
    assert f"run {waiting.pk}: skipped, no final answer (status awaiting_approval)" in err
    assert f"# run {spent.pk}: skipped" in out  # the file says so too


def test_nothing_exportable_is_an_error(alice):
    spent = stored_run(alice, stop_reason="timeout", output=None)

    with pytest.raises(CommandError, match="No eval case") as exc:
        export("--run", str(spent.pk), "--user", "alice")
    assert exc.value.returncode == 1


def test_selecting_by_status_and_stop_reason(alice, bob, tmp_path):
    mine = demo_run(alice)
    stored_run(alice, stop_reason="max_turns", output=None)
    stored_run(alice, status="running", stop_reason=None, output=None)
    demo_run(bob)

    out, err = export("--stop-reason", "final_answer", "--user", "alice")
    assert [c.source_run for c in loaded(tmp_path, out)] == [str(mine.pk)]

    out, err = export("--status", "done", "--user", "alice")
    assert [c.source_run for c in loaded(tmp_path, out)] == [str(mine.pk)]
    assert "stopped: max_turns" in err  # selected by status, skipped for want of an answer


def test_named_runs_that_do_not_match_the_filters_are_left_out_with_a_message(alice, tmp_path):
    done, running = demo_run(alice), stored_run(alice, status="running", stop_reason=None, output=None)

    out, err = export("--run", str(done.pk), str(running.pk), "--status", "done", "--user", "alice")

    assert [c.source_run for c in loaded(tmp_path, out)] == [str(done.pk)]
    assert f"run {running.pk}: left out, it does not match --status / --stop-reason" in err


def test_what_a_case_does_not_carry_over_is_said(alice, tmp_path):
    thread = submit.create_thread(owner=alice)
    demo_run(alice, thread_id=thread.pk)
    later = demo_run(alice, "What is 2^10, minus 24?", thread_id=thread.pk)

    out, err = export("--run", str(later.pk), "--user", "alice")

    note = f"case run-{later.pk.hex[:8]}: the run continued a conversation; its 1 earlier turn(s) are not in the case"
    assert note in err and f"# {note}" in out
    assert loaded(tmp_path, out)[0].input == "What is 2^10, minus 24?"


@pytest.mark.parametrize("run_id", ["e5f7a9c1-2b3d-4e6f-8a0b-1c2d3e4f5a6b", "not-a-run-id"])
def test_an_unknown_run_exits_2(alice, run_id):
    with pytest.raises(CommandError, match=f"Run {run_id} not found") as exc:
        export("--run", run_id, "--user", "alice")
    assert exc.value.returncode == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "Name runs with --run"),
        (("--status", "done", "--user", "nobody"), "No user 'nobody'"),
        (("--status", "done", "--user", "alice", "--limit", "0"), "--limit"),
    ],
)
def test_bad_arguments_exit_2(alice, args, message):
    with pytest.raises(CommandError, match=message) as exc:
        export(*args)
    assert exc.value.returncode == 2


def test_the_default_exporter_is_admin(alice):
    run = demo_run(alice)
    with pytest.raises(CommandError, match="No user 'admin'"):
        export("--run", str(run.pk))

    make_user("admin", staff=True, superuser=True)
    out, _ = export("--run", str(run.pk))
    assert str(run.pk) in out


def test_the_cases_round_trip_through_yaml_whatever_the_text(alice, tmp_path):
    texts = ["a\nb", "trailing  \nspace ", "\tx\n", "\nleading", "ü ☃ \u2028 x", "#: no comment", "x\r\ny", "\x85nel"]
    texts += ["null", "true", "85", "", "  ", "a: b\n  c: d", "{a: b}", "- dash", "'quote\"", "line\n\n\nend\n"]
    cases = [
        {
            "id": f"c{i}",
            "input": text or "-",
            "check": {"type": "exact", "value": text},
            "fixtures": [{"tool": "t", "arguments": {"q": text, text or "k": [text, 1.5]}, "output": text}],
        }
        for i, text in enumerate(texts)
    ]

    read = loaded(tmp_path, exporting.to_yaml(exporting.Exported(cases=cases)))

    assert [c.check["value"] for c in read] == texts
    assert [c.fixtures[0].output for c in read] == texts
    assert [c.fixtures[0].arguments for c in read] == [{"q": t, t or "k": [t, 1.5]} for t in texts]


def test_a_multi_line_output_reads_as_a_block(alice, reviewer, stub, settings, tmp_path):
    settings.TAVILY_API_KEY, settings.DUCKDUCKGO_URL = "", stub.url + "/"
    stub.add("GET", "/", json={"Heading": "Python", "AbstractText": "A language.", "AbstractURL": "https://py.test/"})
    run = demo_run(alice, "search for python")
    review.decide_approval(run_id=run.pk, actor=reviewer, approved=True)

    out, _ = export("--run", str(run.pk), "--user", "alice")

    assert "    output: |-\n      Python: A language.\n      Source: https://py.test/\n" in out
    [case] = loaded(tmp_path, out)
    assert case.fixtures[0].output == case.check["value"] == "Python: A language.\nSource: https://py.test/"


def test_selecting_costs_two_queries_whatever_the_number_of_runs(alice, django_assert_num_queries):
    runs = [demo_run(alice) for _ in range(3)]
    with django_assert_num_queries(2):  # the runs, then their tool and approval steps
        selected = exporting.select_runs(user=alice, run_ids=[str(r.pk) for r in runs])
        exporting.export_cases(runs=selected, exporter=alice)


# --- privacy -----------------------------------------------------------------------------------------------------


def test_another_users_run_is_not_found_for_a_non_reviewer(alice, bob):
    run = demo_run(alice, "What is 17*23, then times 2?")
    mine = demo_run(bob)

    with pytest.raises(CommandError) as exc:
        export("--run", str(mine.pk), str(run.pk), "--user", "bob")

    assert exc.value.returncode == 2
    assert str(exc.value) == f"Run {run.pk} not found."  # as for an id that does not exist: nothing of the run
    out, _ = export("--status", "done", "--user", "bob")
    assert [c["source_run"] for c in yaml.safe_load(out)] == [str(mine.pk)]


def test_a_staff_user_who_is_not_a_reviewer_sees_only_their_own(alice):
    staff = make_user("sam", staff=True)
    run = demo_run(alice)

    with pytest.raises(CommandError, match="not found"):
        export("--run", str(run.pk), "--user", staff.username)


def test_a_reviewer_exports_anyones_run(alice, reviewer, tmp_path):
    run = demo_run(alice)

    [case] = loaded(tmp_path, export("--run", str(run.pk), "--user", "rita")[0])

    assert case.source_run == str(run.pk) and case.check["value"] == "85"


def test_memory_is_exported_by_its_owner_only(alice, reviewer, tmp_path):
    demo_run(alice, "remember that my favourite colour is teal")
    run = demo_run(alice, "what do you remember about my favourite colour?")
    assert "teal" in run.output

    with pytest.raises(CommandError, match="No eval case") as exc:
        export("--run", str(run.pk), "--user", "rita")
    assert exc.value.returncode == 1
    good = demo_run(alice)
    out, err = export("--run", str(good.pk), str(run.pk), "--user", "rita")
    assert "teal" not in out + err
    assert [c["source_run"] for c in yaml.safe_load(out)] == [str(good.pk)]
    assert f"run {run.pk}: skipped, it used recall: its memory is its owner's, so only its owner can export it" in err

    [case] = loaded(tmp_path, export("--run", str(run.pk), "--user", "alice")[0])
    [recall] = case.fixtures
    assert recall.tool == "recall" and "teal" in recall.output and "teal" in case.check["value"]


# --- approvals ---------------------------------------------------------------------------------------------------


def test_an_approved_search_is_a_fixture(alice, reviewer, search_stub, tmp_path):
    run = demo_run(alice, "search for python")
    assert run.status == "awaiting_approval"
    run = review.decide_approval(run_id=run.pk, actor=reviewer, approved=True)
    assert run.output == SEARCH_ANSWER

    [case] = loaded(tmp_path, export("--run", str(run.pk), "--user", "alice")[0])

    [fixture] = case.fixtures
    assert (fixture.tool, fixture.arguments, fixture.output) == ("search", {"query": "python"}, SEARCH_ANSWER)
    assert fixture.original_arguments is None and not fixture.denied


def test_edited_and_denied_calls_are_recorded_as_such(alice, reviewer, search_stub, tmp_path):
    edited = demo_run(alice, "search for python")
    review.decide_approval(run_id=edited.pk, actor=reviewer, approved=True, arguments={"query": "python language"})
    denied = demo_run(alice, "search for snakes")
    review.decide_approval(run_id=denied.pk, actor=reviewer, approved=False, reason="not today")

    first, second = loaded(tmp_path, export("--run", str(edited.pk), str(denied.pk), "--user", "alice")[0])

    [fixture] = first.fixtures
    assert (fixture.arguments, fixture.original_arguments) == ({"query": "python language"}, {"query": "python"})
    [refusal] = second.fixtures
    assert (refusal.tool, refusal.arguments, refusal.denied, refusal.reason) == (
        "search",
        {"query": "snakes"},
        True,
        "not today",
    )


# --- the admin action --------------------------------------------------------------------------------------------


def test_the_action_downloads_the_selected_runs_as_yaml(alice, tmp_path):
    runs = [demo_run(alice), demo_run(alice, "What is 2^10, minus 24?")]

    response, notes = run_action(alice, runs)

    assert response.status_code == 200 and notes == []
    assert response["Content-Type"] == "text/yaml; charset=utf-8"
    assert response["Content-Disposition"].startswith('attachment; filename="eval-cases-')
    cases = loaded(tmp_path, response.content.decode())
    assert {c.source_run for c in cases} == {str(r.pk) for r in runs}
    assert {c.check["value"] for c in cases} == {"85", "1000"}


def test_the_action_is_described_as_make_eval_case():
    assert make_eval_case.short_description == "Make eval case"


def test_the_action_refuses_another_users_run_for_a_non_reviewer(alice):
    staff = make_user("sam", staff=True)
    secret = demo_run(alice, "What is 17*23, then times 2?")
    mine = demo_run(staff)

    response, notes = run_action(staff, [mine, secret])

    assert response.status_code == 302  # back to the list: no download at all
    assert notes == [f"Run {secret.pk} not found. No eval case was made."]
    assert "17*23" not in response.content.decode() + " ".join(notes)


def test_the_action_says_why_nothing_was_made(alice):
    spent = stored_run(alice, stop_reason="max_turns", output=None)

    response, notes = run_action(alice, [spent])

    assert response.status_code == 302
    assert notes == [f"No eval case was made: run {spent.pk}: skipped, no final answer (stopped: max_turns)"]


def test_the_action_in_the_runs_admin(alice, monkeypatch):
    """Through the real admin site, the action added to the runs admin as the project adds it."""
    runs_admin = admin.site._registry[Run]
    monkeypatch.setattr(runs_admin, "actions", [*runs_admin.actions, make_eval_case])
    root = make_user("root", staff=True, superuser=True)
    run = demo_run(alice)
    client = Client()
    client.force_login(root)

    data = {"action": "make_eval_case", "_selected_action": [str(run.pk)], "index": "0"}
    response = client.post("/admin/agents/run/", data)

    assert response.status_code == 200 and response["Content-Type"].startswith("text/yaml")
    [case] = yaml.safe_load(response.content)
    assert case["source_run"] == str(run.pk) and case["check"]["value"] == "85"
