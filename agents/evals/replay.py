"""Replaying an eval case: its tool calls are answered from the case's fixtures, never by a real tool.

A replay is its own small host around the pure engine, as services are for real runs: the run is stored by
`services.start_run` (held by its lease from the insert), driven with a toolset whose every tool answers from the
fixtures, and each unit's steps are stored as they come. The real tools are not in that toolset, so a replayed call
cannot reach the network or write anything — by construction, not by patching. The run is a `step` run, which no
worker ever takes over (the orphan sweep leaves step runs to their client), and a replay that fails midway marks it
done: nothing can later continue it with real tools behind the operator's back.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agents import engine
from agents.engine import RunState, Toolset
from agents.evals.fixtures import FixtureBook
from agents.models import Run, RunMode, RunStatus, Step, StopReason
from agents.runs import leases, rows, runtime, store, submit
from agents.tools import Tool


class _Recorded(Exception):
    """A recorded tool error, raised again."""


class _Unmatched(Exception):
    """No fixture answers the call: the replay stops (the book holds what was asked)."""


def execute(*, owner: Any, options: submit.RunOptions, book: FixtureBook) -> Run:
    """Store and drive one replayed run to its end; `book.problem` says whether a call went unanswered."""
    token = uuid.uuid4().hex
    run = submit.start_run(owner=owner, options=replace(options, mode=RunMode.STEP), lease_owner=token)
    leases.hold(token, run.pk)
    try:
        _drive(run, token, book)
    finally:
        leases.drop(token)
        _release(run, token)
    run.refresh_from_db()
    return run


def replay_toolset(run: Run, book: FixtureBook) -> Toolset:
    """The run's tools as the model knows them (names, descriptions, schemas, sensitivity), answering from `book`."""
    tools = runtime.tool_registry().select(run.tools)
    replayed: dict[str, Any] = {  # registry Tools (frozen dataclasses) satisfy the engine's Tool protocol
        name: Tool(
            name=name,
            description=tool.description,
            parameters=tool.parameters,
            func=_answerer(name, book),
            sensitive=tool.sensitive,
            timeout_s=tool.timeout_s,
            inline=True,  # no I/O: nothing to bound with a thread
        )
        for name, tool in tools.items()
    }
    return Toolset(tools=replayed, context=None, max_output_chars=settings.AGENT_MAX_TOOL_OUTPUT_CHARS)


def _answerer(name: str, book: FixtureBook) -> Callable[[dict[str, Any], Any], str]:
    failed, timed_out = f"Tool '{name}' failed: ", f"Tool '{name}' timed out"

    def answer(arguments: dict[str, Any], context: Any) -> str:
        fixture = book.answer(name, arguments)
        if fixture is None:
            raise _Unmatched("no fixture answers this call (replay)")
        if not fixture.is_error:
            return fixture.output
        # Raised so that the engine words it again exactly as it was recorded.
        if fixture.output.startswith(timed_out):  # "Tool '<name>' {exc}."
            raise TimeoutError(fixture.output.removeprefix(f"Tool '{name}' ").removesuffix("."))
        raise _Recorded(fixture.output.removeprefix(failed))  # "Tool '<name>' failed: {exc}"

    return answer


def _drive(run: Run, token: str, book: FixtureBook) -> None:
    """Units until the run stops; a paused call is decided from its fixture; an unmatched call stops the run."""
    state = rows.state_from_rows(run, [])
    model, toolset = runtime.build_model(run), replay_toolset(run, book)

    def unanswered() -> bool:  # checked by the engine before each model and tool call
        return book.problem is not None

    events: list[dict[str, Any]]
    while state.status != RunStatus.DONE:
        if state.status == RunStatus.AWAITING_APPROVAL:
            decisions = _decisions(state, book)
            if decisions is None:
                state, events = state.copy(), []
            else:
                state, events = engine.decide(
                    state, toolset, runtime.clock, decisions=decisions, reviewer=None, interrupt=unanswered
                )
        else:
            state, events = engine.advance(state, model, toolset, runtime.clock, unanswered)
        if book.problem is not None:
            state.finish(engine.StopReason.CANCELLED, error=f"replay stopped: {book.problem}")
        if not _store(run, token, state, events):
            return  # cancelled meanwhile: the run stays as the cancel left it


def _decisions(state: RunState, book: FixtureBook) -> list[dict[str, Any]] | None:
    """A decision for every call the run paused at, from the fixtures; None when one has no fixture."""
    decisions = []
    for action in engine.pending_actions(state):
        fixture = book.decide(action["tool"], action["arguments"])
        if fixture is None:
            return None
        if fixture.denied:
            decisions.append({"call_id": action["call_id"], "approved": False, "reason": fixture.reason})
        else:
            decisions.append(
                {"call_id": action["call_id"], "approved": True, "arguments": fixture.arguments, "reason": "replay"}
            )
    return decisions


def _store(run: Run, token: str, state: RunState, events: list[dict[str, Any]]) -> bool:
    """Append the unit's steps and update the run while the lease is ours and it is not done; False otherwise."""
    # version counts the commits that stored steps (a run at 0 has none: services reads no steps for it)
    fields = store._storable(rows.run_fields(state)) | {"updated_at": timezone.now(), "version": F("version") + 1}
    with transaction.atomic():
        ours = Run.objects.filter(pk=run.pk, lease_owner=token).exclude(status=RunStatus.DONE)
        if not ours.update(**fields):
            return False
        Step.objects.bulk_create(rows.step_rows(run, [store._storable(e) for e in events]))
    return True


def _release(run: Run, token: str) -> None:
    """Give the lease back; a replay that did not finish (an exception) is marked done, never left to continue."""
    unfinished = Run.objects.filter(pk=run.pk, lease_owner=token).exclude(status=RunStatus.DONE)
    unfinished.update(status=RunStatus.DONE, stop_reason=StopReason.CANCELLED, error="replay interrupted", output=None)
    leases.release(run.pk, token)
