"""Stored runs as eval cases: the run's input, its final answer as the expected answer, its tool outputs as fixtures.

Privacy: only runs the exporting user can see (`visible_runs`) are exported; any other id is reported as not found,
exactly like an id that does not exist. Memory is its owner's: a run that called a memory tool (recall, remember) is
exported only by its owner — anyone else gets it skipped, so no one's memory (in a fixture or in the answer built
from it) enters a case made by someone else. Runs without a final answer are skipped, each with a message.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml
from django.db.models import Prefetch
from django.utils import timezone

from agents.models import Run, Step, StepKind, StopReason
from agents.permissions import visible_runs

MEMORY_TOOLS = frozenset({"recall", "remember"})
DEFAULT_LIMIT = 50
AGENT_SETTINGS = ("instructions", "temperature", "max_output_tokens", "output_schema")  # not part of the case format


class RunNotFound(LookupError):
    """A run id the exporting user cannot see (or that does not exist): the message names the id, nothing else."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"Run {str(run_id)[:100]} not found.")


@dataclass
class Exported:
    cases: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # why a selected run did not become a case
    notes: list[str] = field(default_factory=list)  # what an exported case does not carry over


def select_runs(
    *,
    user: Any,
    run_ids: Sequence[str] = (),
    status: str | None = None,
    stop_reason: str | None = None,
    limit: int = DEFAULT_LIMIT,
) -> list[Run]:
    """The named runs (in that order; those not matching the filters left out), else the newest `limit` runs
    matching the filters; only runs `user` can see. A named id the user cannot see raises RunNotFound."""
    runs = visible_runs(user).prefetch_related(_recorded_steps())
    if not run_ids:
        if status:
            runs = runs.filter(status=status)
        if stop_reason:
            runs = runs.filter(stop_reason=stop_reason)
        return list(runs.order_by("-created_at")[:limit])
    named = [(raw, _run_id(raw)) for raw in run_ids]
    found = {run.pk: run for run in runs.filter(pk__in=[pk for _, pk in named])}
    missing = next((raw for raw, pk in named if pk not in found), None)
    if missing is not None:
        raise RunNotFound(missing)
    chosen = [found[pk] for pk in dict.fromkeys(pk for _, pk in named)]
    return [r for r in chosen if status in (None, r.status) and stop_reason in (None, r.stop_reason)]


def _run_id(raw: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(raw).strip())
    except ValueError:
        raise RunNotFound(raw) from None


def _recorded_steps() -> Prefetch:
    tool_steps = Step.objects.filter(kind__in=[StepKind.TOOL, StepKind.APPROVAL]).order_by("index")
    return Prefetch("steps", queryset=tool_steps, to_attr="recorded_steps")


def export_cases(*, runs: Sequence[Run], exporter: Any) -> Exported:
    """Each run as a case (a plain dict, as `load_cases` reads it), or a message saying why it was skipped."""
    exported = Exported()
    ids: set[str] = set()
    for run in runs:
        problem = _unexportable(run, exporter)
        if problem:
            exported.skipped.append(f"run {run.pk}: skipped, {problem}")
            continue
        case = _case(run, ids)
        exported.cases.append(case)
        exported.notes.extend(f"case {case['id']}: {note}" for note in _left_out(run))
    return exported


def _unexportable(run: Run, exporter: Any) -> str | None:
    if run.stop_reason != StopReason.FINAL_ANSWER or run.output is None:
        how = f"stopped: {run.stop_reason}" if run.stop_reason else f"status {run.status}"
        return f"no final answer ({how})"
    used = sorted({s.data.get("name") for s in _steps(run) if s.kind == StepKind.TOOL} & MEMORY_TOOLS)
    if used and run.owner_id != exporter.pk:
        return f"it used {' and '.join(used)}: its memory is its owner's, so only its owner can export it"
    return None


def _left_out(run: Run) -> list[str]:
    """What the case cannot replay as the run had it."""
    notes: list[str] = []
    if run.history:
        notes.append(f"the run continued a conversation; its {len(run.history)} earlier turn(s) are not in the case")
    given = [name for name in AGENT_SETTINGS if getattr(run, name, None) not in (None, "")]
    if given:
        notes.append(f"the run's agent settings ({', '.join(given)}) are not in the case")
    return notes


def _steps(run: Run) -> list[Step]:
    steps = getattr(run, "recorded_steps", None)
    if steps is None:
        steps = list(run.steps.filter(kind__in=[StepKind.TOOL, StepKind.APPROVAL]).order_by("index"))
    return steps


def _case(run: Run, ids: set[str]) -> dict[str, Any]:
    case_id = f"run-{run.pk.hex[:8]}"
    if case_id in ids:
        case_id = f"run-{run.pk.hex}"
    ids.add(case_id)
    return {
        "id": case_id,
        "source_run": str(run.pk),
        "input": run.input,
        "protocols": [run.protocol],
        "tools": list(run.tools),
        "max_turns": run.max_turns,
        "timeout_s": run.timeout_s,
        "check": {"type": "exact", "value": run.output},
        "fixtures": fixtures(_steps(run)),
    }


