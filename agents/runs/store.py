"""A unit's commit: the run row and the unit's steps in one short transaction, only while the lease is still
the committer's; what a commit sets off (the doorbell; a pause's signal; a run's end settles it, agents/runs/settle.py),
and the connection handed back around model calls.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from agents import engine
from agents.engine import RunState
from agents.errors import RunBusy
from agents.models import Run, RunStatus
from agents.runs import doorbell, leases, persist, rows, settle, signals, step_cache, tree
from agents.runs.live import Publisher
from agents.usage import quotas
from agents.usage.owners import OwnerFacts
from reactsite.serving import green

log = logging.getLogger(__name__)


class Held:
    """A run this worker holds the lease of: the row as last committed and the engine state, kept in memory."""

    def __init__(self, run: Run, token: str, state: RunState, facts: OwnerFacts | None = None) -> None:
        self.run, self.token, self.state = run, token, state
        self.facts = facts  # the owner's facts when read with something else (they spare the quota's query)
        self.admission: quotas.Admission | None = None  # the owner's quota gate, while units run
        leases.hold(token, run.pk)  # renewed every few seconds while this process works on it
        self.fresh = True  # stored (inserted or committed) since the last cancellation check
        self.released = False
        self.live: Publisher | None = None  # where the reply as it is written and tool calls in progress go
        # A child run's ancestors (their event streams carry its steps: its commits ring them too).
        self.ancestors = tree.ancestors(run) if run.parent_id is not None else []

    def interrupt(self) -> bool:
        """Checked by the engine before each model and tool call: has someone cancelled the run?

        Right after our own commit there is no need to ask: its conditional UPDATE found the run not done.
        """
        if self.fresh:
            self.fresh = False
            return False
        return Run.objects.filter(pk=self.run.pk, status=RunStatus.DONE).exists()

    def result(self) -> Run:
        """The run as this worker left it (no read back); the paused call comes from the state."""
        self.run.engine_state = self.state
        return self.run


def release_connection() -> None:
    """Hand this thread's database connection back before it would only wait.

    Used before every model call and between an event stream's polls. Under gevent on SQLite it goes to the
    process's idle set (reactsite/serving/green.py), where other greenlets use it meanwhile; on PostgreSQL it goes back
    to the pool (closed, without one). Without gevent on SQLite it is kept (AGENT_RELEASE_DB_DURING_MODEL_CALLS off by
    default there): a thread's connection is a file handle, not one of a server's slots, and reopening it costs more
    than keeping it.
    """
    if connection.in_atomic_block:
        return
    if green.patched() and connection.vendor == "sqlite":
        green.take_back()
    elif settings.AGENT_RELEASE_DB_DURING_MODEL_CALLS:
        connection.close()


def reacquire_connection() -> None:
    """After the wait: an idle open connection, if the process has one, instead of opening a new one."""
    if green.patched():
        green.lend()


def _storable(value: Any) -> Any:
    """PostgreSQL text and jsonb cannot hold NUL: model or tool text with one would fail the unit's commit.

    Almost nothing holds one, so the walk runs only when the value's repr (C code, one pass) shows a NUL as `\\x00`;
    a text that merely spells out those four characters costs a walk that changes nothing. The walk was ~170
    `isinstance` calls per commit of a three-turn run."""
    return _without_nul(value) if "\\x00" in repr(value) else value


def has_nul(value: Any) -> bool:
    """Whether a parsed JSON value holds a NUL character in any string or key (such a value cannot be stored: the
    API refuses it with a 400 where a client sent it)."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(has_nul(k) or has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(has_nul(v) for v in value)
    return False


def _without_nul(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd") if "\x00" in value else value
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_without_nul(v) for v in value]
    return value


