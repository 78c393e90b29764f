"""The run page decides every call of a reply together in a real browser (Debian's Chromium); the admin index draws
the last 30 days of token usage as a bar chart."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.sync_api import expect

from agents.models import DailyUsage, Step
from agents.usage import quotas
from tests.browser.conftest import login
from tests.conftest import make_user
from tests.console.conftest import DDG_ANSWER, pause_three
from tests.providers import stub_llm


@pytest.fixture
def llm(ddg, settings):
    """The openai provider and DuckDuckGo, both answered by the local stub."""
    settings.OPENAI_API_KEY = stub_llm.fake_key()
    settings.OPENAI_BASE_URL = ddg.url + "/v1"
    ddg.add("GET", "/", json=DDG_ANSWER, repeat=True)
    return ddg


def test_a_three_call_reply_decided_together_on_the_run_page(new_page, llm, artifacts):
    alice = make_user("alice")
    make_user("rita", staff=True, reviewer=True)
    run = pause_three(alice, llm)
    page = new_page()
    login(page, "rita", next_url=f"/admin/agents/run/{run.pk}/change/")
    box = page.locator("#pending-approval")
    expect(box.locator("h2")).to_have_text("Waiting for approval: search, calculator, search")
    expect(box.locator(".pending-call")).to_have_count(3)
    expect(box.locator("#approval-expiry")).to_contain_text("Time left to decide: 23")

    page.fill("#id_arguments_1", '{"query": "django tasks"}')
    page.check("#id_choice_1_approve")
    page.check("#id_choice_2_approve")
    page.check("#id_choice_3_deny")
    page.fill("#id_reason_3", "not needed")
    box.screenshot(path=str(artifacts / "admin-approvals-batch.png"))
    page.click("#decide-all-button")

    expect(page.locator(".messagelist .success")).to_have_text("3 decisions recorded; the run is now done.")
    expect(page.locator("#pending-approval")).to_have_count(0)
    decided = page.locator("#trace li.kind-approval")
    expect(decided).to_have_count(3)
    expect(decided.nth(0)).to_contain_text("Approved search by rita")
    expect(decided.nth(0)).to_contain_text('"django tasks"')
    expect(decided.nth(1)).to_contain_text("Approved calculator by rita")
    expect(decided.nth(2)).to_contain_text("Denied search by rita — not needed")
    expect(page.locator("#trace .final-answer")).to_have_text("done")
    page.screenshot(path=str(artifacts / "admin-approvals-batch-done.png"), full_page=True)

    approvals = [s.data for s in Step.objects.filter(run=run, kind="approval").order_by("index")]
    assert [(a["call_id"], a["approved"], a["reviewer"]) for a in approvals] == [
        ("c1", True, "rita"),
        ("c2", True, "rita"),
        ("c3", False, "rita"),
    ]
    assert page.errors == []


def test_the_admin_index_draws_thirty_days_of_usage(new_page, artifacts):
    make_user("root", staff=True, superuser=True)
    today = quotas.today()
    for name, scale in (("alice", 900), ("bob", 400), ("carol", 150)):
        user = make_user(name)
        for day in range(0, 30, 2 if name == "bob" else 1):
            DailyUsage.objects.create(owner=user, day=today - timedelta(days=day), prompt_tokens=scale * (day % 7 + 1))
    page = new_page()
    login(page, "root", next_url="/admin/")
    chart = page.locator("#usage-chart")
    expect(chart).to_be_visible()
    expect(chart.locator("g.day")).to_have_count(30)
    heights = [chart.locator("rect.bar").nth(i).bounding_box()["height"] for i in range(30)]
    tokens = [int(chart.locator("g.day").nth(i).get_attribute("data-tokens")) for i in range(30)]
    peak = max(tokens)
    for height, total in zip(heights, tokens, strict=True):  # drawn to scale
        assert height == pytest.approx(heights[tokens.index(peak)] * total / peak, abs=1.5)
    assert chart.bounding_box()["width"] > 300
    expect(page.locator("#top-users-today tr.top-user th")).to_have_text(["alice", "bob", "carol"])
    page.locator("#usage-dashboard").screenshot(path=str(artifacts / "admin-usage-panel.png"))
    page.screenshot(path=str(artifacts / "admin-index-usage.png"), full_page=True)
    assert page.errors == []
