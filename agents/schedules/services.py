"""Scheduled runs: a user's cron schedule starts a background run of theirs at each of its times (docs/api.md#schedules;
docs/schedules.md).

Checking and storing a schedule (the API and the console call the same rules), and the worker's tick that fires the
due ones. A cron expression has the five standard fields (minute hour day-of-month month day-of-week, as Debian's
cron reads them; `@hourly`, `@daily` and the other nicknames stand for their five fields) and is read in the
schedule's time zone, daylight saving time included: a time skipped when clocks go forward fires when they do, a time
repeated when they go back fires once. Parsing and the next time are `cronsim`'s (docs/schedules.md says why).

Exactly once, across any number of workers: a tick reads the due schedules, and each is claimed with one conditional
UPDATE that moves `next_run_at` on to its following time only if the row is still as read (the same `next_run_at`,
the same `updated_at`: not edited meanwhile). Only the worker whose UPDATE matched a row starts its run, in the same
transaction as the claim: the run and its queued task commit with the claim or not at all, so a crash in between
loses nothing and doubles nothing. A tick missed while no worker ran fires once, then the schedule goes on from now.
A run that cannot start (the owner's daily quota used up, an agent deleted, options a run now refuses) consumes the
tick all the same, and `last_error` says why: nothing is retried before the next time.
"""

from __future__ import annotations

import functools
import logging
import random
import zoneinfo
from dataclasses import dataclass
from datetime import UTC, datetime, tzinfo
from typing import Any

from cronsim import CronSim, CronSimError
from django.conf import settings
from django.db import transaction
from django.db.utils import InterfaceError, OperationalError
from django.utils import timezone

from agents import periodic
from agents.errors import InvalidRequest, ServiceError
from agents.models import Run, RunMode, RunProtocol, Schedule
from agents.runconfig import validate
from agents.runconfig.options import schedule_options
from agents.runs import agent_config, leases, submit
from agents.runs.store import has_nul
from agents.usage.quotas import QuotaExceeded

log = logging.getLogger(__name__)

# The run options a schedule may carry, as `POST /api/v1/runs` takes them (the API validates them with the run
# body's own fields; `option_problems` holds the rules a run would refuse by, for the console too).
RUN_OPTIONS = schedule_options()
# The nicknames of crontab(5), each the five fields it stands for (`@reboot` has no time: refused).
NICKNAMES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
FIELDS = "minute hour day-of-month month day-of-week"
BATCH = 200  # due schedules a tick fires at most; the rest wait for the next tick (seconds later)
EDITABLE = ("name", "cron", "timezone", "input", "options", "enabled")  # what a user changes; the rest is the tick's


@dataclass(frozen=True)
class Fired:
    """What one tick did with one due schedule: the run it started, or why none started."""

    schedule_id: Any
    run_id: Any | None
    error: str


# -- Cron and time zones -----------------------------------------------------------------------------------------


def expression(cron: str) -> str:
    """The five fields `cron` stands for; InvalidRequest naming `cron` for anything else (a seconds field, a
    nickname without a time, too few or too many fields)."""
    text = cron.strip() if isinstance(cron, str) else ""
    if text.startswith("@"):
        fields = NICKNAMES.get(text.lower())
        if fields is None:
            known = ", ".join(NICKNAMES)
            raise InvalidRequest({"cron": [f"Unknown nickname {text!r}: one of {known}, or five fields ({FIELDS})."]})
        return fields
    parts = text.split()
    if len(parts) == 6:
        raise InvalidRequest(
            {"cron": [f"Six fields: a seconds field is not supported. Give five fields: {FIELDS}."]}
        )  # cronsim would read a sixth field as seconds (Quartz's order), croniter as seconds or years: ambiguous
    if len(parts) != 5:
        raise InvalidRequest({"cron": [f"Expected five fields ({FIELDS}), got {len(parts)}."]})
    if "?" in text:  # Quartz's "no specific value": not cron's
        raise InvalidRequest({"cron": ["'?' is not a cron value: use '*'."]})
    return " ".join(parts)


@functools.cache
def _zone_names() -> frozenset[str]:
    # "localtime" is whatever zone the server is set to: a schedule names its zone.
    return frozenset(zoneinfo.available_timezones()) - {"localtime"}


def zone(name: str) -> tzinfo:
    """The time zone of an IANA name (`Europe/Paris`, `UTC`); InvalidRequest naming `timezone` for any other."""
    if name == "UTC":
        return UTC  # no tz database needed, and cronsim's plain path (no daylight saving time)
    if not isinstance(name, str) or name not in _zone_names():
        raise InvalidRequest({"timezone": [f"Unknown time zone {name!r}: an IANA name such as Europe/Paris or UTC."]})
    return zoneinfo.ZoneInfo(name)


