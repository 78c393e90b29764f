"""Scheduled runs (docs/api.md, "Schedules"; docs/schedules.md): the API's CRUD and its 400s, times in the schedule's
time zone, and the tick (agents/schedules/services.py) firing each due time once — across workers too, as threads
and as two real `run_worker` processes. Time is never patched: the service functions take `now`."""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.utils import timezone
from django_tasks_db.models import DBTaskResult

from agents.errors import InvalidRequest
from agents.models import Agent, DailyUsage, Run, Schedule
from agents.schedules import services as schedules
from agents.usage import quotas
from tests.integration._support import MANAGE, PYTHON, ROOT, app_env, in_threads

SCHEDULES = "/api/v1/schedules"
PARIS = ZoneInfo("Europe/Paris")
KEYS = {
    "id", "name", "cron", "timezone", "input", "options", "enabled", "next_run_at", "last_run_at", "last_run",
    "last_error", "created_at", "updated_at",
}  # fmt: skip
T0 = datetime(2026, 3, 2, 8, 0, tzinfo=UTC)  # a Monday, well before Europe's change to summer time (March 29)


def url(schedule_id, suffix: str = "") -> str:
    return f"{SCHEDULES}/{schedule_id}{suffix}"


def create(client, **fields):
    return client.post(SCHEDULES, {"cron": "0 9 * * *", "input": "Summarise the news.", **fields}, format="json")


def parse(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def make(owner, *, now: datetime = T0, **fields) -> Schedule:
    values = {"cron": "0 9 * * *", "input": "Summarise the news.", **fields}
    return schedules.create_schedule(owner=owner, now=now, **values)


# -- The API -------------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_create_read_list_patch_delete(api):
    before = timezone.now()
    response = create(api, name="news", timezone="Europe/Paris", max_turns=3, tools=["calculator"])
    assert response.status_code == 201, response.json()
    body = response.json()
    assert set(body) == KEYS
    assert (body["name"], body["cron"], body["timezone"], body["enabled"]) == (
        "news",
        "0 9 * * *",
        "Europe/Paris",
        True,
    )
    assert body["options"] == {"max_turns": 3, "tools": ["calculator"]}
    assert (body["last_run_at"], body["last_run"], body["last_error"]) == (None, None, "")
    first = parse(body["next_run_at"])
    assert before < first <= before + timedelta(hours=25)
    assert (first.astimezone(PARIS).hour, first.astimezone(PARIS).minute) == (9, 0)  # 9:00 in Paris, not in UTC

    assert api.get(url(body["id"])).json() == body
    listed = api.get(SCHEDULES).json()
    assert (listed["count"], [s["id"] for s in listed["results"]]) == (1, [body["id"]])

    patched = api.patch(url(body["id"]), {"cron": "30 7 * * 1-5", "timezone": "UTC"}, format="json")
    assert patched.status_code == 200, patched.json()
    again = parse(patched.json()["next_run_at"])
    assert (again.hour, again.minute, again.weekday() < 5) == (7, 30, True)
    assert patched.json()["options"] == {"max_turns": 3, "tools": ["calculator"]}  # untouched

    assert api.delete(url(body["id"])).status_code == 204
    assert api.get(url(body["id"])).status_code == 404
    assert Schedule.objects.count() == 0


@pytest.mark.django_db
def test_the_defaults_and_every_run_option(api):
    Agent.objects.create(name="helper", provider="demo")
    options = {
        "agent": "helper", "provider": "demo", "model": "demo-1", "protocol": "react", "max_turns": 2,
        "timeout_s": 30, "tools": ["calculator"], "instructions": "Be brief.", "temperature": 0.5,
        "max_output_tokens": 100, "output_schema": {"type": "object"},
    }  # fmt: skip
    response = create(api, **options)
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["timezone"], body["name"], body["enabled"]) == ("UTC", "", True)
    assert body["options"] == {**options, "timeout_s": 30.0}
    assert Schedule.objects.get().options == body["options"]


