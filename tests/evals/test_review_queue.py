"""The reviewer's queue in the admin: runs with scores, the lowest first; labelling one stores the case export_cases
would make of it with the reviewer's check; `export_cases --labelled` writes them as a cases file that replays
(agents/evals/review_admin.py, agents/evals/export.py, agents/management/commands/export_cases.py)."""

from __future__ import annotations

import io
import re
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from agents.evals import export as exporting
from agents.evals.cases import load_cases
from agents.models import LabelledCase, RunScore, Step
from tests.conftest import make_user
from tests.console.conftest import grant
from tests.evals.conftest import stored_run
from tests.evals.replaying import ARITHMETIC, demo_run, replay

pytestmark = pytest.mark.django_db

QUEUE = "/admin/agents/labelledcase/queue/"
LABELLED = "/admin/agents/labelledcase/"


def label_url(run) -> str:
    return f"{QUEUE}{run.pk}/"


def logged_in(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def score(run, value: float, *, source: str = "online", name: str = "judge", **fields) -> RunScore:
    return RunScore.objects.create(run=run, name=name, score=value, source=source, **fields)


def aged(run, minutes: int):
    """The run as if made `minutes` ago (created_at is set on insert)."""
    run.__class__.objects.filter(pk=run.pk).update(created_at=timezone.now() - timedelta(minutes=minutes))
    run.refresh_from_db()
    return run


def queued(client) -> list[str]:
    response = client.get(QUEUE)
    assert response.status_code == 200
    return re.findall(r'<tr class="queued" data-run="([0-9a-f-]+)">', response.content.decode())


def label(client, run, **fields):
    data = {"case_id": "labelled-1", "check_type": "exact", "expected": "85", "rubric": ""} | fields
    return client.post(label_url(run), data)


def export_labelled(path) -> str:
    err = io.StringIO()
    call_command("export_cases", "--labelled", "--output", str(path), stdout=io.StringIO(), stderr=err)
    return err.getvalue()


# --- the queue ---------------------------------------------------------------------------------------------------


def test_the_queue_lists_scored_runs_lowest_score_first_then_newest(alice, reviewer):
    fine = aged(stored_run(alice, input="fine"), 50)
    score(fine, 0.9)
    disliked = aged(stored_run(alice, input="disliked"), 40)
    score(disliked, 0.8)
    score(disliked, 0.0, source="human", name="feedback", comment="wrong", created_by=alice)
    older_low = aged(stored_run(alice, input="older low"), 30)
    score(older_low, 0.3)
    newer_low = aged(stored_run(alice, input="newer low"), 20)
    score(newer_low, 0.3)
    aged(stored_run(alice, input="never scored"), 10)
    done = aged(stored_run(alice, input="already labelled"), 5)
    score(done, 0.1)
    LabelledCase.objects.create(run=done, case_id="done", case={"id": "done"})

    client = logged_in(reviewer)

    assert queued(client) == [str(r.pk) for r in (disliked, newer_low, older_low, fine)]
    html = client.get(QUEUE).content.decode()
    for run in (disliked, fine):
        assert f'<a href="/admin/agents/run/{run.pk}/change/">{str(run.pk)[:8]}</a>' in html
        assert f'href="{label_url(run)}"' in html
    assert "feedback 0.00 (human)" in html and "“wrong”" in html
    assert client.get(f"/admin/agents/run/{disliked.pk}/change/").status_code == 200  # the link works for reviewers


def test_the_queue_and_the_label_page_are_for_reviewers(alice, reviewer):
    run = stored_run(alice)
    score(run, 0.2)
    root = make_user("root", staff=True, superuser=True)
    staff = make_user("sam", staff=True)
    viewer = grant(make_user("vera", staff=True), "view_run", "view_labelledcase")

    for url in (QUEUE, label_url(run), LABELLED):
        assert logged_in(reviewer).get(url).status_code == 200, url
        assert logged_in(root).get(url).status_code == 200, url
        assert logged_in(staff).get(url).status_code == 403, url
        response = logged_in(alice).get(url)  # not staff: the admin's login page
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/"), url
    assert logged_in(viewer).get(LABELLED).status_code == 200  # may see labelled cases…
    assert logged_in(viewer).get(QUEUE).status_code == 403  # …but labelling is the reviewers'
    attempt = {"case_id": "x", "check_type": "exact", "expected": "1"}
    assert logged_in(viewer).post(label_url(run), attempt).status_code == 403
    assert not LabelledCase.objects.exists()


def test_an_unknown_run_is_not_found(reviewer):
    assert logged_in(reviewer).get(f"{QUEUE}e5f7a9c1-2b3d-4e6f-8a0b-1c2d3e4f5a6b/").status_code == 404


# --- labelling -----------------------------------------------------------------------------------------------------


def test_a_labelled_run_is_the_exported_case_with_the_reviewers_check_and_replays(alice, reviewer, tmp_path):
    run = demo_run(alice)
    assert run.output == "85"
    score(run, 0.2, reason="judged 0.20")
    client = logged_in(reviewer)
    page = client.get(label_url(run)).content.decode()
    assert 'value="run-' in page and "calculator" in page and "Fixtures (2)" in page

    response = label(client, run, case_id="arith-85", expected="85")

    assert response.status_code == 302 and response["Location"] == QUEUE
    labelled = LabelledCase.objects.get()
    assert (labelled.case_id, labelled.run_id, labelled.created_by) == ("arith-85", run.pk, reviewer)
    [exported] = exporting.export_cases(runs=exporting.select_runs(user=reviewer, run_ids=[str(run.pk)]),
                                        exporter=reviewer).cases  # fmt: skip
    assert labelled.case == exported | {"id": "arith-85", "check": {"type": "exact", "value": "85"}}
    assert str(run.pk) not in queued(client)  # labelled: off the queue

    path = tmp_path / "labelled.yaml"
    assert "1 labelled case(s)" in export_labelled(path)
    assert path.read_text().startswith("# Eval cases labelled by reviewers")
    [case] = load_cases(path)
    assert (case.id, case.input, case.source_run) == ("arith-85", ARITHMETIC, str(run.pk))
    assert [(f.tool, f.arguments, f.output) for f in case.fixtures] == [
        ("calculator", {"expression": "12*7"}, "84"),
        ("calculator", {"expression": "84+1"}, "85"),
    ]
    eval_run, _ = replay(path)
    assert (eval_run.total, eval_run.passed) == (1, 1)


def test_a_run_without_a_final_answer_is_labelled_with_the_reviewers_answer(alice, reviewer, tmp_path):
    run = stored_run(alice, input="What is 6*7?", status="done", stop_reason="max_turns", output=None,
                     tools=["calculator"])  # fmt: skip
    call = {"name": "calculator", "arguments": {"expression": "6*7"}, "output": "42", "is_error": False}
    Step.objects.create(run=run, index=0, kind="tool", data={"call_id": "c1", **call})
    score(run, 0.0, source="human", name="feedback")
    client = logged_in(reviewer)
    assert "no final answer (max_turns)" in client.get(label_url(run)).content.decode()

    assert label(client, run, case_id="six-sevens", check_type="numeric", expected=" 42 ").status_code == 302

    case = LabelledCase.objects.get().case
    assert case["check"] == {"type": "numeric", "value": 42} and case["source_run"] == str(run.pk)
    assert case["fixtures"] == [{"tool": call["name"], **{k: call[k] for k in ("arguments", "output", "is_error")}}]
    export_labelled(tmp_path / "cases.yaml")
    [loaded] = load_cases(tmp_path / "cases.yaml")
    assert loaded.id == "six-sevens" and loaded.checks[0].type == "numeric"


@pytest.mark.parametrize(
    ("fields", "check"),
    [
        ({"check_type": "contains", "expected": "eighty", "ignore_case": "on"},
         {"type": "contains", "value": "eighty", "ignore_case": True}),
        ({"check_type": "exact", "expected": "two\r\nlines\r\n"}, {"type": "exact", "value": "two\nlines"}),
        ({"check_type": "regex", "expected": r"^8\d$"}, {"type": "regex", "value": r"^8\d$"}),
        ({"check_type": "judge", "expected": "", "rubric": "Says 85."}, {"type": "judge", "rubric": "Says 85."}),
        ({"check_type": "judge", "expected": "85", "rubric": "Right sum."},
         {"type": "judge", "rubric": "Right sum.\n\nThe expected answer: 85"}),
    ],
)  # fmt: skip
def test_each_check_type_is_stored_as_a_cases_file_holds_it(alice, reviewer, tmp_path, fields, check):
    run = stored_run(alice)
    assert label(logged_in(reviewer), run, **fields).status_code == 302
    assert LabelledCase.objects.get().case["check"] == check
    export_labelled(tmp_path / "cases.yaml")
    assert load_cases(tmp_path / "cases.yaml")[0].check == check


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"case_id": ""}, "case_id", "This field is required."),
        ({"case_id": "two words"}, "case_id", "no spaces"),
        ({"case_id": "taken"}, "case_id", "A labelled case with this id exists already"),
        ({"check_type": "regex", "expected": "(unclosed"}, "expected", "invalid regex"),
        ({"check_type": "numeric", "expected": "eighty-five"}, "expected", "A numeric check needs a number"),
        ({"check_type": "exact", "expected": "  "}, "expected", "The exact check needs the expected answer"),
        ({"check_type": "judge", "rubric": " "}, "rubric", "A judge check needs a rubric"),
        ({"check_type": "similar"}, "check_type", "Select a valid choice"),
    ],
)
def test_bad_input_is_a_form_error_and_stores_nothing(alice, reviewer, fields, field, message):
    LabelledCase.objects.create(case_id="taken", case={"id": "taken"})
    run = stored_run(alice)

    response = label(logged_in(reviewer), run, **fields)

    assert response.status_code == 200
    errors = response.context["form"].errors
    assert field in errors and message in " ".join(errors[field]), errors
    assert "The run was not labelled" in response.content.decode()
    assert list(LabelledCase.objects.values_list("case_id", flat=True)) == ["taken"]