def commit_unit(held: Held, state: RunState, events: list[dict], *, release: bool) -> None:
    """Append the unit's steps and update the run in one short transaction, only while the lease is ours.

    The conditional UPDATE is also the cancellation check: when it matches nothing, the run was cancelled (or the
    lease lost) and nothing is appended.
    """
    run, now = held.run, timezone.now()
    fields = _storable(rows.run_fields(state))
    fields |= {"deadline": run.deadline, "updated_at": now, "version": run.version + 1}
    fields["approval_expires_at"] = _expiry(run, held.state.status, state.status, now)
    lease = dict(leases.RELEASED)
    if not release:
        lease = {"lease_owner": held.token, "lease_expires": leases.until()}
    fields |= lease
    stored = [_storable(e) for e in events]
    new_steps = rows.step_values(run.pk, stored, now)
    rings = doorbell.kind() == "postgres" and connection.vendor == "postgresql"  # the commit NOTIFYs, no round trip
    relaxed = not release and _only_a_model_call_follows(state)
    try:
        if not persist.commit_unit(
            run.pk, held.token, fields, new_steps, notify=doorbell.CHANNEL if rings else None, relaxed=relaxed
        ):
            return _cancelled(held, state, fields)
    except IntegrityError:
        raise RunBusy("Another worker recorded these steps first.") from None
    step_cache.committed(run.pk, run.version, fields["version"], stored, done=state.status == RunStatus.DONE)
    for name, value in fields.items():
        setattr(run, name, value)
    before = held.state.status
    held.state, held.fresh, held.released = state, True, release
    if held.admission is not None:
        held.admission.leave()  # the call's tokens are counted now (the commit's trigger): its reservation goes
    if not rings:
        doorbell.ring(run.pk)  # committed: streams waiting on this run wake now
    for ancestor in held.ancestors:
        doorbell.ring(ancestor)
    _log_commit(run, state, events)
    _announce(run, before, state.status, held.facts)


def _only_a_model_call_follows(state: RunState) -> bool:
    """Whether, after this commit, the run's next act is a model call: it goes on, and no tool call waits (a tool may
    have side effects, and what it acts on must be stored for good first). Such a commit may skip waiting for the
    database's flush (settings.AGENT_RELAXED_COMMITS): losing it to a database crash costs a repeated model call."""
    return settings.AGENT_RELAXED_COMMITS and state.status == RunStatus.RUNNING and not engine.pending_calls(state)


def _announce(run: Run, before: str, after: str, facts: OwnerFacts | None = None) -> None:
    """Act on a status change this commit made (after it, outside any transaction: a caller's atomic block defers it
    to its own commit): a run that ended settles (its observers told, its continuations run); a run that started
    waiting for a decision tells its reviewers and the owner's webhooks."""
    if after == before or after not in (RunStatus.DONE, RunStatus.AWAITING_APPROVAL):
        return

    def tell() -> None:
        if after == RunStatus.DONE:
            settle.settle(run, facts)  # this commit's conditional UPDATE made it done: once per run
            return
        if run.parent_id is not None:
            tree.mirror_awaiting(run)  # a child's pause shows on the ancestors waiting on it
        signals.run_awaiting_approval.send(sender=Run, run=run, facts=facts)

    if connection.in_atomic_block:
        transaction.on_commit(tell)
    else:
        tell()


def _expiry(run: Run, before: str, after: str, now):
    """When the calls of a paused run expire: set as it starts waiting (again), cleared once it is not waiting."""
    if after != RunStatus.AWAITING_APPROVAL:
        return None
    if before == RunStatus.AWAITING_APPROVAL and run.approval_expires_at is not None:
        return run.approval_expires_at
    return now + timedelta(seconds=run.approval_ttl_s)


def _cancelled(held: Held, state: RunState, fields: dict) -> None:
    """Cancelled meanwhile: nothing is appended to a done run (a stream that sent `done` has ended), but the model
    calls this unit paid for still count in the run's usage."""
    counters = {k: fields[k] for k in ("turns", "reflections", "prompt_tokens", "completion_tokens")}
    if not leases.release(held.run.pk, held.token, **counters):
        if not Run.objects.filter(pk=held.run.pk).exists():
            held.released = True
            raise RunBusy("The run was deleted meanwhile (a newer run on its thread rolled it back).")
        raise RunBusy("This worker lost the run's lease.")
    committed = held.state.steps
    held.run.refresh_from_db()
    held.state = rows.state_from_rows(held.run, [])
    held.state.steps = list(committed)
    held.released = True


def _log_commit(run: Run, state: RunState, events: list[dict]) -> None:
    """One INFO line per finished run; a DEBUG line per commit."""
    extra = {
        "run_id": str(run.pk),
        "user_id": run.owner_id,
        "provider": run.provider,
        "turn": state.turns,
        "status": state.status,
        "steps": len(events),
        "latency_ms": sum(e.get("latency_ms", 0) for e in events),
    }
    if state.status == RunStatus.DONE:
        log.info("run finished", extra={**extra, "stop_reason": state.stop_reason, "total_steps": len(state.steps)})
    elif log.isEnabledFor(logging.DEBUG):
        log.debug("run unit committed", extra=extra)