def next_time(cron: str, timezone_name: str, after: datetime) -> datetime:
    """The first time strictly after `after` that `cron` names in the time zone, in UTC. InvalidRequest naming
    `cron` or `timezone` when either cannot be used, or when the expression names no time in the next 50 years."""
    fields, tz = expression(cron), zone(timezone_name)
    try:
        found = next(CronSim(fields, after.astimezone(tz)))
    except CronSimError as exc:
        raise InvalidRequest({"cron": [f"Not a valid cron expression ({exc}): five fields, {FIELDS}."]}) from None
    except StopIteration:
        raise InvalidRequest({"cron": ["This expression names no time in the next 50 years."]}) from None
    return found.astimezone(UTC)


def next_times(cron: str, timezone_name: str, after: datetime, n: int) -> list[datetime]:
    """The next `n` times (UTC) after `after`: what the console previews."""
    times: list[datetime] = []
    for _ in range(n):
        after = next_time(cron, timezone_name, after)
        times.append(after)
    return times


# -- What a schedule may hold --------------------------------------------------------------------------------------


def option_problems(options: Any) -> dict[str, list[str]]:
    """What a run would refuse in these run options, by field (`agent`, `provider`, `max_turns`, …; `options` for
    the object itself): the rules of `POST /api/v1/runs`, with the named agent's configuration under them."""
    if not isinstance(options, dict):
        return {"options": ["An object of run options."]}
    unknown = sorted(set(options) - set(RUN_OPTIONS))
    if unknown:
        return {"options": [f"Unknown run option(s): {', '.join(unknown)}. Known: {', '.join(RUN_OPTIONS)}."]}
    found = validate.type_problems(options, has_nul)
    if "protocol" in options and "protocol" not in found and options["protocol"] not in RunProtocol.values:
        found["protocol"] = [f"One of {', '.join(RunProtocol.values)}."]
    if found:
        return found
    try:
        merged = submit.with_agent(submit.RunOptions(input="", mode=RunMode.BACKGROUND, **options))
    except InvalidRequest as exc:
        return dict(exc.detail)
    # The agent's own sub-agents and sensitive tools were checked when it was saved.
    return agent_config.problems({**merged.values(), "sensitive_tools": [], "agents": None})


def problems(schedule: Schedule) -> dict[str, list[str]]:
    """Everything a schedule would be refused for, by field: its cron expression, time zone, input and run options."""
    found: dict[str, list[str]] = {}
    for check in (lambda: expression(schedule.cron), lambda: zone(schedule.timezone)):
        try:
            check()
        except InvalidRequest as exc:
            found.update(exc.detail)
    if "cron" not in found and "timezone" not in found:
        try:
            next_time(schedule.cron, schedule.timezone, timezone.now())
        except InvalidRequest as exc:
            found.update(exc.detail)
    text = schedule.input
    if not isinstance(text, str) or not text.strip():
        found["input"] = ["This field may not be blank."]
    elif len(text) > settings.AGENT_MAX_INPUT_CHARS:
        found["input"] = [f"Ensure this field has no more than {settings.AGENT_MAX_INPUT_CHARS} characters."]
    elif "\x00" in text:
        found["input"] = ["Null characters are not allowed."]
    found.update(option_problems(schedule.options))
    return found


# -- Storing -------------------------------------------------------------------------------------------------------


def create_schedule(
    *,
    owner,
    cron: str,
    input: str,
    timezone_name: str = "UTC",
    name: str = "",
    enabled: bool = True,
    options: dict | None = None,
    now: datetime | None = None,
) -> Schedule:
    """Check and store a new schedule with its first time (InvalidRequest naming the field at fault: nothing is
    stored)."""
    schedule = Schedule(
        owner=owner, name=name, cron=cron, timezone=timezone_name, input=input, options=dict(options or {}),
        enabled=enabled,
    )  # fmt: skip
    return store(schedule, reschedule=True, now=now)


def update_schedule(*, schedule: Schedule, changes: dict[str, Any], now: datetime | None = None) -> Schedule:
    """Apply `changes` (any of name, cron, timezone, input, enabled; `options`, which replaces the run options; and
    run options by name, a run option set to None being removed) and store them. `next_run_at` is computed again from
    now when the cron expression, the time zone or `enabled` change (a disabled schedule has none); else a due time
    stays due."""
    before = (schedule.cron, schedule.timezone, schedule.enabled)
    options = dict(changes["options"] if "options" in changes else schedule.options or {})
    for key, value in changes.items():
        if key in RUN_OPTIONS:
            if value is None:
                options.pop(key, None)
            else:
                options[key] = value
        elif key in EDITABLE and key != "options":
            setattr(schedule, key, value)
        elif key != "options":
            raise InvalidRequest({key: ["Not a field of a schedule."]})
    schedule.options = options
    return store(schedule, reschedule=(schedule.cron, schedule.timezone, schedule.enabled) != before, now=now)


