"""Eval runs in the operator console: the new fields (cases hash, repeat, baseline, score, cost, the gate), results
with their attempt, score, checks and flaky cases, the compare's score deltas and trajectory diffs, and the trend of
one cases file (agents/evals/admin.py, agents/evals/console.py)."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.conf import settings
from django.test import Client
from django.utils import timezone

from agents.evals import console
from agents.models import EvalResult, EvalRun, Step
from tests.conftest import make_user
from tests.evals.conftest import stored_eval_run, stored_run

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/agents/evalrun/"
TREND = "/admin/agents/evalrun/trend/"
SHA = "ab12cd34ef56" + "0" * 52


@pytest.fixture
def root(db):
    return make_user("root", staff=True, superuser=True)


@pytest.fixture
def admin_client(root):
    client = Client()
    client.force_login(root)
    return client


def page(client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, response.status_code
    return response.content.decode()


def eval_run(cases_file: str = "cases/x.yaml", **fields) -> EvalRun:
    defaults = {"provider": "demo", "model": "demo-1", "protocol": "per case", "cases_file": cases_file}
    return EvalRun.objects.create(**(defaults | fields))


def result(of: EvalRun, case_id: str, passed: bool, *, attempt: int = 1, protocol: str = "tools", **fields):
    score = fields.pop("score", 1.0 if passed else 0.0)
    reason = fields.pop("reason", "" if passed else f"wrong answer in {case_id}")
    return EvalResult.objects.create(
        eval_run=of, case_id=case_id, protocol=protocol, attempt=attempt, passed=passed, score=score, reason=reason,
        **fields,
    )  # fmt: skip


def tool_calls(owner, *calls: tuple[str, dict]):
    """A stored run whose tool steps make `calls` (name, arguments), in order."""
    run = stored_run(owner)
    for index, (name, arguments) in enumerate(calls):
        data = {"call_id": f"c{index}", "name": name, "arguments": arguments, "output": "1", "is_error": False}
        Step.objects.create(run=run, index=index, kind="tool", data=data)
    return run


def cells(html: str, field: str) -> list[str]:
    """The inline's cells of one column, in row order."""
    return [c.strip() for c in re.findall(rf'<td class="field-{field}">(.*?)</td>', html, re.S)]


# --- the list and the page -----------------------------------------------------------------------------------------


def test_the_list_and_the_page_show_score_cost_repeat_baseline_and_the_gate(admin_client):
    base = eval_run(total=2, passed=2, pass_rate=1.0, score=1.0)
    gate = {
        "passed": False, "pass_rate": 0.5, "min_pass_rate": 0.9, "baseline": base.pk, "baseline_pass_rate": 1.0,
        "max_drop": 0.05, "failures": ["pass rate 50.0% is below the minimum 90.0%"], "regressions": ["b [tools]"],
        "flaky": [],
    }  # fmt: skip
    run = eval_run(total=2, passed=1, pass_rate=0.5, score=0.8333333, cost_nanos=12_345_000, repeat=3,
                   cases_sha256=SHA, baseline=base, gate=gate)  # fmt: skip
    passed_gate = gate | {"passed": True, "failures": [], "regressions": []}
    passing = eval_run(total=1, passed=1, pass_rate=1.0, gate=passed_gate)

    listing = page(admin_client, CHANGELIST)
    assert "1/2" in listing and "50.0 %" in listing and "0.83" in listing and "0.8333" not in listing
    assert f"0.012345 {settings.AGENT_CURRENCY}" in listing
    assert '<strong class="gate-fail">FAILED</strong>' in listing
    assert '<strong class="gate-pass">passed</strong>' in listing
    assert "b [tools]" not in listing  # the list says the verdict; its reasons are on the page

    html = page(admin_client, f"{CHANGELIST}{run.pk}/change/")
    assert "ab12cd34ef56" in html and SHA not in html
    assert f'<a href="/admin/agents/evalrun/{base.pk}/change/">eval run {base.pk}</a>' in html
    assert f'href="/admin/agents/evalrun/compare/{base.pk}/{run.pk}/"' in html
    assert "FAILED" in html and "pass rate 50.0% is below the minimum 90.0%" in html
    assert '<div class="gate-regressions">regressions:<ul><li>b [tools]</li></ul></div>' in html
    assert f"at most 5.0 % below eval run {base.pk}" in html
    repeat = re.search(r'class="form-row field-repeat">.*?<div class="readonly">(.*?)</div>', html, re.S)
    assert repeat and repeat.group(1) == "3"
    assert "— (no gate was asked)" in page(admin_client, f"{CHANGELIST}{base.pk}/change/")
    assert '<strong class="gate-pass">passed</strong> — ' in page(admin_client, f"{CHANGELIST}{passing.pk}/change/")


