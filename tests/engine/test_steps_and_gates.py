"""The engine's typed step records, its reply plans and its gates: the records read and write exactly the stored
step data, a reply's plan is decided without doing anything, and the gates answer in their declared order."""

from __future__ import annotations

from typing import Any

from agents.engine import (
    ApprovalStep,
    ErrorStep,
    ModelReply,
    ModelStep,
    StepKind,
    SummaryStep,
    ToolCall,
    ToolStep,
    advance,
    decide,
)
from agents.engine.context import RunContext
from agents.engine.gates import (
    MODEL_GATES,
    PAUSE,
    PROCEED,
    TOOL_GATES,
    AnswerCall,
    CallCheck,
    Proceed,
    run_gates,
)
from agents.engine.plan import FinalAnswer, Resend, RunCalls, plan_reply
from agents.engine.record import Correct, Halt, Unit
from agents.engine.types import Finish, StopReason, Usage
from agents.providers.fake import ScriptedModel, calls, text
from tests.engine.conftest import echo_tool, new_state, toolset

RECORDS: dict[str, Any] = {
    "model": ModelStep, "tool": ToolStep, "approval": ApprovalStep, "error": ErrorStep, "summary": SummaryStep,
}  # fmt: skip
ENVELOPE = ("index", "kind", "latency_ms")


def test_the_step_kinds_are_the_stored_kind_strings():
    assert [k.value for k in StepKind] == ["model", "tool", "approval", "error", "summary"]
    assert {kind: RECORDS[kind].kind for kind in RECORDS} == {k.value: k for k in StepKind}


def test_every_record_round_trips_through_its_data():
    records = [
        ModelStep(
            "t",
            "x",
            (ToolCall("c1", "echo", {"a": 1}),),
            None,
            {"prompt_tokens": 1},
            finish="refused",
            blocks=({"type": "thinking"},),
            thinking=True,
            model="p/m",
            cost_nanos=0,
        ),  # fmt: skip
        ModelStep("Reflection on attempt 1", "critique", reflection=True, usage={}),
        ToolStep("c1", "echo", {"a": 1}, "out", True, limit="tool_limits.echo"),
        ToolStep(
            "c1", "echo", {}, "note", True, withheld=True, guardrail="g", correction=True, delivery="at-least-once"
        ),
        ApprovalStep("c1", "echo", {"a": 1}, {"a": 2}, True, "ann", None),
        ErrorStep("why", guardrail="g", stage="output"),
        ErrorStep("fix it", output=True),
        SummaryStep("they asked twice", 3, 2, True, {"prompt_tokens": 5}, model="p/m", cost_nanos=4),
        SummaryStep(None, 1, 1, usage={}, error="the call failed"),
    ]
    for record in records:
        assert type(record).from_data(record.to_data()) == record


def test_the_records_rebuild_the_steps_of_a_run_exactly():
    tools = toolset(echo_tool(), echo_tool("gated", sensitive=True))
    model = ScriptedModel([calls(("echo", {"text": "a"}), ("gated", {"text": "b"})), text(""), text("done")])
    state, events = advance(new_state(tools), model, tools, lambda: 0.0)
    state, more = decide(state, tools, lambda: 0.0, approved=False, reviewer="ann", reason="no")
    state, last = advance(state, model, tools, lambda: 0.0)
    state, final = advance(state, model, tools, lambda: 0.0)
    steps = events + more + last + final
    assert [s["kind"] for s in steps] == ["model", "tool", "approval", "model", "error", "model"]
    for step in steps:
        data = {k: v for k, v in step.items() if k not in ENVELOPE}
        assert RECORDS[step["kind"]].from_data(data).to_data() == data


def test_a_plan_decides_what_a_reply_means_and_does_nothing():
    tools = toolset(echo_tool())
    state = new_state(tools)
    asks = plan_reply(calls(("echo", {"text": "a"})), 5, state, tools)
    assert isinstance(asks.next, RunCalls) and [c.name for c in asks.next.calls] == ["echo"]
    assert not asks.next.instant and asks.latency_ms == 5 and asks.step.tool_calls == asks.next.calls
    assert plan_reply(text("42"), 0, state, tools).next == FinalAnswer("42")
    empty = plan_reply(text(""), 0, state, tools).next
    assert isinstance(empty, Correct) and empty.step.message == "Unusable reply: the reply was empty"
    refused = plan_reply(ModelReply(text="no", finish=Finish.REFUSED), 0, state, tools).next
    assert isinstance(refused, Halt) and refused.reason == StopReason.REFUSED
    assert plan_reply(ModelReply(finish=Finish.PAUSED, usage=Usage(1, 1)), 0, state, tools).next == Resend()
    assert state.steps == [] and state.turns == 0  # nothing was recorded or counted


def test_run_gates_answers_the_first_outcome_that_is_not_proceed():
    asked: list[str] = []

    def gate(name: str, outcome: Any) -> Any:
        return lambda check: asked.append(name) or outcome

    stop = Halt(StopReason.TIMEOUT, "late")
    assert run_gates([gate("a", PROCEED), gate("b", stop), gate("c", PAUSE)], None) == stop
    assert asked == ["a", "b"]
    assert run_gates([gate("d", PROCEED)], None) is PROCEED


def test_the_gates_are_declared_in_order():
    assert [g.__name__ for g in MODEL_GATES] == ["input_guardrail", "model_cancelled", "model_deadline", "token_limit"]
    assert [g.__name__ for g in TOOL_GATES] == [
        "call_cancelled",
        "call_deadline",
        "run_call_limit",
        "tool_call_limit",
        "arguments_guardrail",
        "approval",
    ]


def _check(state: Any, tools: Any, call: ToolCall, clock: Any = lambda: 0.0) -> CallCheck:
    return CallCheck(Unit(state, RunContext(tools, clock)), call)


def test_a_tool_limit_answers_the_call_and_a_sensitive_call_pauses():
    tools = toolset(echo_tool(), echo_tool("gated", sensitive=True))
    state = new_state(tools, tool_limits={"echo": 0})
    answered = run_gates(TOOL_GATES, _check(state, tools, ToolCall("c1", "echo", {"text": "a"})))
    assert isinstance(answered, AnswerCall) and answered.step.limit == "tool_limits.echo" and answered.then is None
    assert run_gates(TOOL_GATES, _check(state, tools, ToolCall("c2", "gated", {"text": "b"}))) is PAUSE
    late = run_gates(TOOL_GATES, _check(new_state(tools, deadline=1.0), tools, ToolCall("c3", "echo", {}), lambda: 2.0))
    assert late == Halt(StopReason.TIMEOUT, "deadline reached before a tool call")
    assert isinstance(run_gates(TOOL_GATES, _check(new_state(tools), tools, ToolCall("c4", "echo", {}))), Proceed)