def store(schedule: Schedule, *, reschedule: bool, now: datetime | None = None) -> Schedule:
    """Check a new or edited schedule (InvalidRequest, nothing stored) and save what a user may change, with the next
    time when `reschedule` (always for a new one). An edit writes only those columns: the tick's own (`next_run_at`
    unless rescheduled, `last_*`) are never written back from a copy read before the tick claimed the row, and the
    new `updated_at` makes a claim of the row as it was before the edit miss (the next tick reads it again)."""
    found = problems(schedule)
    if found:
        raise InvalidRequest(found)
    adding = schedule._state.adding
    if reschedule or adding:
        now = now or timezone.now()
        schedule.next_run_at = next_time(schedule.cron, schedule.timezone, now) if schedule.enabled else None
    with transaction.atomic():
        if adding:
            schedule.save(force_insert=True)
        else:
            fields = [*EDITABLE, "updated_at", *(["next_run_at"] if reschedule else [])]
            schedule.save(update_fields=fields)
    if not adding and not reschedule:
        schedule.refresh_from_db(fields=["next_run_at", "last_run_at", "last_run", "last_error"])
    return schedule


def set_enabled(schedules, enabled: bool, *, now: datetime | None = None) -> int:
    """Enable or disable several schedules (the console's actions): enabling computes each one's next time from
    now, disabling clears it. How many changed."""
    changed = 0
    for schedule in schedules:
        if schedule.enabled != enabled:
            update_schedule(schedule=schedule, changes={"enabled": enabled}, now=now)
            changed += 1
    return changed


def delete_schedule(*, schedule: Schedule) -> None:
    schedule.delete()  # its runs stay: they are the owner's runs


# -- Firing --------------------------------------------------------------------------------------------------------


@periodic.every("schedules", lambda: leases.lease_s() / 3)
def tick(*, now: datetime | None = None, limit: int = BATCH) -> list[Fired]:
    """Fire every due schedule (enabled, `next_run_at` at or before now) this worker can claim: up to `limit`, the
    longest due first; the rest at the next tick. Called by every worker's sweep (agents/background/worker.py):
    whichever claims a schedule's time starts its run, the others skip it."""
    now = now or timezone.now()
    due_now = Schedule.objects.filter(enabled=True, next_run_at__lte=now)  # the partial index `schedule_due`
    due = list(due_now.select_related("owner").order_by("next_run_at")[:limit])
    random.shuffle(due)  # several workers at once each start somewhere else in the batch, not in lockstep
    fired = []
    for schedule in due:
        try:
            result = fire(schedule, now=now)
        except (OperationalError, InterfaceError):
            raise  # the database away: the worker's sweep waits for it; nothing was claimed
        except Exception:  # noqa: BLE001 - one schedule that cannot be fired never holds up the others
            log.exception("schedule %s could not be fired", schedule.pk)
            continue
        if result is not None:
            fired.append(result)
    return fired


def fire(schedule: Schedule, *, now: datetime) -> Fired | None:
    """Claim this due time of `schedule` (as read) and start its run, in one transaction; None when another worker
    claimed it first, or the schedule changed since it was read (an edit, a delete)."""
    try:
        following: datetime | None = next_time(schedule.cron, schedule.timezone, now)
        broken = ""
    except InvalidRequest as exc:  # stored before a rule changed (a time zone gone from the tz database): stop it
        following, broken = None, _describe(exc.detail)
    with transaction.atomic():
        claimed = Schedule.objects.filter(
            pk=schedule.pk, enabled=True, next_run_at=schedule.next_run_at, updated_at=schedule.updated_at
        ).update(next_run_at=following, last_run_at=now)
        if not claimed:
            return None
        run, error = (None, broken) if broken else _start(schedule)
        if run is not None:
            Schedule.objects.filter(pk=schedule.pk).update(last_run=run, last_error="")
        else:
            Schedule.objects.filter(pk=schedule.pk).update(last_error=error)
    if run is not None:
        log.info("schedule %s started run %s", schedule.pk, run.pk)
    else:
        log.warning("schedule %s started no run: %s", schedule.pk, error)
    return Fired(schedule.pk, run.pk if run is not None else None, error)


def _start(schedule: Schedule) -> tuple[Run | None, str]:
    """Start the schedule's background run as its owner would (the same checks, the owner's quota): the run, or
    why not. In a savepoint: a run refused half-way leaves nothing, and the claim stands."""
    if not schedule.owner.is_active:
        return None, "The owner's account is inactive."
    try:
        with transaction.atomic():
            options = submit.RunOptions(input=schedule.input, mode=RunMode.BACKGROUND, **(schedule.options or {}))
            return submit.submit_run(owner=schedule.owner, options=options), ""
    except QuotaExceeded as exc:
        return None, str(exc)
    except ServiceError as exc:
        return None, _describe(exc.detail)
    except (OperationalError, InterfaceError):
        raise  # the database away: the whole claim rolls back, and a later tick fires it
    except Exception as exc:  # noqa: BLE001 - a bug must not make the schedule fire at every tick
        log.exception("schedule %s: the run could not start", schedule.pk)
        return None, f"The run could not start ({type(exc).__name__})."


def _describe(detail: Any) -> str:
    """A service error's detail as one line: `field: message` for each field at fault."""
    if isinstance(detail, dict):
        return "; ".join(
            f"{field}: {' '.join(str(m) for m in messages) if isinstance(messages, list) else messages}"
            for field, messages in detail.items()
        )
    return str(detail)
