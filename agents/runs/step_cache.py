"""The steps of the runs this process took lately, so that its next take of a run reads none of them again.

A step run is advanced by one request per unit, and each take rebuilt the engine's state by reading every step the
run had (`rows.step_events`): the 50th advance of a long run read 98 steps where the first read 2. Steps are only
ever appended to a run, by a unit's commit, which also moves the run's `version` on by one (agents/runs/store.py).
So the steps of a run at a version are fixed: when this process knows a run's steps at the version its claim
returns, the take uses them and reads nothing. Any other version (another process committed since, a commit here
rolled back) reads them all from the database, as before. Entries are the stored form of the steps (as
`step_events` would read them back), added only once what they hold is durable (on commit: inside a transaction a
read may see the transaction's own steps, and a commit may roll back), and a run's entry goes when it is done; at
most MAX_RUNS runs are kept, the least recently taken going first.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict

from django.db import transaction

from agents.models import Run
from agents.runs import rows

MAX_RUNS = 256

_lock = threading.Lock()
_runs: OrderedDict[str, tuple[int, list[dict]]] = OrderedDict()


def steps_of(run: Run) -> list[dict]:
    """The run's steps at its version as the engine's events (a new list: the engine appends to it)."""
    if not run.version:  # no unit has committed yet (a queued run's first take): no steps
        return []
    key = str(run.pk)
    with _lock:
        entry = _runs.get(key)
        if entry is not None and entry[0] == run.version:
            _runs.move_to_end(key)
            return list(entry[1])
    events = rows.step_events(run)
    version, kept = run.version, list(events)  # kept once what was read is durable (it may be this transaction's)
    transaction.on_commit(lambda: _keep(key, version, kept))
    return events


def committed(run_id, version_before: int, version_after: int, events: list[dict], done: bool) -> None:
    """A unit's commit appended `events` (their stored form) and moved the run from one version to the next: the
    entry follows once the commit is durable (at once outside a transaction)."""
    key = str(run_id)
    with _lock:
        entry = _runs.pop(key, None)
    if done or entry is None or entry[0] != version_before:
        return  # a run done is taken no more; an entry of another version is of no use (a sync run has none)
    steps = entry[1] + [_as_read(e) for e in events]
    transaction.on_commit(lambda: _keep(key, version_after, steps))


def _as_read(event: dict) -> dict:
    """An event as `rows.step_events` reads it back: its columns first, its data through JSON (as the column holds
    it: tuples become lists, keys strings)."""
    data = json.loads(json.dumps(rows.step_data(event)))
    return {"index": event["index"], "kind": event["kind"], "latency_ms": event["latency_ms"], **data}


def forget(run_id=None) -> None:
    """Drop one run's entry (all of them without an argument)."""
    with _lock:
        if run_id is None:
            _runs.clear()
        else:
            _runs.pop(str(run_id), None)


def _keep(key: str, version: int, steps: list[dict]) -> None:
    with _lock:
        _runs[key] = (version, steps)
        _runs.move_to_end(key)
        while len(_runs) > MAX_RUNS:
            _runs.popitem(last=False)