@pytest.mark.django_db
def test_patch_changes_options_input_and_enabled(api):
    created = create(api, max_turns=3, temperature=0.2).json()
    due = created["next_run_at"]

    body = api.patch(url(created["id"]), {"input": "Other.", "max_turns": None, "model": "demo-1"}, format="json")
    assert body.status_code == 200, body.json()
    assert body.json()["options"] == {"temperature": 0.2, "model": "demo-1"}  # null removed max_turns
    assert (body.json()["input"], body.json()["next_run_at"]) == ("Other.", due)  # the time is not moved

    off = api.patch(url(created["id"]), {"enabled": False}, format="json").json()
    assert (off["enabled"], off["next_run_at"]) == (False, None)
    on = api.patch(url(created["id"]), {"enabled": True}, format="json").json()
    assert on["enabled"] is True and parse(on["next_run_at"]) > timezone.now()


@pytest.mark.django_db
def test_the_run_options_may_come_as_one_object_which_a_patch_replaces(api):
    response = create(api, options={"max_turns": 3, "tools": ["calculator"]})
    assert response.status_code == 201, response.json()
    created = response.json()
    assert created["options"] == {"max_turns": 3, "tools": ["calculator"]}

    body = {**created["options"], "temperature": 0.5}  # read, change, send back
    patched = api.patch(url(created["id"]), {"options": body}, format="json")
    assert patched.status_code == 200, patched.json()
    assert patched.json()["options"] == {"max_turns": 3, "tools": ["calculator"], "temperature": 0.5}
    replaced = api.patch(url(created["id"]), {"options": {"model": "demo-1"}}, format="json").json()
    assert replaced["options"] == {"model": "demo-1"}

    both = api.patch(url(created["id"]), {"options": {}, "max_turns": 2}, format="json")
    assert both.status_code == 400 and "not both" in both.json()["options"][0]
    assert create(api, options={"max_turns": 99}).json() == {"options": {"max_turns": [
        "Ensure this value is less than or equal to 50."
    ]}}  # fmt: skip
    assert create(api, options={"agent": "nobody"}).status_code == 400
    assert Schedule.objects.count() == 1


@pytest.mark.django_db
def test_another_users_schedule_is_404_reviewers_included(api, bob_api, reviewer_api, alice):
    mine = create(api).json()
    for client in (bob_api, reviewer_api):
        assert client.get(url(mine["id"])).status_code == 404
        assert client.patch(url(mine["id"]), {"enabled": False}, format="json").status_code == 404
        assert client.delete(url(mine["id"])).status_code == 404
        assert client.get(SCHEDULES).json()["count"] == 0
    assert api.get(url("not-a-uuid")).status_code == 404
    assert Schedule.objects.get().enabled is True


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("fields", "field", "message"),
    [
        ({"cron": "61 * * * *"}, "cron", "Bad minute"),
        ({"cron": "0 0 9 * * *"}, "cron", "seconds field"),
        ({"cron": "0 9 * *"}, "cron", "five fields"),
        ({"cron": "0 9 ? * MON"}, "cron", "'?'"),
        ({"cron": "@reboot"}, "cron", "Unknown nickname"),
        ({"cron": "0 0 30 2 *"}, "cron", "day-of-month"),
        ({"cron": "   "}, "cron", "blank"),
        ({"cron": 5}, "cron", "Expected a string"),
        ({"timezone": "Mars/Olympus"}, "timezone", "Unknown time zone"),
        ({"timezone": "localtime"}, "timezone", "Unknown time zone"),
        ({"agent": "nobody"}, "agent", "No agent named 'nobody'"),
        ({"provider": "skynet"}, "provider", "skynet"),
        ({"tools": ["teleport"]}, "tools", "Unknown tool(s): teleport"),
        ({"input": " \n"}, "input", "blank"),
        ({"input": ""}, "input", "blank"),
        ({"max_turns": 99}, "max_turns", "less than or equal to 50"),
        ({"temperature": 3}, "temperature", "less than or equal to 2"),
        ({"timeout_s": "60"}, "timeout_s", "Expected a number"),
        ({"protocol": "smoke"}, "protocol", "not a valid choice"),
        ({"output_schema": {"type": "no-such-type"}}, "output_schema", "Not a valid JSON Schema"),
        ({"enabled": "yes"}, "enabled", "Expected true or false"),
    ],
)
def test_bad_input_is_400_naming_the_field_and_nothing_is_stored(api, fields, field, message):
    response = create(api, **fields)
    assert response.status_code == 400, response.json()
    assert field in response.json(), response.json()
    assert message in " ".join(response.json()[field]), response.json()
    assert Schedule.objects.count() == 0


