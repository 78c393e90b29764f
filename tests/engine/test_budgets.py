"""Budgets and stops: max turns, the deadline before every model and tool call, per-tool timeouts, cancellation."""

from __future__ import annotations

import threading

import pytest

from agents.engine import EngineError, StopReason, advance, cancel, decide, pending_action
from agents.providers.fake import ScriptedModel, calls, text
from tests.engine.conftest import FakeClock, echo_tool, kinds, make_tool, new_state, run_until_stopped, toolset


def test_stop_reasons_are_exactly_those_of_the_api():
    assert sorted(r.value for r in StopReason) == [
        "cancelled",
        "content_filtered",  # issue 33
        "final_answer",
        "guardrail",  # issue 38
        "max_turns",
        "model_error",
        "output_truncated",  # issue 33
        "quota_exceeded",  # v1.1
        "refused",  # issue 33
        "timeout",
        "usage_limit",  # issue 38
    ]


def test_a_host_stop_before_the_call_stops_the_run_without_a_turn(clock):
    """A host budget (the daily token quota) refuses the next model call: the run stops with its reason, the turn
    is not counted and the tool calls of the earlier reply have all run."""
    from agents.engine import HostStop

    tools = toolset(echo_tool())

    class Quota:
        def __init__(self) -> None:
            self.calls = 0

        def complete(self, request):
            self.calls += 1
            if self.calls > 1:
                raise HostStop(StopReason.QUOTA_EXCEEDED, "the daily token quota is used up")
            return calls(("echo", {"text": "a"}))

    state, events = run_until_stopped(new_state(tools), Quota(), tools, clock)

    assert (state.status, state.stop_reason, state.turns, state.output) == ("done", "quota_exceeded", 1, None)
    assert kinds(events) == ["model", "tool", "error"]
    assert events[-1]["message"] == "the daily token quota is used up"