def fixtures(steps: Sequence[Step]) -> list[dict[str, Any]]:
    """The recorded calls, in order: each tool step's output, and each call a reviewer denied (it never ran)."""
    approvals = {s.data["call_id"]: s.data for s in steps if s.kind == StepKind.APPROVAL}
    out: list[dict[str, Any]] = []
    for step in steps:
        data = step.data
        if step.kind == StepKind.APPROVAL and not data["approved"]:
            denied = {"tool": data["name"], "arguments": data["original_arguments"], "denied": True}
            out.append(denied | ({"reason": data["reason"]} if data.get("reason") else {}))
        elif step.kind == StepKind.TOOL and isinstance(data.get("arguments"), dict):
            fixture = {
                "tool": data["name"],
                "arguments": data["arguments"],
                "output": data["output"],
                "is_error": bool(data["is_error"]),
            }
            approval = approvals.get(data["call_id"])
            if approval and approval["original_arguments"] != approval["arguments"]:
                fixture["original_arguments"] = approval["original_arguments"]
            out.append(fixture)
    return out


HEADER = """\
Eval cases made by export_cases from stored runs{by}, {at}.
check.value is each run's final answer: edit it, or the check (exact, contains, regex, numeric), freely.
fixtures answer the tool calls of `run_evals --replay --cases FILE`, no real tool runs: a call is answered by the
first unused fixture of the same tool whose arguments are equal as JSON (key order and 1 vs 1.0 aside); a call with
no fixture fails the case, naming the call. Edit an output to see the replay fail."""


def to_yaml(exported: Exported, exporter: Any = None) -> str:
    """The cases as YAML that `load_cases` reads, after a comment header (with the skipped runs and notes)."""
    by = f" as {exporter.get_username()}" if exporter is not None else ""
    header = HEADER.format(by=by, at=timezone.now().strftime("%Y-%m-%d %H:%M UTC")).splitlines()
    comments = [*header, *exported.skipped, *exported.notes]
    text = "".join(f"# {line}\n" for line in comments)
    body = yaml.dump(
        exported.cases, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120, default_flow_style=None
    )
    return text + str(body)


class _Dumper(yaml.SafeDumper):
    """Multi-line text as literal blocks (a search result stays readable); no anchors for repeated values."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


_OTHER_BREAKS = ("\r", "\x85", "\u2028", "\u2029")  # YAML reads these as line breaks: kept only as escapes


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = '"' if any(b in value for b in _OTHER_BREAKS) else "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


# --- labelled cases: a reviewer's expected answer on a stored run (the admin's review queue) -------------------------


class Unlabellable(ValueError):
    """The run cannot become a case for this reviewer (its memory is its owner's): the message says why."""


def memory_tools_used(run: Run) -> list[str]:
    """The memory tools (recall, remember) the run called, by name."""
    return sorted({s.data.get("name") for s in _steps(run) if s.kind == StepKind.TOOL} & MEMORY_TOOLS)


def left_out(run: Run) -> list[str]:
    """What a case made of the run does not carry over (as export_cases notes it)."""
    return _left_out(run)


def labelled_case(run: Run, *, labeller: Any, case_id: str, check: dict[str, Any]) -> dict[str, Any]:
    """The run as export_cases makes it a case (its input, settings and tool outputs as fixtures), with `case_id`
    and the reviewer's `check`; a run without a final answer too, since the reviewer gives the expected answer.
    Memory is its owner's (as for export_cases): a run that called a memory tool raises Unlabellable unless
    `labeller` owns it."""
    used = memory_tools_used(run)
    if used and run.owner_id != labeller.pk:
        raise Unlabellable(f"It used {' and '.join(used)}: its memory is its owner's, so only its owner can label it.")
    case = _case(run, set())
    case.update(id=case_id, check=check)
    return case


LABELLED_HEADER = """\
Eval cases labelled by reviewers in the admin's review queue (`export_cases --labelled` writes them all), {at}.
Each is a stored run (its tool outputs as fixtures) with the reviewer's check; replay them with
`run_evals --replay --cases FILE`."""


def labelled_yaml(cases: Sequence[dict[str, Any]]) -> str:
    """Labelled cases as a cases file: YAML that `load_cases` reads, in the same form as `to_yaml`'s."""
    header = LABELLED_HEADER.format(at=timezone.now().strftime("%Y-%m-%d %H:%M UTC"))
    text = "".join(f"# {line}\n" for line in header.splitlines())
    body = yaml.dump(list(cases), Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120,
                     default_flow_style=None)  # fmt: skip
    return text + str(body)
