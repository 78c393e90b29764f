"""The kinds of step a run records, and a typed record for each.

A step is stored as JSON: `{"index", "kind", "latency_ms"}` and the fields of its kind (docs/api.md, "Steps"). The
records here build those fields (`to_data`) and read them back (`from_data`); the engine appends the data, never the
record, so the stored shape is exactly the one the API documents. Optional fields are written only when they say
something, as they always were. A record is a value: built once, never changed (`dataclasses.replace` makes
another). They are not frozen only because a frozen dataclass takes several times as long to build, and the engine
builds a few per unit.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from agents.engine.types import ToolCall


class StepKind(StrEnum):
    """What a step records: a model reply, a tool call's result, a human decision, an error, or the summary of a
    long thread's earlier turns (agents/engine/summary.py)."""

    MODEL = "model"
    TOOL = "tool"
    APPROVAL = "approval"
    ERROR = "error"
    SUMMARY = "summary"


@dataclass(slots=True)
class ModelStep:
    """A model reply: what it thought and said, the calls it asked for, its final answer (None: not accepted as
    one) and its usage. `finish`, `blocks`, `thinking`, `model` and `cost_nanos` appear only when set (an unusual
    ending, provider blocks to send back, a thought that is the model's own reasoning, a fallback model, a price);
    `reflection` marks a critique of an attempt that ran out of turns."""

    kind: ClassVar[StepKind] = StepKind.MODEL

    thought: str | None
    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    final_answer: str | None = None
    usage: Mapping[str, int] | None = None
    reflection: bool = False
    finish: str | None = None
    blocks: tuple[dict[str, Any], ...] = ()
    thinking: bool = False
    model: str | None = None
    cost_nanos: int | None = None

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "thought": self.thought,
            "text": self.text,
            "tool_calls": [c.as_dict() for c in self.tool_calls],
            "final_answer": self.final_answer,
            "usage": dict(self.usage or {}),
        }
        if self.reflection:
            data["reflection"] = True
        if self.finish is not None:
            data["finish"] = self.finish
        if self.blocks:
            data["blocks"] = list(self.blocks)
        if self.thinking:
            data["thinking"] = True
        if self.model is not None:
            data["model"] = self.model
        if self.cost_nanos is not None:
            data["cost_nanos"] = self.cost_nanos
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> ModelStep:
        calls = tuple(ToolCall(c["id"], c["name"], c["arguments"]) for c in data.get("tool_calls") or ())
        return cls(
            thought=data.get("thought"),
            text=data.get("text") or "",
            tool_calls=calls,
            final_answer=data.get("final_answer"),
            usage=data.get("usage"),
            reflection=bool(data.get("reflection")),
            finish=data.get("finish"),
            blocks=tuple(data.get("blocks") or ()),
            thinking=bool(data.get("thinking")),
            model=data.get("model"),
            cost_nanos=data.get("cost_nanos"),
        )


@dataclass(slots=True)
class ToolStep:
    """The result of one call, or what answered it in its place. `limit`: a per-tool limit refused it;
    `guardrail` (with `correction` when the model may go on): a guardrail refused its arguments or, with
    `withheld`, its output; `delivery`: how the tool's calls are delivered ("at-least-once")."""

    kind: ClassVar[StepKind] = StepKind.TOOL

    call_id: str
    name: str
    arguments: dict[str, Any]
    output: str
    is_error: bool
    limit: str | None = None
    withheld: bool = False
    guardrail: str | None = None
    correction: bool = False
    delivery: str | None = None

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "call_id": self.call_id,
            "name": self.name,
            "arguments": self.arguments,
            "output": self.output,
            "is_error": self.is_error,
        }
        if self.limit is not None:
            data["limit"] = self.limit
        if self.withheld:
            data["withheld"] = True
        if self.guardrail is not None:
            data["guardrail"] = self.guardrail
        if self.correction:
            data["correction"] = True
        if self.delivery:
            data["delivery"] = self.delivery
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> ToolStep:
        return cls(
            call_id=data["call_id"],
            name=data["name"],
            arguments=data.get("arguments") or {},
            output=data.get("output") or "",
            is_error=bool(data.get("is_error")),
            limit=data.get("limit"),
            withheld=bool(data.get("withheld")),
            guardrail=data.get("guardrail"),
            correction=bool(data.get("correction")),
            delivery=data.get("delivery"),
        )


