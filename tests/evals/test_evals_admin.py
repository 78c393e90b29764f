"""Eval runs in the admin: the list with pass rates, results linked to their traces, and compare."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from tests.conftest import make_user
from tests.evals.conftest import stored_eval_run

CHANGELIST = "/admin/agents/evalrun/"


@pytest.fixture
def root(db):
    return make_user("root", staff=True, superuser=True)


@pytest.fixture
def admin_client(root):
    client = Client()
    client.force_login(root)
    return client


def compare(client, *eval_runs, follow: bool = False):
    data = {"action": "compare", "_selected_action": [str(r.pk) for r in eval_runs], "index": "0"}
    return client.post(CHANGELIST, data, follow=follow)


def rows(html: str) -> list[tuple[str, list[str]]]:
    """(class, cells) of each body row of the compare table."""
    body = html.split('<table id="compare">')[1].split("<tbody>")[1].split("</tbody>")[0]
    found = []
    for attrs, inner in re.findall(r"<tr([^>]*)>(.*?)</tr>", body, re.S):
        css = re.search(r'class="([^"]*)"', attrs)
        cells = [c.strip() for c in re.findall(r"<td>(.*?)</td>", inner, re.S)]
        found.append((css.group(1) if css else "", cells))
    return found


def test_the_list_shows_pass_rates(admin_client):
    stored_eval_run({("a", "tools"): True, ("a", "react"): True, ("b", "tools"): True, ("b", "react"): False})
    stored_eval_run({("a", "tools"): False})

    response = admin_client.get(CHANGELIST)
    assert response.status_code == 200
    html = response.content.decode()
    assert "75.0 %" in html and "3/4" in html
    assert "0.0 %" in html and "0/1" in html
    assert 'href="/admin/agents/evalrun/add/"' not in html  # eval runs are made by running evals


def test_the_change_page_links_each_result_to_its_trace(admin_client, root):
    eval_run = stored_eval_run({("a", "tools"): True, ("b", "react"): False}, owner=root)
    runs = [r.run for r in eval_run.results.select_related("run")]

    response = admin_client.get(f"{CHANGELIST}{eval_run.pk}/change/")
    assert response.status_code == 200
    html = response.content.decode()
    for run in runs:
        assert f'href="/admin/agents/run/{run.pk}/change/"' in html
        assert f">{str(run.pk)[:8]}</a>" in html
    assert "missing &#x27;x&#x27; in b" in html
    assert admin_client.get(f"/admin/agents/run/{runs[0].pk}/change/").status_code == 200


def test_a_result_without_a_run_shows_a_dash(admin_client):
    eval_run = stored_eval_run({("a", "tools"): True})
    html = admin_client.get(f"{CHANGELIST}{eval_run.pk}/change/").content.decode()
    (cell,) = re.findall(r'<td class="field-trace">(.*?)</td>', html, re.S)
    assert cell.strip() == "<p>—</p>"


def test_compare_two_eval_runs_case_by_case(admin_client):
    a = stored_eval_run(
        {("arith", "tools"): True, ("arith", "react"): True, ("mem", "tools"): True, ("old", "tools"): True}
    )
    b = stored_eval_run(
        {("arith", "tools"): True, ("arith", "react"): False, ("mem", "tools"): True, ("new", "react"): False},
        max_reflections=2,
    )

    response = compare(admin_client, b, a)  # selection order does not matter: older is A
    assert response.status_code == 200
    assert [t.name for t in response.templates][0] == "admin/agents/evalrun/compare.html"
    html = response.content.decode()
    assert f"Eval run {a.pk} vs {b.pk}" in html
    assert "reflections 2" in html

    table = rows(html)
    assert [cells[:4] for _, cells in table] == [
        ["arith", "react", "pass", "FAIL"],
        ["arith", "tools", "pass", "pass"],
        ["mem", "tools", "pass", "pass"],
        ["new", "react", "—", "FAIL"],
        ["old", "tools", "pass", "—"],
    ]
    assert [css for css, _ in table] == ["changed", "", "", "", ""]  # only a case present in both can change
    assert table[0][1][5] == "missing &#x27;x&#x27; in arith"


def test_compare_needs_exactly_two(admin_client):
    runs = [stored_eval_run({("a", "tools"): True}) for _ in range(3)]
    for selection in (runs[:1], runs):
        response = compare(admin_client, *selection, follow=True)
        assert response.status_code == 200
        assert response.redirect_chain and response.redirect_chain[-1][0].endswith(CHANGELIST)
        assert [str(m) for m in response.context["messages"]] == ["Select exactly two eval runs to compare."]
        assert '<table id="compare">' not in response.content.decode()


def test_staff_without_permission_see_no_eval_runs(db):
    client = Client()
    client.force_login(make_user("vera", staff=True))
    assert client.get(CHANGELIST).status_code == 403