def test_memory_is_labelled_by_its_owner_only(alice, reviewer):
    demo_run(alice, "remember that my favourite colour is teal")
    run = demo_run(alice, "what do you remember about my favourite colour?")
    client = logged_in(reviewer)
    assert "only its owner can label it" in client.get(label_url(run)).content.decode()

    response = label(client, run, case_id="colour", expected="teal")

    assert response.status_code == 200
    assert "It used recall: its memory is its owner&#x27;s" in response.content.decode()
    assert not LabelledCase.objects.exists()

    owner = make_user("mo", staff=True, reviewer=True)
    demo_run(owner, "remember that my favourite colour is teal")
    own = demo_run(owner, "what do you remember about my favourite colour?")
    assert label(logged_in(owner), own, case_id="colour", check_type="contains", expected="teal").status_code == 302
    assert LabelledCase.objects.get().case["fixtures"][0]["tool"] == "recall"


# --- the labelled cases and export_cases --labelled ------------------------------------------------------------------


def test_the_labelled_cases_list_links_the_queue_and_downloads_a_cases_file(alice, reviewer, tmp_path):
    run = stored_run(alice)
    label(logged_in(reviewer), run, case_id="first", expected="x")
    root = logged_in(make_user("root", staff=True, superuser=True))

    html = root.get(LABELLED).content.decode()
    assert 'href="/admin/agents/labelledcase/queue/" id="review-queue-link"' in html and "first" in html

    [labelled] = LabelledCase.objects.all()
    data = {"action": "download", "_selected_action": [str(labelled.pk)], "index": "0"}
    response = root.post(LABELLED, data)
    assert response["Content-Type"] == "text/yaml; charset=utf-8"
    (tmp_path / "d.yaml").write_bytes(response.content)
    assert [c.id for c in load_cases(tmp_path / "d.yaml")] == ["first"]
    assert root.get(f"{LABELLED}{labelled.pk}/change/").status_code == 200


def test_export_labelled_writes_every_labelled_case_oldest_first(alice, reviewer, tmp_path):
    client = logged_in(reviewer)
    for case_id in ("b-first", "a-second"):
        assert label(client, stored_run(alice), case_id=case_id, expected="x").status_code == 302

    export_labelled(tmp_path / "all.yaml")

    assert [c.id for c in load_cases(tmp_path / "all.yaml")] == ["b-first", "a-second"]
    out = io.StringIO()
    call_command("export_cases", "--labelled", stdout=out, stderr=io.StringIO())  # without --output: on stdout
    assert "id: b-first" in out.getvalue()


def test_export_labelled_without_labelled_cases_or_with_run_filters_fails(alice, tmp_path):
    with pytest.raises(CommandError, match="No labelled case") as exc:
        export_labelled(tmp_path / "none.yaml")
    assert exc.value.returncode == 1 and not (tmp_path / "none.yaml").exists()
    with pytest.raises(CommandError, match="--labelled takes no --run") as exc:
        call_command("export_cases", "--labelled", "--status", "done", stdout=io.StringIO(), stderr=io.StringIO())
    assert exc.value.returncode == 2