@dataclass(slots=True)
class ApprovalStep:
    """A decision on a sensitive call. `arguments`: what runs (the reviewer's edit when approved with one);
    `reviewer` is None for a decision the system made (an expired approval). Every field is always written."""

    kind: ClassVar[StepKind] = StepKind.APPROVAL

    call_id: str
    name: str
    original_arguments: dict[str, Any]
    arguments: dict[str, Any]
    approved: bool
    reviewer: str | None = None
    reason: str | None = None

    def to_data(self) -> dict[str, Any]:
        return {
            "call_id": self.call_id,
            "name": self.name,
            "original_arguments": self.original_arguments,
            "arguments": self.arguments,
            "approved": self.approved,
            "reviewer": self.reviewer,
            "reason": self.reason,
        }

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> ApprovalStep:
        arguments = data.get("arguments") or {}
        return cls(
            call_id=data["call_id"],
            name=data.get("name") or "",
            original_arguments=data.get("original_arguments", arguments),
            arguments=arguments,
            approved=bool(data.get("approved")),
            reviewer=data.get("reviewer"),
            reason=data.get("reason"),
        )


@dataclass(slots=True)
class ErrorStep:
    """Something went wrong. It ends the run, or (a correction) tells the model what to fix: `limit` and
    `guardrail`/`stage` name what stopped the run, `correction` marks a guardrail's correction, `output` a final
    answer that broke the output schema."""

    kind: ClassVar[StepKind] = StepKind.ERROR

    message: str
    limit: str | None = None
    guardrail: str | None = None
    stage: str | None = None
    correction: bool = False
    output: bool = False

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {"message": self.message}
        if self.limit is not None:
            data["limit"] = self.limit
        if self.guardrail is not None:
            data["guardrail"] = self.guardrail
        if self.stage is not None:
            data["stage"] = self.stage
        if self.correction:
            data["correction"] = True
        if self.output:
            data["output"] = True
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> ErrorStep:
        return cls(
            message=data.get("message") or "",
            limit=data.get("limit"),
            guardrail=data.get("guardrail"),
            stage=data.get("stage"),
            correction=bool(data.get("correction")),
            output=bool(data.get("output")),
        )


@dataclass(slots=True)
class SummaryStep:
    """The model condensed the thread's earlier turns that the history budget leaves out (run option `history:
    summarize`): `summary` is what the run's model sees before the turns that fit (null when the call failed, with
    `error` saying why: the run went on with those turns left out), `runs` how many of the thread's runs (oldest
    first) it covers, `condensed` how many of them this call was sent, `extended` whether it extends the thread's
    summary so far. `usage`, `model` and `cost_nanos` as on a model step: the call is one of the run's own."""

    kind: ClassVar[StepKind] = StepKind.SUMMARY

    summary: str | None
    runs: int
    condensed: int
    extended: bool = False
    usage: Mapping[str, int] | None = None
    model: str | None = None
    cost_nanos: int | None = None
    error: str | None = None

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "summary": self.summary,
            "runs": self.runs,
            "condensed": self.condensed,
            "extended": self.extended,
            "usage": dict(self.usage or {}),
        }
        if self.model is not None:
            data["model"] = self.model
        if self.cost_nanos is not None:
            data["cost_nanos"] = self.cost_nanos
        if self.error is not None:
            data["error"] = self.error
        return data

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> SummaryStep:
        return cls(
            summary=data.get("summary"),
            runs=int(data.get("runs") or 0),
            condensed=int(data.get("condensed") or 0),
            extended=bool(data.get("extended")),
            usage=data.get("usage"),
            model=data.get("model"),
            cost_nanos=data.get("cost_nanos"),
            error=data.get("error"),
        )


StepRecord = ModelStep | ToolStep | ApprovalStep | ErrorStep | SummaryStep