def test_results_show_attempt_score_and_each_check_and_flaky_cases_are_marked(admin_client):
    run = eval_run(repeat=3, total=6, passed=5)
    exact = {"type": "exact", "passed": True, "score": 1.0, "reason": "", "weight": 1}
    judge_passed = {"type": "judge", "passed": True, "score": 0.9, "reason": "", "weight": 1}
    judge_failed = {"type": "judge", "passed": False, "score": 0.4, "reason": "judged 0.40 (below 0.5)", "weight": 1}
    for attempt, ok in enumerate([True, False, True], 1):
        checks = [exact, judge_passed if ok else judge_failed]
        result(run, "a", ok, attempt=attempt, checks=checks, score=0.7 if not ok else 0.95)
    for attempt in (1, 2, 3):
        result(run, "b", True, attempt=attempt, cost_nanos=2_000_000)

    html = page(admin_client, f"{CHANGELIST}{run.pk}/change/")

    assert cells(html, "case_id") == ["<p>a</p>"] * 3 + ["<p>b</p>"] * 3
    assert cells(html, "attempt") == [f"<p>{n}</p>" for n in (1, 2, 3)] * 2
    flaky = [re.sub(r"<[^>]+>", "", c).strip() for c in cells(html, "flaky")]
    assert flaky == ["flaky 2/3"] * 3 + [""] * 3  # a passed 2 of its 3 attempts; b every one
    assert 'title="passed 2 of 3 attempts"' in html
    assert cells(html, "result_score")[:2] == ["<p>0.95</p>", "<p>0.70</p>"]
    failed = cells(html, "check_outcomes")[1]
    assert '<span class="check-pass" title="">✓ exact</span>' in failed
    assert '<span class="check-fail" title="judged 0.40 (below 0.5)">✗ judge 0.40</span>' in failed
    assert cells(html, "check_outcomes")[3] == "<p>—</p>"  # a result stored without its checks
    assert cells(html, "cost")[3] == "<p>0.002</p>"
    assert "a [tools] 2/3" in html  # the page's list of flaky cases


# --- compare ---------------------------------------------------------------------------------------------------------


def compare_rows(html: str) -> list[list[str]]:
    body = html.split('<table id="compare">')[1].split("<tbody>")[1].split("</tbody>")[0]
    return [[c.strip() for c in re.findall(r"<td>(.*?)</td>", row, re.S)] for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)]  # fmt: skip  # noqa: E501