@pytest.mark.django_db
def test_a_bad_patch_is_400_and_changes_nothing(api):
    created = create(api).json()
    for body, field in [
        ({"cron": "0 0 9 * * *"}, "cron"),
        ({"timezone": "Nowhere/Land", "input": "changed"}, "timezone"),
        ({"agent": "nobody", "input": "changed"}, "agent"),
        ({"input": "  "}, "input"),
    ]:
        response = api.patch(url(created["id"]), body, format="json")
        assert response.status_code == 400 and field in response.json(), response.json()
    assert api.get(url(created["id"])).json() == created


# -- Times in a time zone ------------------------------------------------------------------------------------------


def test_nine_in_paris_moves_in_utc_across_the_change_to_summer_time():
    after = datetime(2026, 3, 27, 12, 0, tzinfo=UTC)
    times = schedules.next_times("0 9 * * *", "Europe/Paris", after, 3)
    assert times == [
        datetime(2026, 3, 28, 8, 0, tzinfo=UTC),  # 09:00 CET (UTC+1)
        datetime(2026, 3, 29, 7, 0, tzinfo=UTC),  # 09:00 CEST (UTC+2): clocks went forward that night
        datetime(2026, 3, 30, 7, 0, tzinfo=UTC),
    ]
    assert schedules.next_times("0 9 * * *", "UTC", after, 2)[1] == datetime(2026, 3, 29, 9, 0, tzinfo=UTC)


def test_a_skipped_time_fires_when_clocks_go_forward_and_a_repeated_one_fires_once():
    spring = schedules.next_times("30 2 * * *", "Europe/Paris", datetime(2026, 3, 28, 12, 0, tzinfo=UTC), 2)
    assert spring[0] == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)  # 02:30 never happens that night: at 03:00 CEST
    autumn = schedules.next_times("30 2 * * *", "Europe/Paris", datetime(2026, 10, 24, 12, 0, tzinfo=UTC), 2)
    assert autumn == [datetime(2026, 10, 25, 0, 30, tzinfo=UTC), datetime(2026, 10, 26, 1, 30, tzinfo=UTC)]


def test_nicknames_and_names_read_as_cron_reads_them():
    after = datetime(2026, 3, 2, 8, 20, tzinfo=UTC)
    assert schedules.next_time("@hourly", "UTC", after) == datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    assert schedules.next_time("@daily", "UTC", after) == datetime(2026, 3, 3, 0, 0, tzinfo=UTC)
    assert schedules.next_time("0 12 * JAN,MAR fri", "UTC", after) == datetime(2026, 3, 6, 12, 0, tzinfo=UTC)
    with pytest.raises(InvalidRequest) as refused:
        schedules.next_time("@every 5m", "UTC", after)
    assert "cron" in refused.value.detail


@pytest.mark.django_db
def test_the_first_time_is_counted_in_the_schedules_zone_from_now(alice):
    schedule = make(alice, timezone_name="Europe/Paris", now=datetime(2026, 3, 28, 10, 0, tzinfo=UTC))
    assert schedule.next_run_at == datetime(2026, 3, 29, 7, 0, tzinfo=UTC)
    assert Schedule.objects.get().next_run_at == datetime(2026, 3, 29, 7, 0, tzinfo=UTC)


# -- Firing --------------------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_due_schedule_starts_one_background_run_of_its_owner(alice):
    Agent.objects.create(name="helper", provider="demo", instructions="Be brief.")
    schedule = make(alice, options={"agent": "helper", "max_turns": 2})
    due = schedule.next_run_at
    assert due == datetime(2026, 3, 2, 9, 0, tzinfo=UTC)

    assert schedules.tick(now=due - timedelta(seconds=1)) == []  # not yet
    fired = schedules.tick(now=due + timedelta(seconds=2))
    assert [(f.schedule_id, f.error) for f in fired] == [(schedule.pk, "")]

    run = Run.objects.get()
    assert (run.pk, run.owner, run.mode, run.status) == (fired[0].run_id, alice, "background", "queued")
    assert (run.input, run.agent, run.max_turns, run.instructions) == ("Summarise the news.", "helper", 2, "Be brief.")
    assert DBTaskResult.objects.filter(args_kwargs__args=[str(run.pk)]).count() == 1  # queued for a worker
    schedule.refresh_from_db()
    assert (schedule.last_run_id, schedule.last_error) == (run.pk, "")
    assert schedule.last_run_at == due + timedelta(seconds=2)
    assert schedule.next_run_at == datetime(2026, 3, 3, 9, 0, tzinfo=UTC)

    assert schedules.tick(now=due + timedelta(seconds=7)) == []  # the same time never fires twice
    assert Run.objects.count() == 1


