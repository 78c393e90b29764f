"""The hot path's writes, as SQL built once per database: insert a held run; take a run's lease (one conditional
UPDATE that returns the run as taken); commit a unit (update the held run, append its steps).

Part of the services layer (called inside their transactions, never on its own). A unit's commit runs five times
in a three-turn run; building these statements through the ORM each time (filter trees, compilers, quoting) cost
more CPU than the model call's HTTP round trip. Values that need adapting (UUIDs, datetimes, JSON) still go through
their field's own `get_db_prep_save`, so they are stored exactly as the ORM would store them; text and number columns
are passed as they are, as the ORM's own preparation would leave them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import timedelta
from functools import cache
from typing import Any

from django.db import DEFAULT_DB_ALIAS, IntegrityError, OperationalError, connection, connections, transaction

from agents.models import Run, RunStatus, Step, TokenQuota, Webhook
from agents.usage.owners import OwnerFacts

RUN_COLUMNS = (
    "status", "stop_reason", "output", "error", "turns", "reflections", "attempt_start_turn", "prompt_tokens",
    "completion_tokens", "deadline", "updated_at", "version", "lease_owner", "lease_expires", "approval_expires_at",
    "output_json", "cost_nanos",
)  # fmt: skip
STEP_COLUMNS = ("run", "index", "kind", "data", "latency_ms", "created_at")
# Columns whose stored value is the Python value itself: the ORM's preparation of these is an identity for the str,
# int, float and None the engine produces, so the hot path skips it.
PLAIN_TYPES = frozenset({
    "CharField", "TextField", "IntegerField", "SmallIntegerField", "BigIntegerField", "PositiveIntegerField",
    "PositiveSmallIntegerField", "PositiveBigIntegerField", "FloatField",
})  # fmt: skip

Adapter = Callable[..., Any] | None  # adapter(value, connection=...); None: stored as it is


def _adapter(field) -> Adapter:
    if field.get_internal_type() in PLAIN_TYPES:
        return None
    return field.get_db_prep_save


@cache
def _adapters(model, columns: tuple[str, ...], vendor: str) -> tuple[Adapter, ...]:
    """Each column's adapter, looked up once per database (vendor) rather than per value."""
    return tuple(_adapter(model._meta.get_field(c)) for c in columns)


def _as_is(value: Any, connection: Any = None) -> Any:
    return value