def trajectory(html: str, case: str) -> list[tuple[str, list[str]]]:
    """(class, [A, B, note]) of each call row of a case's trajectory."""
    section = re.search(rf'<details class="trajectory"[^>]*data-case="{case}"[^>]*>(.*?)</details>', html, re.S)
    assert section, f"no trajectory of {case}"
    found = []
    for css, inner in re.findall(r'<tr class="(same|differs)">(.*?)</tr>', section.group(1), re.S):
        found.append((css, [c.strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", inner, re.S)][1:]))
    return found


def test_compare_shows_score_deltas_pass_changes_and_the_calls_that_differ(admin_client, root):
    a, b = eval_run(total=3, passed=2), eval_run(total=3, passed=2)
    twelve, plus_one = ("calculator", {"expression": "12*7"}), ("calculator", {"expression": "84+1"})
    result(a, "arith", True, run=tool_calls(root, twelve, plus_one))
    result(b, "arith", False, run=tool_calls(root, twelve, ("calculator", {"expression": "84+2"})), score=0.25)
    result(a, "search", True, run=tool_calls(root, ("search", {"query": "django"})))
    result(b, "search", True, run=tool_calls(root, ("search", {"query": "django"})))
    result(a, "mixed", False, score=0.5, run=tool_calls(root, twelve))
    result(b, "mixed", True, run=tool_calls(root, ("search", {"query": "x"}), twelve))

    data = {"action": "compare", "_selected_action": [str(b.pk), str(a.pk)], "index": "0"}
    response = admin_client.post(CHANGELIST, data)

    assert response.status_code == 200
    html = response.content.decode()
    rows = {row[0]: row for row in compare_rows(html)}
    assert rows["arith"][2:4] == ["pass", "FAIL"] and rows["arith"][6:] == ["1.00 → 0.25", "-0.75", "regressed"]
    assert rows["mixed"][6:] == ["0.50 → 1.00", "+0.50", "fixed"]
    assert rows["search"][6:] == ["1.00 → 1.00", "±0.00", ""]
    assert trajectory(html, "arith") == [
        ("same", ['calculator {&quot;expression&quot;: &quot;12*7&quot;}'] * 2 + [""]),
        ("differs", ['calculator {&quot;expression&quot;: &quot;84+1&quot;}',
                     'calculator {&quot;expression&quot;: &quot;84+2&quot;}', "arguments differ"]),
    ]  # fmt: skip
    assert trajectory(html, "mixed") == [
        ("differs", ["—", "search {&quot;query&quot;: &quot;x&quot;}", "only in B"]),
        ("same", ["calculator {&quot;expression&quot;: &quot;12*7&quot;}"] * 2 + [""]),
    ]
    assert [css for css, _ in trajectory(html, "search")] == ["same"]
    assert re.search(r'data-case="arith"[^>]* open>', html) and not re.search(r'data-case="search"[^>]* open>', html)

    again = page(admin_client, f"{CHANGELIST}compare/{a.pk}/{b.pk}/")  # the baseline's link: the same compare
    assert compare_rows(again) == compare_rows(html)


def test_compare_marks_flaky_cases_by_their_attempts(admin_client):
    a, b = eval_run(repeat=3), eval_run(repeat=3)
    for attempt, ok in enumerate([True, True, True], 1):
        result(a, "c", ok, attempt=attempt)
    for attempt, ok in enumerate([True, False, True], 1):
        result(b, "c", ok, attempt=attempt, reason="" if ok else "flaked")

    html = page(admin_client, f"{CHANGELIST}compare/{a.pk}/{b.pk}/")

    [row] = compare_rows(html)
    assert row[:6] == ["c", "tools", "pass", "2/3", "", "flaked"]
    assert row[6:] == ["1.00 → 0.67", "-0.33", "regressed"]


def test_trajectories_need_the_right_to_see_runs(db, root):
    """Staff who may see eval runs but not runs see the scores, not the runs' calls."""
    from tests.console.conftest import grant

    a, b = eval_run(), eval_run()
    result(a, "c", True, run=tool_calls(root, ("search", {"query": "secret"})))
    result(b, "c", True, run=tool_calls(root, ("search", {"query": "secret"})))
    client = Client()
    client.force_login(grant(make_user("eve", staff=True), "view_evalrun"))

    html = page(client, f"{CHANGELIST}compare/{a.pk}/{b.pk}/")

    assert compare_rows(html) == [["c", "tools", "pass", "pass", "", "", "1.00 → 1.00", "±0.00", ""]]
    assert "secret" not in html and "shown to those who may see runs" in html


def test_trajectory_diff_aligns_equal_calls():
    call = console.Call
    a = [call("s", {"q": "a"}), call("c", {"x": 1}), call("c", {"x": 2})]
    b = [call("c", {"x": 1.0}), call("c", {"x": 3}), call("t", {})]
    diff = console.trajectory_diff(a, b)
    assert [(r.a and r.a.name, r.b and r.b.name, r.note) for r in diff.rows] == [
        ("s", None, "only in A"),
        ("c", "c", ""),  # 1 and 1.0 are the same argument, as for the replay's fixtures
        ("c", "c", "arguments differ"),
        (None, "t", "only in B"),
    ]
    assert diff.differing == 3 and not console.trajectory_diff(a, a).differs


# --- the trend -------------------------------------------------------------------------------------------------------


def test_the_trend_lists_a_cases_files_runs_oldest_first(admin_client):
    now = timezone.now()
    made = []
    for days, rate, sha in [(3, 0.5, SHA), (1, 1.0, SHA), (2, 0.75, "f" * 64)]:
        run = eval_run(pass_rate=rate, total=4, passed=int(rate * 4), cases_sha256=sha, cost_nanos=1_000_000)
        EvalRun.objects.filter(pk=run.pk).update(created_at=now - timedelta(days=days))
        made.append(run)
    other = eval_run("cases/other.yaml")

    html = page(admin_client, f"{CHANGELIST}{made[0].pk}/change/")
    link = re.search(r'<a href="([^"]+)" id="trend-link">trend of this cases file</a>', html)
    assert link and link.group(1) == f"{TREND}?cases_file=cases%2Fx.yaml"

    trend = page(admin_client, link.group(1).replace("&amp;", "&"))
    listed = [int(pk) for pk in re.findall(r'<tr class="trend-run" data-eval-run="(\d+)">', trend)]
    assert listed == [made[0].pk, made[2].pk, made[1].pk] and other.pk not in listed
    rates = re.findall(r"</span></span>([\d.]+ %)</td>", trend)
    assert rates == ["50.0 %", "75.0 %", "100.0 %"]
    assert trend.count('class="cases-changed"') == 2  # SHA → f… → SHA
    points = re.search(r'id="pass-sparkline".*?points="([^"]+)"', trend, re.S)
    assert points and len(points.group(1).split()) == 3
    assert trend.count(f"<td>0.001 {settings.AGENT_CURRENCY}</td>") == 3


def test_the_trend_without_a_cases_file_lists_the_files(admin_client):
    eval_run("cases/a.yaml")
    eval_run("cases/a.yaml")
    eval_run("cases/b.yaml")
    assert f'<a href="{TREND}" id="trend-index-link">' in page(admin_client, CHANGELIST)
    html = page(admin_client, TREND)
    assert re.findall(r'<a href="\?cases_file=([^"]+)">', html) == ["cases%2Fa.yaml", "cases%2Fb.yaml"]
    assert page(admin_client, f"{TREND}?cases_file=nothing.yaml").count("No eval run of this cases file.") == 1


def test_trend_points_scale_rates_to_the_box():
    assert console.trend_points([1.0, 0.0], width=10, height=10, pad=0) == "0.0,0.0 10.0,10.0"
    assert console.trend_points([0.5], width=10, height=10, pad=0) == "5.0,5.0"
    assert console.trend_points([]) == ""


# --- who sees them -----------------------------------------------------------------------------------------------


def urls() -> list[str]:
    a = stored_eval_run({("a", "tools"): True})
    b = stored_eval_run({("a", "tools"): False})
    return [
        CHANGELIST,
        f"{CHANGELIST}{a.pk}/change/",
        TREND,
        f"{TREND}?cases_file=agents/evals/cases.yaml",
        f"{CHANGELIST}compare/{a.pk}/{b.pk}/",
    ]


def test_every_view_renders_for_staff_with_the_right_and_is_refused_otherwise(admin_client):
    from tests.console.conftest import grant

    staff_viewer = Client()
    staff_viewer.force_login(grant(make_user("vera", staff=True), "view_evalrun"))
    staff_without = Client()
    staff_without.force_login(make_user("sam", staff=True))
    outsider = Client()
    outsider.force_login(make_user("alice"))

    for url in urls():
        assert admin_client.get(url).status_code == 200, url
        assert staff_viewer.get(url).status_code == 200, url
        assert staff_without.get(url).status_code == 403, url
        response = outsider.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/"), url
