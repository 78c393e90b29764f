"""Quotas and usage in the console: per-user quota overrides (editable), daily usage (read-only), and the admin index
panel's 30-day chart, today's total and the top users with their quotas."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from agents.models import DailyUsage, TokenQuota
from agents.usage import quotas
from tests.conftest import make_user
from tests.console.conftest import logged_in

pytestmark = pytest.mark.django_db

QUOTAS = "/admin/agents/tokenquota/"
USAGE = "/admin/agents/dailyusage/"
DAY_BAR = re.compile(r'<g class="day( today)?" data-day="([0-9-]{10})" data-tokens="(\d+)">\s*<title>([^<]*)</title>')


def used(user, days_ago: int, prompt: int, completion: int = 0) -> DailyUsage:
    return DailyUsage.objects.create(
        owner=user, day=quotas.today() - timedelta(days=days_ago), prompt_tokens=prompt, completion_tokens=completion
    )


def panel(html: str) -> str:
    block = re.search(r'<div class="module" id="usage-dashboard">(.*?)\n</div>', html, re.S)
    assert block, "no usage panel on the admin index"
    return block.group(1)


def top_rows(html: str, table_id: str) -> list[tuple[str, str, str]]:
    table = re.search(rf'<table id="{table_id}">(.*?)</table>', html, re.S).group(1)
    row = r'<tr class="top-user"><th scope="row">([^<]*)</th><td class="num">([^<]*)</td><td class="num">([^<]*)</td>'
    return re.findall(row, table)


# --- quota overrides --------------------------------------------------------------------------------------------------


def test_superuser_adds_and_changes_a_quota_override(superuser, alice, settings):
    settings.AGENT_DAILY_TOKEN_QUOTA = 1000
    client = logged_in(superuser)
    form = client.get(f"{QUOTAS}add/").content.decode()
    assert "0 means no quota for this user" in form
    assert "AGENT_DAILY_TOKEN_QUOTA (1000)" in form
    assert 'name="user"' in form and "admin-autocomplete" in form

    response = client.post(f"{QUOTAS}add/", {"user": alice.pk, "daily_tokens": "5000"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert quotas.quota_for(alice.pk) == 5000

    change = f"{QUOTAS}{alice.pk}/change/"
    assert 'name="user"' not in client.get(change).content.decode()  # the key is read-only once the row exists
    response = client.post(change, {"user": make_user("mallory").pk, "daily_tokens": "0"})
    assert response.status_code == 302
    assert list(TokenQuota.objects.values_list("user_id", "daily_tokens")) == [(alice.pk, 0)]
    assert quotas.quota_for(alice.pk) == 0  # 0: no quota for alice, whatever the default


def test_quota_list_shows_the_quota_and_todays_usage(superuser, alice, bob):
    TokenQuota.objects.create(user=alice, daily_tokens=12000)
    TokenQuota.objects.create(user=bob, daily_tokens=0)
    used(alice, 0, 700, 300)
    used(alice, 1, 99999)  # yesterday: not today's usage
    html = logged_in(superuser).get(QUOTAS).content.decode()
    cells = dict(
        re.findall(
            r'<th class="field-user nowrap"><a href="[^"]*">([^<]*)</a></th><td class="field-quota">([^<]*)<', html
        )
    )
    assert cells == {"alice": "12,000", "bob": "no quota"}
    assert re.findall(r'class="field-used_today">([^<]*)<', html) == ["1,000", "0"]


def test_staff_without_permissions_cannot_edit_quotas(staff_viewer, reviewer, alice):
    for user in (staff_viewer, reviewer):
        client = logged_in(user)
        assert client.get(QUOTAS).status_code == 403
        assert client.post(f"{QUOTAS}add/", {"user": alice.pk, "daily_tokens": "1"}).status_code == 403
    assert not TokenQuota.objects.exists()


# --- daily usage ------------------------------------------------------------------------------------------------------


def test_daily_usage_is_listed_read_only(superuser, alice, bob):
    row = used(alice, 0, 120, 30)
    used(bob, 2, 5, 5)
    client = logged_in(superuser)
    response = client.get(USAGE)
    assert response.status_code == 200
    html = response.content.decode()
    for column in ("owner", "day", "prompt_tokens", "completion_tokens", "total"):
        assert f"column-{column}" in html
    assert re.findall(r'class="field-total">(\d+)<', html) == ["150", "10"]  # newest day first
    assert f'href="{USAGE}add/"' not in html and 'value="delete_selected"' not in html

    assert client.get(f"{USAGE}add/").status_code == 403
    page = client.get(f"{USAGE}{row.pk}/change/")
    assert page.status_code == 200 and 'name="prompt_tokens"' not in page.content.decode()
    client.post(f"{USAGE}{row.pk}/change/", {"prompt_tokens": "1"})
    assert client.post(f"{USAGE}{row.pk}/delete/", {"post": "yes"}).status_code == 403
    row.refresh_from_db()
    assert (row.prompt_tokens, row.completion_tokens) == (120, 30)


def test_daily_usage_filter_by_day_and_search_by_username(superuser, alice, bob):
    today = quotas.today()
    used(alice, 0, 1)
    used(bob, 0, 2)
    used(alice, 3, 4)
    client = logged_in(superuser)

    def found(**params) -> set:
        return {(r.owner.username, r.day) for r in client.get(USAGE, params).context["cl"].result_list}

    assert found(q="alice") == {("alice", today), ("alice", today - timedelta(days=3))}
    assert found(day__gte=today.isoformat(), day__lt=(today + timedelta(days=1)).isoformat()) == {
        ("alice", today),
        ("bob", today),
    }
    assert found(day__day=str((today - timedelta(days=3)).day), day__month=str((today - timedelta(days=3)).month),
                 day__year=str((today - timedelta(days=3)).year)) == {("alice", today - timedelta(days=3))}  # fmt: skip


# --- the index panel --------------------------------------------------------------------------------------------------


def test_chart_has_a_bar_per_day_with_the_days_totals(superuser, alice, bob):
    used(alice, 0, 1000, 500)
    used(bob, 0, 250)
    used(alice, 5, 3000, 1000)
    used(bob, 29, 7)
    used(alice, 30, 123456)  # 31 days ago today counted: outside the window
    html = logged_in(superuser).get("/admin/").content.decode()
    body = panel(html)
    bars = DAY_BAR.findall(body)
    assert len(bars) == 30
    today = quotas.today()
    assert [day for _, day, _, _ in bars] == [(today - timedelta(days=29 - i)).isoformat() for i in range(30)]
    totals = {day: int(tokens) for _, day, tokens, _ in bars}
    assert totals[today.isoformat()] == 1750
    assert totals[(today - timedelta(days=5)).isoformat()] == 4000
    assert totals[(today - timedelta(days=29)).isoformat()] == 7
    assert sum(totals.values()) == 1750 + 4000 + 7
    assert [today_class for today_class, *_ in bars].count(" today") == 1 and bars[-1][0] == " today"
    assert bars[-1][3].endswith(": 1,750 tokens")
    heights = [float(h) for h in re.findall(r'<rect class="bar" [^>]*height="([0-9.]+)"', body)]
    assert len(heights) == 30 and max(heights) == heights[24] == 100.0  # the busiest day is full height
    assert heights[-1] == pytest.approx(100 * 1750 / 4000, abs=0.1)
    assert heights[0] == 1.0  # a day with a little usage still shows a sliver
    assert heights.count(0.0) == 27  # days without usage: no bar
    assert re.search(r'<strong id="tokens-today">1,750</strong>', body)


def test_chart_has_a_text_alternative(superuser, alice):
    used(alice, 0, 40)
    used(alice, 2, 60)
    body = panel(logged_in(superuser).get("/admin/").content.decode())
    assert re.search(r'<svg id="usage-chart" role="img" aria-labelledby="usage-chart-title usage-chart-desc"', body)
    assert '<title id="usage-chart-title">Tokens used per day from' in body
    desc = re.search(r'<desc id="usage-chart-desc">([^<]*)</desc>', body).group(1)
    assert desc.startswith("100 tokens over 30 days; today 40; the busiest day was")
    table = re.search(r'<details id="usage-table">(.*?)</details>', body, re.S).group(1)
    assert len(re.findall(r"<tr><th scope=\"row\">", table)) == 30
    assert "<script" not in body and "http://" not in body.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_top_users_today_and_over_30_days_in_order_with_their_quota(superuser, settings):
    settings.AGENT_DAILY_TOKEN_QUOTA = 50000
    users = {name: make_user(name) for name in ("ann", "ben", "cat", "dan", "eve", "fay", "gus")}
    TokenQuota.objects.create(user=users["ben"], daily_tokens=9000)
    TokenQuota.objects.create(user=users["cat"], daily_tokens=0)
    for name, today, earlier in [
        ("ann", 100, 0), ("ben", 700, 10), ("cat", 300, 90000), ("dan", 500, 0), ("eve", 200, 400),
        ("fay", 600, 0), ("gus", 0, 80000),
    ]:  # fmt: skip
        if today:
            used(users[name], 0, today)
        if earlier:
            used(users[name], 12, earlier)
    used(users["ann"], 40, 10**6)  # outside the 30 days
    body = panel(logged_in(superuser).get("/admin/").content.decode())
    assert top_rows(body, "top-users-today") == [
        ("ben", "700", "9,000"),
        ("fay", "600", "50,000"),
        ("dan", "500", "50,000"),
        ("cat", "300", "none"),
        ("eve", "200", "50,000"),
    ]
    assert top_rows(body, "top-users-30d") == [
        ("cat", "90,300", "none"),
        ("gus", "80,000", "50,000"),
        ("ben", "710", "9,000"),
        ("eve", "600", "50,000"),  # a tie: by username
        ("fay", "600", "50,000"),
    ]


def test_usage_panel_without_usage(superuser):
    body = panel(logged_in(superuser).get("/admin/").content.decode())
    bars = DAY_BAR.findall(body)
    assert len(bars) == 30 and {tokens for _, _, tokens, _ in bars} == {"0"}
    assert re.findall(r'<rect class="bar" [^>]*height="([0-9.]+)"', body) == ["0.0"] * 30
    assert '<strong id="tokens-today">0</strong>' in body
    assert body.count("No usage.") == 2


def test_usernames_are_escaped_on_the_panel(superuser):
    user = make_user('<b onmouseover="x">eve</b>')
    used(user, 0, 10)
    html = logged_in(superuser).get("/admin/").content.decode()
    assert '<b onmouseover="x">' not in html
    assert "&lt;b onmouseover=&quot;x&quot;&gt;eve&lt;/b&gt;" in panel(html)


def index_queries(client) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        assert client.get("/admin/").status_code == 200
    return [q["sql"] for q in queries.captured_queries]


def test_index_panel_queries_do_not_grow_with_usage(superuser):
    client = logged_in(superuser)
    first = make_user("first")
    used(first, 0, 5)
    few = index_queries(client)
    for i in range(12):
        user = make_user(f"user{i}")
        TokenQuota.objects.create(user=user, daily_tokens=1000 + i)
        for day in range(0, 40, 3):
            used(user, day, 10 * i + day)
    many = index_queries(client)
    assert len(many) == len(few)
    usage = [sql for sql in many if "agents_dailyusage" in sql]
    assert len(usage) == 3  # the days, top today, top 30 days
    assert not any("agents_step" in sql for sql in many)
    assert sum("agents_tokenquota" in sql for sql in many) == 1  # every top user's quota at once