@pytest.mark.django_db
def test_missed_times_fire_once_then_the_schedule_goes_on_from_now(alice):
    schedule = make(alice, cron="0 * * * *")  # hourly; the worker was away for five hours
    assert schedule.next_run_at == datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
    later = datetime(2026, 3, 2, 14, 10, tzinfo=UTC)

    assert len(schedules.tick(now=later)) == 1
    assert schedules.tick(now=later + timedelta(seconds=5)) == []
    assert Run.objects.count() == 1
    schedule.refresh_from_db()
    assert schedule.next_run_at == datetime(2026, 3, 2, 15, 0, tzinfo=UTC)


@pytest.mark.django_db
def test_a_used_up_quota_is_the_last_error_and_the_time_is_consumed(alice, settings):
    settings.AGENT_DAILY_TOKEN_QUOTA = 10
    DailyUsage.objects.create(owner=alice, day=quotas.today(), prompt_tokens=8, completion_tokens=4)
    schedule = make(alice)
    now = schedule.next_run_at + timedelta(seconds=1)

    fired = schedules.tick(now=now)
    assert fired[0].run_id is None and "daily token quota of 10 tokens is used up" in fired[0].error
    schedule.refresh_from_db()
    assert "daily token quota of 10 tokens is used up" in schedule.last_error
    assert (schedule.last_run_id, schedule.last_run_at) == (None, now)
    assert schedule.next_run_at == datetime(2026, 3, 3, 9, 0, tzinfo=UTC)
    assert schedules.tick(now=now + timedelta(seconds=5)) == []  # not retried at every tick
    assert Run.objects.count() == 0

    settings.AGENT_DAILY_TOKEN_QUOTA = 0  # the next time, with room again: a run, and the error is cleared
    assert len(schedules.tick(now=schedule.next_run_at)) == 1
    schedule.refresh_from_db()
    assert (schedule.last_error, schedule.last_run_id) == ("", Run.objects.get().pk)


@pytest.mark.django_db
def test_a_deleted_agent_is_the_last_error(alice):
    agent = Agent.objects.create(name="helper", provider="demo")
    schedule = make(alice, options={"agent": "helper"})
    first = schedules.tick(now=schedule.next_run_at)[0]
    agent.delete()
    schedule.refresh_from_db()

    fired = schedules.tick(now=schedule.next_run_at)
    assert fired[0].run_id is None
    schedule.refresh_from_db()
    assert schedule.last_error.startswith("agent: No agent named 'helper'")
    assert schedule.last_run_id == first.run_id  # still the last run that did start
    assert schedule.next_run_at == datetime(2026, 3, 4, 9, 0, tzinfo=UTC)
    assert Run.objects.count() == 1