def _time_and_key_adapters(vendor: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The adapters of a run's `lease_expires` and `id`, as callables (a column stored as it is passes through)."""
    dt, pk = _adapters(Run, ("lease_expires", "id"), vendor)
    return dt or _as_is, pk or _as_is


def _adapt(values: Sequence[Any], adapters: tuple[Adapter, ...], db) -> list[Any]:
    """`db` is the connection itself, not Django's `connection` proxy: each field's preparation reads a few of its
    attributes, and through the proxy each read is a look-up in a (gevent) local, dozens per run."""
    return [v if a is None or v is None else a(v, connection=db) for v, a in zip(values, adapters, strict=True)]


def _db():
    return connections[DEFAULT_DB_ALIAS]


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


@cache
def _run_attnames() -> tuple[tuple[str, ...], tuple[str, ...]]:
    fields = Run._meta.concrete_fields
    return tuple(f.name for f in fields), tuple(f.attname for f in fields)


@cache
def _insert_run_relaxed_sql(vendor: str) -> str:
    """PostgreSQL: the insert, with synchronous_commit off for its own transaction (see `insert_run`)."""
    return f"WITH i AS ({_insert_run_sql(vendor)}) SELECT set_config('synchronous_commit', 'off', true)"


def insert_run(run: Run, *, relaxed: bool = False) -> None:
    """Insert a new run row: the model's constructor applied every default; created/updated are set by the caller.

    `relaxed`: on PostgreSQL the insert's transaction commits without waiting for its WAL flush, as a unit's commit
    that a model call follows does (`commit_unit`); the caller says when that is safe. Elsewhere it is ignored."""
    names, attnames, db = *_run_attnames(), _db()
    params = _adapt([getattr(run, a) for a in attnames], _adapters(Run, names, db.vendor), db)
    relaxed = relaxed and db.vendor == "postgresql"
    with db.cursor() as cursor:
        cursor.execute((_insert_run_relaxed_sql if relaxed else _insert_run_sql)(db.vendor), params)
    run._state.adding, run._state.db = False, db.alias


def update_held_run(run_id, token: str, fields: dict[str, Any]) -> bool:
    """Write the run's columns while `token` holds its lease and it is not done; False when nothing matched."""
    db = _db()
    with db.cursor() as cursor:
        cursor.execute(_update_sql(db.vendor), _update_params(db, run_id, token, fields))
        return cursor.rowcount > 0


def _update_params(db, run_id, token: str, fields: dict[str, Any]) -> list[Any]:
    """The parameters of `_update_sql`: the run's columns, then its id, the lease token and the done status."""
    values = _adapt([fields[c] for c in RUN_COLUMNS], _adapters(Run, RUN_COLUMNS, db.vendor), db)
    return values + _adapt([run_id], _adapters(Run, ("id",), db.vendor), db) + [token, str(RunStatus.DONE)]


StepValues = tuple[Any, int, str, dict, int, Any]  # the STEP_COLUMNS of one step: run id, index, kind, data, ...


def insert_steps(steps: list[StepValues]) -> None:
    """Append step rows in one INSERT (the unique (run, index) constraint refuses a doubled step)."""
    if not steps:
        return
    db = _db()
    placeholders = "(" + ", ".join(["%s"] * len(STEP_COLUMNS)) + ")"
    sql = _insert_head(db.vendor) + ", ".join([placeholders] * len(steps))
    with db.cursor() as cursor:
        cursor.execute(sql, _step_params(db, steps))


def _step_params(db, steps: list[StepValues]) -> list[Any]:
    adapters, params = _adapters(Step, STEP_COLUMNS, db.vendor), []
    for step in steps:
        params += _adapt(step, adapters, db)
    return params


@cache
def _commit_sql(vendor: str, steps: int, notify: bool, relaxed: bool = False) -> str:
    """PostgreSQL: a unit's whole commit as one statement (data-modifying CTEs run atomically, in one round trip,
    where BEGIN, UPDATE, INSERT, COMMIT took four). The steps are inserted, and the NOTIFY sent (on commit), only when
    the run's UPDATE matched. `relaxed`: the statement sets synchronous_commit off for its own transaction (the one
    it runs in, so the setting ends with it), which therefore commits without waiting for the WAL flush."""
    update = _update_sql(vendor) + " RETURNING 1"
    ctes = [f"u AS ({update})"]
    if steps:
        casts = [Step._meta.get_field(c).db_type(connection) for c in STEP_COLUMNS]
        row = "(" + ", ".join(f"%s::{cast}" for cast in casts) + ")"
        columns = _insert_head(vendor).removesuffix(" VALUES ")
        values = ", ".join([row] * steps)
        ctes.append(f"i AS ({columns} SELECT * FROM (VALUES {values}) AS v WHERE EXISTS (SELECT 1 FROM u))")
    ring = ", (SELECT pg_notify(%s, %s) FROM u)" if notify else ""
    relax = ", (SELECT set_config('synchronous_commit', 'off', true))" if relaxed else ""
    return f"WITH {', '.join(ctes)} SELECT count(*){ring}{relax} FROM u"


def commit_unit(
    run_id,
    token: str,
    fields: dict[str, Any],
    steps: list[StepValues],
    *,
    notify: str | None = None,
    relaxed: bool = False,
) -> bool:
    """Update the held run and append its new steps atomically; False (and nothing appended) when the run is no
    longer held by `token` or is done. A doubled step raises IntegrityError.

    On PostgreSQL, `notify` (a channel) has the same statement NOTIFY the run's id there once it commits; elsewhere
    it is ignored (the caller rings its own doorbell). `relaxed`: on PostgreSQL this commit does not wait for its WAL
    flush (settings.AGENT_RELAXED_COMMITS says when that is safe); SQLite in WAL mode never waits for one."""
    db = _db()
    if db.vendor == "sqlite":
        return _sqlite_commit(db, run_id, token, fields, steps)
    if db.vendor != "postgresql":
        with transaction.atomic(savepoint=False):
            if not update_held_run(run_id, token, fields):
                return False
            insert_steps(steps)
            return True
    params = _update_params(db, run_id, token, fields) + _step_params(db, steps)
    if notify:
        params += [notify, str(run_id)]
    with db.cursor() as cursor:
        cursor.execute(_commit_sql(db.vendor, len(steps), bool(notify), relaxed), params)
        return cursor.fetchone()[0] > 0


# SQLite: a unit's whole commit as one statement too. SQLite has no data-modifying CTEs, so each connection gets a
# temporary view whose INSTEAD OF INSERT trigger does the update and the append: one INSERT into the view, atomic as
# any statement is, where BEGIN IMMEDIATE, UPDATE, INSERT, COMMIT took four (19 → 10 statements for W3). The view's
# columns come from RUN_COLUMNS when the connection opens, so they cannot fall behind the model.
COMMIT_VIEW = "reactsite_unit_commit"
NOT_HELD = "reactsite: the run is not held by this lease"
_COMMIT_KEYS = ("_run", "_lease", "_done", "_steps")  # the view's own columns, then RUN_COLUMNS


@cache
def _sqlite_commit_objects() -> tuple[str, str]:
    q = connection.ops.quote_name
    run_columns = [Run._meta.get_field(c).column for c in RUN_COLUMNS]
    nulls = ", ".join(f"NULL AS {q(c)}" for c in (*_COMMIT_KEYS, *run_columns))
    view = f"CREATE TEMP VIEW IF NOT EXISTS {COMMIT_VIEW} AS SELECT {nulls}"
    sets = ", ".join(f"{q(c)} = NEW.{q(c)}" for c in run_columns)
    step_columns = ", ".join(q(Step._meta.get_field(c).column) for c in STEP_COLUMNS)
    values = ", ".join(f"json_extract(value, '$[{i}]')" for i in range(len(STEP_COLUMNS)))
    trigger = (
        f"CREATE TEMP TRIGGER IF NOT EXISTS {COMMIT_VIEW}_do INSTEAD OF INSERT ON {COMMIT_VIEW} BEGIN "
        f"UPDATE {q(Run._meta.db_table)} SET {sets} "
        f"WHERE {q('id')} = NEW._run AND {q('lease_owner')} = NEW._lease AND {q('status')} <> NEW._done; "
        f"SELECT RAISE(ABORT, '{NOT_HELD}') WHERE changes() = 0; "
        f"INSERT INTO {q(Step._meta.db_table)} ({step_columns}) SELECT {values} FROM json_each(NEW._steps); "
        "END"
    )
    return view, trigger


def _install_sqlite_commit(db) -> None:
    """This connection's commit view and trigger (temporary: they live and die with the connection)."""
    with db.cursor() as cursor:
        for statement in _sqlite_commit_objects():
            cursor.execute(statement)
    db.unit_commit_on = db.connection


def install_sqlite_commit(sender=None, connection=None, using: str | None = None, **kwargs) -> None:
    """connection_created and post_migrate: the connection's commit view and trigger, made outside any transaction
    (one made inside a transaction that rolls back is gone again; `_sqlite_commit` then makes it once more)."""
    db = connection if connection is not None else connections[using or DEFAULT_DB_ALIAS]
    if db.vendor == "sqlite" and db.connection is not None:
        _install_sqlite_commit(db)


def drop_sqlite_commit(sender=None, using: str = DEFAULT_DB_ALIAS, **kwargs) -> None:
    """pre_migrate: off while migrations run. SQLite rebuilds a table to alter it (new table, copy, drop, rename), and
    a rename is refused while any trigger names a table that is missing then. The next commit puts it back."""
    db = connections[using]
    if db.vendor != "sqlite" or getattr(db, "unit_commit_on", None) is None or db.connection is None:
        return
    with db.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER IF EXISTS temp.{COMMIT_VIEW}_do")
        cursor.execute(f"DROP VIEW IF EXISTS temp.{COMMIT_VIEW}")
    db.unit_commit_on = None


@cache
def _sqlite_commit_sql() -> str:
    columns = ", ".join(connection.ops.quote_name(Run._meta.get_field(c).column) for c in RUN_COLUMNS)
    marks = ", ".join(["%s"] * (len(_COMMIT_KEYS) + len(RUN_COLUMNS)))
    return f"INSERT INTO {COMMIT_VIEW} ({', '.join(_COMMIT_KEYS)}, {columns}) VALUES ({marks})"  # noqa: S608 - ours


def _sqlite_commit(db, run_id, token: str, fields: dict[str, Any], steps: list[StepValues]) -> bool:
    adapters = _adapters(Step, STEP_COLUMNS, db.vendor)
    rows = json.dumps([_adapt(step, adapters, db) for step in steps])
    run_pk = _adapt([run_id], _adapters(Run, ("id",), db.vendor), db)[0]
    values = _adapt([fields[c] for c in RUN_COLUMNS], _adapters(Run, RUN_COLUMNS, db.vendor), db)
    params = [run_pk, token, str(RunStatus.DONE), rows, *values]
    if getattr(db, "unit_commit_on", None) is not db.connection:  # a new connection
        _install_sqlite_commit(db)
    try:
        try:
            with db.cursor() as cursor:
                cursor.execute(_sqlite_commit_sql(), params)
        except OperationalError as exc:  # the view was made in a transaction that rolled back (tests do that)
            if f"no such table: {COMMIT_VIEW}" not in str(exc):
                raise
            _install_sqlite_commit(db)
            with db.cursor() as cursor:
                cursor.execute(_sqlite_commit_sql(), params)
    except IntegrityError as exc:
        if NOT_HELD in str(exc):
            return False
        raise  # a doubled step
    return True


# -- Taking a run's lease -----------------------------------------------------------------------------------------


def db_converters(db, model, fields) -> list[tuple[list, Any]]:
    """Each field's converters as the ORM's compiler applies them to a column it reads (the backend's, then the
    field's), with the column they are called with: for rows read by SQL of our own (`converted`)."""
    converters = []
    for field in fields:
        column = field.get_col(model._meta.db_table)
        converters.append((db.ops.get_db_converters(column) + column.get_db_converters(db), column))
    return converters


def converted(values: list[Any], converters: Sequence[tuple[list, Any]], db) -> list[Any]:
    """A row's leading values (one per converter, in its order; later values are left as they are) as the ORM would
    pass them to `Model.from_db`."""
    for i, (found, column) in enumerate(converters):
        for convert in found:
            values[i] = convert(values[i], column, db)
    return values


@cache
def _run_reader(vendor: str) -> tuple[str, tuple[str, ...], list]:
    """The run's columns as a select list, their attnames and their converters, so a row read here becomes the same
    `Run` the ORM would build."""
    db = _db()
    q, table = db.ops.quote_name, Run._meta.db_table
    fields = Run._meta.concrete_fields
    columns = ", ".join(f"{q(table)}.{q(f.column)}" for f in fields)
    return columns, tuple(f.attname for f in fields), db_converters(db, Run, fields)


@cache
def _owner_facts_sql(vendor: str) -> str:
    """The owner's daily token and spend quota overrides and whether they have a webhook, as three columns of a
    statement on the runs table (the API has them from its token look-up; a worker would otherwise read each with a
    query of its own)."""
    q = connection.ops.quote_name
    owner = f"{q(Run._meta.db_table)}.{q('owner_id')}"
    tq, wt = q(TokenQuota._meta.db_table), q(Webhook._meta.db_table)
    return (
        f"(SELECT {tq}.{q('daily_tokens')} FROM {tq} WHERE {tq}.{q('user_id')} = {owner} LIMIT 1), "  # noqa: S608
        f"(SELECT {tq}.{q('daily_cost')} FROM {tq} WHERE {tq}.{q('user_id')} = {owner} LIMIT 1), "  # noqa: S608
        f"EXISTS (SELECT 1 FROM {wt} WHERE {wt}.{q('owner_id')} = {owner})"
    )


def _free(q) -> str:
    return f"({q('lease_owner')} = %s OR {q('lease_expires')} < %s)"


@cache
def _claim_sql(vendor: str, statuses: int, queued: bool, facts: bool) -> str:
    """One conditional UPDATE that takes a free lease and returns the run as taken (PostgreSQL; SQLite ≥ 3.35).

    `queued`: the run must be queued; it becomes running with a new deadline. Otherwise it must have one of
    `statuses` and a queued one becomes running. `facts`: the owner's quota facts come along (`_owner_facts_sql`).
    A run waiting for its thread's earlier runs (`thread_queued`, agents/runs/multitask.py) is never taken."""
    q = connection.ops.quote_name
    columns = _run_reader(vendor)[0]
    sets = [f"{q('lease_owner')} = %s", f"{q('lease_expires')} = %s"]
    if queued:
        sets += [f"{q('status')} = %s", f"{q('deadline')} = %s"]
        status = f"{q('status')} = %s"
    else:
        sets.append(f"{q('status')} = CASE WHEN {q('status')} = %s THEN %s ELSE {q('status')} END")
        status = f"{q('status')} IN ({', '.join(['%s'] * statuses)})"
    returning = columns + (f", {_owner_facts_sql(vendor)}" if facts else "")
    return (
        f"UPDATE {q(Run._meta.db_table)} SET {', '.join(sets)} "  # noqa: S608 - our own table and columns
        f"WHERE {q('id')} = %s AND {status} AND {q('thread_queued')} = %s AND {_free(q)} RETURNING {returning}"
    )


@cache
def _queued_timeout_sql(vendor: str) -> str:
    q = connection.ops.quote_name
    return (
        f"SELECT {q('timeout_s')} FROM {q(Run._meta.db_table)} "  # noqa: S608 - our own table and columns
        f"WHERE {q('id')} = %s AND {q('status')} = %s AND {q('thread_queued')} = %s AND {_free(q)}"
    )


def claim(
    run_id, token: str, statuses: Sequence[str], now, until, *, owner_facts: bool = False
) -> tuple[Run, OwnerFacts | None] | None:
    """Take the run's lease if it has one of `statuses` and its lease is free (a queued run becomes running), in one
    statement that returns the run as taken, and with `owner_facts` its owner's quota override and webhook flag
    (else None); None when nothing matched (a run waiting its turn on its thread, too)."""
    db = _db()
    dt, pk = _time_and_key_adapters(db.vendor)
    sql = _claim_sql(db.vendor, len(statuses), False, owner_facts)
    params = [
        token,
        dt(until, connection=db),
        str(RunStatus.QUEUED),
        str(RunStatus.RUNNING),
        pk(run_id, connection=db),
    ]
    return _claimed(db, sql, [*params, *map(str, statuses), False, "", dt(now, connection=db)], owner_facts)


def claim_queued(run_id, token: str, now, until, *, owner_facts: bool = False) -> tuple[Run, OwnerFacts | None] | None:
    """Take a queued run whose lease is free, its time budget starting `now` (its deadline becomes now + its
    timeout_s): reads its timeout, then claims it as `claim` does; None when it is not queued (or not free, or waits
    its turn on its thread)."""
    db = _db()
    dt, pk = _time_and_key_adapters(db.vendor)
    run_pk, free = pk(run_id, connection=db), ["", dt(now, connection=db)]
    with db.cursor() as cursor:
        cursor.execute(_queued_timeout_sql(db.vendor), [run_pk, str(RunStatus.QUEUED), False, *free])
        row = cursor.fetchone()
    if row is None:
        return None
    deadline = dt(now + timedelta(seconds=row[0]), connection=db)
    sql = _claim_sql(db.vendor, 1, True, owner_facts)
    params = [token, dt(until, connection=db), str(RunStatus.RUNNING), deadline, run_pk, str(RunStatus.QUEUED)]
    return _claimed(db, sql, [*params, False, *free], owner_facts)


def _claimed(db, sql: str, params: list[Any], owner_facts: bool) -> tuple[Run, OwnerFacts | None] | None:
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    _, attnames, converters = _run_reader(db.vendor)
    run = Run.from_db(db.alias, attnames, converted(list(row[: len(attnames)]), converters, db))
    facts = None
    if owner_facts:
        facts = OwnerFacts(run.owner_id, row[-3], bool(row[-1]), cost_read=True, cost_override=row[-2])
    return run, facts
