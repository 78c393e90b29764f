"""The console's Schedules page (agents/admin/schedules.py): the list with each schedule's next time in its own zone
and its last run linked, a form that refuses what the API refuses, saving that counts the next time as the API
does, and the enable/disable actions."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from agents.models import Agent, Run, Schedule
from agents.schedules import services as schedules
from tests.conftest import make_user
from tests.console.conftest import logged_in, stored_run

pytestmark = pytest.mark.django_db

LIST = "/admin/agents/schedule/"
ADD = f"{LIST}add/"


def change_url(schedule: Schedule) -> str:
    return f"{LIST}{schedule.pk}/change/"


def form(owner, **fields) -> dict:
    data = {
        "owner": str(owner.pk), "name": "morning", "cron": "0 9 * * 1-5", "timezone": "Europe/Paris",
        "input": "Summarise the news.", "options": "", "enabled": "on",
    }  # fmt: skip
    return {k: v for k, v in {**data, **fields}.items() if v is not None}


def errors_of(response) -> str:
    """The text of the form's error lists."""
    return " ".join(re.findall(r'<ul class="errorlist[^"]*"[^>]*>(.*?)</ul>', response.content.decode(), re.S))


@pytest.fixture
def staff(superuser):
    return logged_in(superuser)


@pytest.fixture
def owner(db):
    return make_user("olga")


def test_the_list_shows_when_each_fires_in_its_zone_and_links_its_last_run(staff, owner):
    made = schedules.create_schedule(
        owner=owner, name="morning", cron="0 9 * * *", input="News?", timezone_name="Europe/Paris",
        now=datetime(2026, 3, 28, 10, 0, tzinfo=UTC),
    )  # fmt: skip
    run = stored_run(owner)
    Schedule.objects.filter(pk=made.pk).update(last_run=run, last_error="The daily token quota of 10 tokens is used up")
    schedules.create_schedule(owner=owner, name="paused", cron="@hourly", input="Ping?", enabled=False)

    html = staff.get(LIST).content.decode()
    assert "morning" in html and "olga" in html and "0 9 * * *" in html and "Europe/Paris" in html
    assert "2026-03-29 09:00 +0200" in html  # 07:00 UTC, shown as the 09:00 in Paris the expression names
    assert f'href="/admin/agents/run/{run.pk}/change/"' in html
    assert "The daily token quota of 10 tokens is used up" in html
    assert "paused" in html and "@hourly" in html


def test_a_valid_schedule_is_saved_with_its_next_time(staff, owner):
    before = timezone.now()
    response = staff.post(ADD, form(owner, options='{"max_turns": 3}'))
    assert response.status_code == 302, errors_of(response)
    schedule = Schedule.objects.get()
    assert (schedule.owner, schedule.cron, schedule.options, schedule.enabled) == (
        owner,
        "0 9 * * 1-5",
        {"max_turns": 3},
        True,
    )
    counted = {schedules.next_time("0 9 * * 1-5", "Europe/Paris", at) for at in (before, timezone.now())}
    assert schedule.next_run_at in counted  # as the API counts it (the same time unless 09:00 passed meanwhile)
    page = staff.get(change_url(schedule)).content.decode()
    assert "Next three times" in page and page.count(" +0") >= 3  # the coming times, in Paris


@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"cron": "61 * * * *"}, "cron", "Bad minute"),
        ({"cron": "0 0 9 * * *"}, "cron", "seconds field"),
        ({"timezone": "Mars/Olympus"}, "timezone", "Unknown time zone"),
        ({"input": "   "}, "input", "This field is required."),
        ({"options": '{"agent": "nobody"}'}, "options", "agent: No agent named"),
        ({"options": '{"max_turns": 99}'}, "options", "max_turns: Must be between 1 and 50."),
        ({"options": '{"teleport": true}'}, "options", "Unknown run option(s): teleport"),
        ({"options": '{"max_turns": "3"}'}, "options", "max_turns: Expected an integer."),
        ({"options": "[1, 2]"}, "options", "An object of run options"),
    ],
    ids=["cron", "seconds", "zone", "blank-input", "agent", "turns", "unknown-option", "option-type", "not-object"],
)
def test_the_form_refuses_what_the_api_refuses(staff, owner, fields, field, message):
    response = staff.post(ADD, form(owner, **fields))
    assert response.status_code == 200
    errors = response.context_data["adminform"].form.errors
    assert message in " ".join(errors.get(field, [])), errors
    assert Schedule.objects.count() == 0


def test_an_edit_of_the_cron_counts_the_next_time_again_and_an_edit_of_the_input_does_not(staff, owner):
    Agent.objects.create(name="helper", provider="demo")
    schedule = schedules.create_schedule(
        owner=owner, cron="0 9 * * *", input="News?", now=datetime(2026, 3, 2, 8, 0, tzinfo=UTC)
    )
    due = schedule.next_run_at  # in the past now: due, not yet fired

    response = staff.post(change_url(schedule), form(owner, timezone="UTC", input="Other?", cron="0 9 * * *"))
    assert response.status_code == 302, errors_of(response)
    schedule.refresh_from_db()
    assert (schedule.input, schedule.next_run_at) == ("Other?", due)  # still due: the edit did not skip it

    response = staff.post(
        change_url(schedule), form(owner, timezone="UTC", cron="30 6 * * *", options='{"agent": "helper"}')
    )
    assert response.status_code == 302, errors_of(response)
    schedule.refresh_from_db()
    assert schedule.next_run_at > timezone.now() and (schedule.next_run_at.hour, schedule.next_run_at.minute) == (6, 30)
    assert schedule.options == {"agent": "helper"}


def test_the_owner_is_chosen_once(staff, owner):
    schedule = schedules.create_schedule(owner=owner, cron="@daily", input="News?")
    other = make_user("otto")
    response = staff.post(change_url(schedule), form(other, cron="@daily", timezone="UTC"))
    assert response.status_code == 302, errors_of(response)
    assert Schedule.objects.get().owner == owner


def test_enable_and_disable_actions(staff, owner):
    on = schedules.create_schedule(owner=owner, cron="@hourly", input="Ping?")
    off = schedules.create_schedule(owner=owner, cron="@daily", input="Pong?", enabled=False)

    response = staff.post(LIST, {"action": "disable", "_selected_action": [str(on.pk), str(off.pk)]}, follow=True)
    assert "1 schedule(s) disabled." in response.content.decode()
    assert list(Schedule.objects.values_list("enabled", "next_run_at")) == [(False, None), (False, None)]

    response = staff.post(LIST, {"action": "enable", "_selected_action": [str(on.pk), str(off.pk)]}, follow=True)
    assert "2 schedule(s) enabled." in response.content.decode()
    now = timezone.now()
    for schedule in Schedule.objects.all():
        assert schedule.enabled and now < schedule.next_run_at <= now + timedelta(days=1)


def test_a_schedule_fired_from_the_console_page_starts_its_owners_run(staff, owner):
    """What the console saves, the worker's tick fires (the same service end to end)."""
    response = staff.post(ADD, form(owner, cron="*/5 * * * *", timezone="UTC"))
    assert response.status_code == 302, errors_of(response)
    schedule = Schedule.objects.get()
    fired = schedules.tick(now=schedule.next_run_at)
    assert [f.error for f in fired] == [""]
    assert Run.objects.get().owner == owner


def test_staff_without_the_schedule_permission_cannot_open_the_page(owner):
    viewer = make_user("vic", staff=True)
    assert logged_in(viewer).get(LIST).status_code == 403