@pytest.mark.django_db
def test_a_run_that_fails_to_start_for_another_reason_consumes_the_time_too(alice, monkeypatch):
    schedule = make(alice)

    def broken(**kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(schedules.submit, "submit_run", broken)
    fired = schedules.tick(now=schedule.next_run_at)
    assert [(f.run_id, f.error) for f in fired] == [(None, "The run could not start (RuntimeError).")]
    schedule.refresh_from_db()
    assert schedule.next_run_at == datetime(2026, 3, 3, 9, 0, tzinfo=UTC)


@pytest.mark.django_db
def test_one_schedule_that_cannot_be_fired_does_not_hold_up_the_others(alice, monkeypatch):
    bad, good = make(alice, name="bad"), make(alice, name="good")
    real_fire = schedules.fire

    def fire(schedule, *, now):
        if schedule.pk == bad.pk:
            raise RuntimeError("a bug")
        return real_fire(schedule, now=now)

    monkeypatch.setattr(schedules, "fire", fire)
    fired = schedules.tick(now=good.next_run_at)
    assert [f.schedule_id for f in fired] == [good.pk]
    assert Run.objects.count() == 1


@pytest.mark.django_db
def test_disabled_and_future_schedules_do_not_fire(alice):
    make(alice, enabled=False)
    make(alice, cron="0 10 * * *")
    assert schedules.tick(now=datetime(2026, 3, 2, 9, 30, tzinfo=UTC)) == []
    assert Run.objects.count() == 0


@pytest.mark.django_db
def test_a_claim_misses_a_schedule_edited_since_it_was_read(alice):
    schedule = make(alice)
    stale = Schedule.objects.get(pk=schedule.pk)
    schedules.update_schedule(schedule=schedule, changes={"input": "The new question."})
    now = schedule.next_run_at + timedelta(seconds=1)

    assert schedules.fire(stale, now=now) is None  # read before the edit: the claim matches no row
    assert Run.objects.count() == 0
    assert len(schedules.tick(now=now)) == 1  # read again: fired, with the edited input
    assert Run.objects.get().input == "The new question."


@pytest.mark.django_db(transaction=True)
def test_two_workers_ticking_at_once_start_exactly_one_run(alice, monkeypatch):
    """Both read the due schedule before either claims it (a barrier between the read and the claim); one UPDATE
    matches, the other finds the row moved on. On SQLite and, with DATABASE_URL, PostgreSQL."""
    schedule = make(alice)
    real_fire, both_read = schedules.fire, threading.Barrier(2, timeout=20)

    def fire_after_both_read(due: Schedule, *, now: datetime):
        both_read.wait()
        return real_fire(due, now=now)

    monkeypatch.setattr(schedules, "fire", fire_after_both_read)
    now = schedule.next_run_at + timedelta(seconds=1)
    results = in_threads(2, lambda _: schedules.tick(now=now))

    assert not [r for r in results if isinstance(r, BaseException)], results
    assert sorted(len(r) for r in results) == [0, 1]
    run = Run.objects.get()
    schedule.refresh_from_db()
    assert (schedule.last_run_id, schedule.next_run_at) == (run.pk, datetime(2026, 3, 3, 9, 0, tzinfo=UTC))


@pytest.mark.django_db(transaction=True)
def test_many_due_schedules_and_four_workers_one_run_each(alice):
    made = [make(alice, name=f"s{i}") for i in range(12)]
    now = made[0].next_run_at + timedelta(seconds=1)
    results = in_threads(4, lambda _: schedules.tick(now=now))

    assert not [r for r in results if isinstance(r, BaseException)], results
    assert sum(len(r) for r in results) == 12
    assert sorted(str(s) for s in Schedule.objects.values_list("last_run_id", flat=True)) == sorted(
        str(r) for r in Run.objects.values_list("pk", flat=True)
    )
    assert Run.objects.count() == 12


# -- Two real workers ----------------------------------------------------------------------------------------------


def _worker(log_path) -> subprocess.Popen:
    # A short lease: the sweep (and so the tick) comes every third of it, every half second here.
    env = app_env(LOG_LEVEL="INFO", AGENT_LEASE_S="1.5")
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [PYTHON, MANAGE, "run_worker", "--interval", "0.05", "--drain", "1"],
            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip


def _wait_for(predicate, limit_s: float, what: str) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.django_db(transaction=True)
def test_two_run_worker_processes_fire_each_schedule_once(alice, tmp_path):
    """The schedules fall due while both workers are up and ticking every half second: 20 schedules, 20 runs, each
    driven to its end by one of them."""
    made = [make(alice, name=f"s{i}", cron="0 0 1 1 *", now=timezone.now()) for i in range(20)]  # yearly
    logs = [tmp_path / "w1.log", tmp_path / "w2.log"]
    procs = [_worker(path) for path in logs]
    try:
        _wait_for(lambda: all("Starting worker" in p.read_text(errors="replace") for p in logs), 30, "the workers")
        Schedule.objects.filter(pk__in=[s.pk for s in made]).update(next_run_at=timezone.now())  # due now
        _wait_for(lambda: Run.objects.filter(status="done").count() >= 20, 30, "20 runs done")
        time.sleep(1.5)  # three more ticks of each worker: nothing fires again
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(timeout=30)

    errors = "\n".join(p.read_text(errors="replace")[-2000:] for p in logs)
    assert [p.returncode for p in procs] == [0, 0], errors
    assert Run.objects.count() == 20, errors
    assert set(Schedule.objects.values_list("last_run_id", flat=True)) == set(Run.objects.values_list("pk", flat=True))
    assert all(s.next_run_at.year == timezone.now().year + 1 for s in Schedule.objects.all())
    fired = sum(p.read_text(errors="replace").count(" started run ") for p in logs)
    assert fired == 20, errors