def test_max_turns_stops_after_that_many_model_calls(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([calls(("echo", {"text": str(i)})) for i in range(10)])
    state, events = run_until_stopped(new_state(tools, max_turns=3), model, tools, clock)

    assert (state.status, state.stop_reason, state.turns) == ("done", "max_turns", 3)
    assert len(model.requests) == 3
    assert kinds(events) == ["model", "tool"] * 3  # the last reply's calls still ran
    assert state.output is None and state.error is None


def test_unparseable_replies_count_towards_max_turns(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([text("???")] * 5)
    state, _ = run_until_stopped(new_state(tools, protocol="react", max_turns=2), model, tools, clock)
    assert (state.stop_reason, state.turns, len(model.requests)) == ("max_turns", 2, 2)


def test_a_final_answer_on_the_last_turn_is_kept(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([calls(("echo", {"text": "a"})), text("fine")])
    state, _ = run_until_stopped(new_state(tools, max_turns=2), model, tools, clock)
    assert (state.stop_reason, state.output, state.turns) == ("final_answer", "fine", 2)


def test_deadline_passed_before_the_model_call_makes_no_call(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([text("never")])
    state, events = advance(new_state(tools, deadline=clock.now - 1), model, tools, clock)

    assert model.requests == []
    assert (state.status, state.stop_reason, state.turns) == ("done", "timeout", 0)
    assert kinds(events) == ["error"]
    assert "deadline" in events[0]["message"]


def test_deadline_exactly_now_counts_as_passed(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([text("never")])
    state, _ = advance(new_state(tools, deadline=clock.now), model, tools, clock)
    assert (state.stop_reason, model.requests) == ("timeout", [])


def test_the_model_is_told_how_much_time_is_left(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([text("ok")])
    advance(new_state(tools, deadline=clock.now + 12.5), model, tools, clock)
    assert model.requests[0].timeout_s == 12.5


def test_deadline_is_checked_before_every_tool_call(clock):
    ran: list[str] = []

    def slow(arguments, context):
        ran.append(arguments["text"])
        clock.advance(30)  # the tool took 30 s of fake time
        return "slow done"

    tools = toolset(make_tool("slow", slow), echo_tool(log=[]))
    model = ScriptedModel([calls(("slow", {"text": "1"}), ("echo", {"text": "2"})), text("never")])
    state, events = advance(new_state(tools, deadline=clock.now + 10), model, tools, clock)

    assert ran == ["1"]
    assert kinds(events) == ["model", "tool", "error"]
    assert events[1]["output"] == "slow done"
    assert (state.status, state.stop_reason) == ("done", "timeout")
    assert len(model.requests) == 1


def test_deadline_passing_between_units_stops_the_run(clock):
    def slow(arguments, context):
        clock.advance(30)
        return "ok"

    tools = toolset(make_tool("slow", slow))
    model = ScriptedModel([calls(("slow", {})), text("never")])
    state, events = advance(new_state(tools, deadline=clock.now + 10), model, tools, clock)
    assert kinds(events) == ["model", "tool", "error"]
    assert state.stop_reason == "timeout"
    assert len(model.requests) == 1


def test_a_tool_over_its_timeout_is_an_error_observation(clock):
    release = threading.Event()

    def hangs(arguments, context):
        release.wait(2.0)  # "sleeps" 2 s unless released at the end of the test
        return "too late"

    tools = toolset(make_tool("hangs", hangs, timeout_s=0.2))
    model = ScriptedModel([calls(("hangs", {})), text("gave up")])
    try:
        state, events = advance(new_state(tools), model, tools, clock)
    finally:
        release.set()

    tool_step = events[1]
    assert tool_step["kind"] == "tool"
    assert tool_step["is_error"] is True
    assert "timed out" in tool_step["output"]
    assert state.status == "running"

    state, _ = advance(state, model, tools, clock)
    assert state.output == "gave up"
    assert "timed out" in model.requests[1].messages[-1]["content"]


def test_the_tool_timeout_is_capped_by_the_time_left():
    release = threading.Event()
    clock = FakeClock()

    def hangs(arguments, context):
        release.wait(2.0)
        return "too late"

    tools = toolset(make_tool("hangs", hangs, timeout_s=60))
    try:
        state, events = advance(
            new_state(tools, deadline=clock.now + 0.1), ScriptedModel([calls(("hangs", {}))]), tools, clock
        )
    finally:
        release.set()
    assert events[1]["is_error"] is True
    assert "timed out after 0.1 s" in events[1]["output"]


def test_interrupt_cancels_before_the_model_call(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([text("never")])
    state, events = advance(new_state(tools), model, tools, clock, interrupt=lambda: True)
    assert model.requests == []
    assert (state.status, state.stop_reason, state.turns, state.output) == ("done", "cancelled", 0, None)
    assert events == []


def test_interrupt_cancels_before_the_next_tool_call(clock):
    log: list[dict] = []
    tools = toolset(echo_tool(log=log))
    answers = iter([False, False, True])  # before the model call, before tool 1, before tool 2
    model = ScriptedModel([calls(("echo", {"text": "1"}), ("echo", {"text": "2"}))])
    state, events = advance(new_state(tools), model, tools, clock, interrupt=lambda: next(answers))
    assert log == [{"text": "1"}]
    assert kinds(events) == ["model", "tool"]
    assert state.stop_reason == "cancelled"


def test_cancel_stops_a_running_run_and_leaves_the_input_alone(clock):
    tools = toolset(echo_tool())
    state = new_state(tools)
    stopped = cancel(state)
    assert (stopped.status, stopped.stop_reason, stopped.output) == ("done", "cancelled", None)
    assert state.status == "running"
    with pytest.raises(EngineError):
        advance(stopped, ScriptedModel([text("x")]), tools, clock)


def test_cancel_a_paused_run(clock):
    tools = toolset(echo_tool(sensitive=True))
    state, _ = advance(new_state(tools, sensitive_tools=["echo"]), ScriptedModel([calls(("echo", {}))]), tools, clock)
    assert state.status == "awaiting_approval"
    stopped = cancel(state)
    assert (stopped.status, stopped.stop_reason) == ("done", "cancelled")
    assert pending_action(stopped) is None
    with pytest.raises(EngineError):
        decide(stopped, tools, clock, approved=True, reviewer="r")


def test_advance_on_a_done_run_raises(clock):
    tools = toolset(echo_tool())
    state, _ = run_until_stopped(new_state(tools), ScriptedModel([text("x")]), tools, clock)
    with pytest.raises(EngineError, match="done"):
        advance(state, ScriptedModel([text("y")]), tools, clock)


def _failing_after(clock, seconds: float):
    """A model call that takes `seconds` and then fails, as a provider cut by its timeout does."""
    from agents.engine.types import ModelError

    def complete(request):
        clock.advance(seconds)
        raise ModelError("openai: timed out after 1 s")

    return complete


def test_a_model_call_cut_by_the_deadline_stops_with_timeout(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([_failing_after(clock, 1.6)])
    state, events = advance(new_state(tools, deadline=clock.now + 1), model, tools, clock)

    assert (state.status, state.stop_reason, state.turns, state.error) == ("done", "timeout", 1, None)
    assert kinds(events) == ["error"]
    assert events[0]["message"].startswith("deadline reached during the model call: openai: timed out")


def test_a_model_failure_with_time_left_stays_a_model_error(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([_failing_after(clock, 0.5)])
    state, _ = advance(new_state(tools, deadline=clock.now + 1), model, tools, clock)

    assert (state.stop_reason, state.error) == ("model_error", "openai: timed out after 1 s")
