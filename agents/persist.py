"""The hot path's writes, as SQL built once per database: insert a held run; commit a unit (update the held run,
append its steps).

Part of the services layer (called inside their transactions, never on its own). A unit's commit runs five times
in a three-turn run; building these statements through the ORM each time (filter trees, compilers, quoting) cost
more CPU than the model call's HTTP round trip. Values still go through each field's own `get_db_prep_save`, so
they are adapted exactly as the ORM would adapt them (UUIDs, datetimes, JSON).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.db import connection, transaction

from agents.models import Run, RunStatus, Step

RUN_COLUMNS = (
    "status", "stop_reason", "output", "error", "turns", "reflections", "attempt_start_turn", "prompt_tokens",
    "completion_tokens", "deadline", "updated_at", "version", "lease_owner", "lease_expires", "approval_expires_at",
    "output_json",
)  # fmt: skip
STEP_COLUMNS = ("run", "index", "kind", "data", "latency_ms", "created_at")


@cache
def _update_sql(vendor: str) -> str:
    q = connection.ops.quote_name
    sets = ", ".join(f"{q(Run._meta.get_field(c).column)} = %s" for c in RUN_COLUMNS)
    where = f"{q('id')} = %s AND {q('lease_owner')} = %s AND {q('status')} <> %s"
    return f"UPDATE {q(Run._meta.db_table)} SET {sets} WHERE {where}"  # noqa: S608 - our own table and columns


@cache
def _insert_head(vendor: str) -> str:
    q = connection.ops.quote_name
    columns = ", ".join(q(Step._meta.get_field(c).column) for c in STEP_COLUMNS)
    return f"INSERT INTO {q(Step._meta.db_table)} ({columns}) VALUES "  # noqa: S608 - our own table and columns


@cache
def _insert_run_sql(vendor: str) -> str:
    q = connection.ops.quote_name
    columns = ", ".join(q(f.column) for f in Run._meta.concrete_fields)
    marks = ", ".join(["%s"] * len(Run._meta.concrete_fields))
    return f"INSERT INTO {q(Run._meta.db_table)} ({columns}) VALUES ({marks})"  # noqa: S608 - our own table


def insert_run(run: Run) -> None:
    """Insert a new run row: the model's constructor applied every default; created/updated are set by the caller."""
    params = [f.get_db_prep_save(getattr(run, f.attname), connection) for f in Run._meta.concrete_fields]
    with connection.cursor() as cursor:
        cursor.execute(_insert_run_sql(connection.vendor), params)
    run._state.adding, run._state.db = False, connection.alias


def _prep(model, name: str, value: Any) -> Any:
    return model._meta.get_field(name).get_db_prep_save(value, connection)


def update_held_run(run_id, token: str, fields: dict[str, Any]) -> bool:
    """Write the run's columns while `token` holds its lease and it is not done; False when nothing matched."""
    with connection.cursor() as cursor:
        cursor.execute(_update_sql(connection.vendor), _update_params(run_id, token, fields))
        return cursor.rowcount > 0


def _update_params(run_id, token: str, fields: dict[str, Any]) -> list[Any]:
    """The parameters of `_update_sql`: the run's columns, then its id, the lease token and the done status."""
    return [_prep(Run, c, fields[c]) for c in RUN_COLUMNS] + [_prep(Run, "id", run_id), token, RunStatus.DONE.value]


def insert_steps(steps: list[Step]) -> None:
    """Append step rows in one INSERT (the unique (run, index) constraint refuses a doubled step)."""
    if not steps:
        return
    placeholders = "(" + ", ".join(["%s"] * len(STEP_COLUMNS)) + ")"
    sql = _insert_head(connection.vendor) + ", ".join([placeholders] * len(steps))
    with connection.cursor() as cursor:
        cursor.execute(sql, _step_params(steps))


def _step_params(steps: list[Step]) -> list[Any]:
    params: list[Any] = []
    for step in steps:
        params += [
            _prep(Step, "run", step.run_id),
            step.index,
            step.kind,
            _prep(Step, "data", step.data),
            step.latency_ms,
            _prep(Step, "created_at", step.created_at),
        ]
    return params


@cache
def _commit_sql(vendor: str, steps: int, notify: bool) -> str:
    """PostgreSQL: a unit's whole commit as one statement (data-modifying CTEs run atomically, in one round trip,
    where BEGIN, UPDATE, INSERT, COMMIT took four). The steps are inserted, and the NOTIFY sent (on commit), only when
    the run's UPDATE matched."""
    update = _update_sql(vendor) + " RETURNING 1"
    ctes = [f"u AS ({update})"]
    if steps:
        casts = [Step._meta.get_field(c).db_type(connection) for c in STEP_COLUMNS]
        row = "(" + ", ".join(f"%s::{cast}" for cast in casts) + ")"
        columns = _insert_head(vendor).removesuffix(" VALUES ")
        values = ", ".join([row] * steps)
        ctes.append(f"i AS ({columns} SELECT * FROM (VALUES {values}) AS v WHERE EXISTS (SELECT 1 FROM u))")
    ring = ", (SELECT pg_notify(%s, %s) FROM u)" if notify else ""
    return f"WITH {', '.join(ctes)} SELECT count(*){ring} FROM u"


def commit_unit(run_id, token: str, fields: dict[str, Any], steps: list[Step], *, notify: str | None = None) -> bool:
    """Update the held run and append its new steps atomically; False (and nothing appended) when the run is no
    longer held by `token` or is done. A doubled step raises IntegrityError.

    On PostgreSQL, `notify` (a channel) has the same statement NOTIFY the run's id there once it commits; elsewhere
    it is ignored (the caller rings its own doorbell)."""
    if connection.vendor != "postgresql":
        with transaction.atomic(savepoint=False):
            if not update_held_run(run_id, token, fields):
                return False
            insert_steps(steps)
            return True
    params = _update_params(run_id, token, fields) + _step_params(steps)
    if notify:
        params += [notify, str(run_id)]
    with connection.cursor() as cursor:
        cursor.execute(_commit_sql(connection.vendor, len(steps), bool(notify)), params)
        return cursor.fetchone()[0] > 0
