"""Per-run limits (max_total_tokens, max_tool_calls, tool_limits), the engine's guardrail hooks and cost accounting,
with a scripted model and a fake Guard: the checks happen before the call they would exceed, and the record says
which limit or guardrail answered."""

from __future__ import annotations

from typing import Any

from agents.engine import ModelReply, StopReason, Usage, advance
from agents.engine.prompts import render_messages
from agents.engine.types import Verdict
from agents.providers.fake import ScriptedModel, calls, text
from tests.engine.conftest import echo_tool, kinds, new_state, run_until_stopped, toolset


def test_max_tool_calls_stops_the_run_before_the_call_that_would_exceed_it(clock):
    log: list[dict] = []
    tools = toolset(echo_tool(log=log))
    model = ScriptedModel([calls(("echo", {"text": "a"}), ("echo", {"text": "b"}), ("echo", {"text": "c"}))])
    state, events = run_until_stopped(new_state(tools, max_tool_calls=2), model, tools, clock)
    assert state.stop_reason == StopReason.USAGE_LIMIT
    assert [c["text"] for c in log] == ["a", "b"]  # the third never ran
    error = events[-1]
    assert error["kind"] == "error" and error["limit"] == "max_tool_calls"
    assert "max_tool_calls (2)" in error["message"] and state.error == error["message"]


def test_a_per_tool_limit_answers_exhausted_and_the_model_goes_on(clock):
    log: list[dict] = []
    tools = toolset(echo_tool(log=log), echo_tool("other"))
    model = ScriptedModel(
        [
            calls(("echo", {"text": "1"})),
            calls(("echo", {"text": "2"}), ("other", {"text": "x"})),
            text("done"),
        ]
    )
    state, events = run_until_stopped(new_state(tools, tool_limits={"echo": 1}), model, tools, clock)
    assert state.stop_reason == StopReason.FINAL_ANSWER and state.output == "done"
    assert [c["text"] for c in log] == ["1"]
    refused = [e for e in events if e.get("limit")]
    assert len(refused) == 1 and refused[0]["kind"] == "tool" and refused[0]["is_error"]
    assert refused[0]["limit"] == "tool_limits.echo" and "exhausted" in refused[0]["output"]
    assert any(e["kind"] == "tool" and e["name"] == "other" and not e["is_error"] for e in events)
    # The model was told, in the third request, that the tool is exhausted.
    told = [m for m in model.requests[2].messages if m["role"] == "tool"]
    assert any("exhausted" in m["content"] for m in told)


def test_a_refused_call_does_not_count_against_max_tool_calls(clock):
    tools = toolset(echo_tool(), echo_tool("other"))
    model = ScriptedModel(
        [calls(("echo", {"text": "1"})), calls(("echo", {"text": "2"})), calls(("other", {"text": "3"})), text("ok")]
    )
    state, _ = run_until_stopped(new_state(tools, max_tool_calls=2, tool_limits={"echo": 1}), model, tools, clock)
    assert state.stop_reason == StopReason.FINAL_ANSWER  # echo, (refused echo), other: two calls that ran


def test_max_total_tokens_stops_before_a_call_whose_input_alone_would_exceed_it(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel(
        [calls(("echo", {"text": "1"}), usage=Usage(60, 10)), text("never", prompt_tokens=70, completion_tokens=5)]
    )
    state, events = run_until_stopped(new_state(tools, max_total_tokens=120), model, tools, clock)
    # 70 used, and the next call's input is at least the last one's 60: 130 > 120, so no second call.
    assert state.stop_reason == StopReason.USAGE_LIMIT and len(model.requests) == 1
    assert events[-1]["limit"] == "max_total_tokens" and "120" in events[-1]["message"]


def test_max_total_tokens_lets_calls_that_fit(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([calls(("echo", {"text": "1"}), usage=Usage(10, 2)), text("ok", 14, 2)])
    state, _ = run_until_stopped(new_state(tools, max_total_tokens=100), model, tools, clock)
    assert state.stop_reason == StopReason.FINAL_ANSWER and state.prompt_tokens + state.completion_tokens == 28


class FakeGuard:
    """Trips at the stages and tools it is told, redacts "secret" to "[x]", and records every check."""

    def __init__(self, trips: dict[str, Verdict] | None = None, times: int = 99) -> None:
        self.trips, self.times, self.checked = trips or {}, times, []

    def redact(self, stage: str, text: str) -> str:
        return text.replace("secret", "[x]")

    def check(self, stage, text=None, tool=None, arguments=None) -> Verdict | None:
        self.checked.append((stage, text, tool, arguments))
        verdict = self.trips.get(stage)
        if verdict is not None and self.times > 0:
            self.times -= 1
            return verdict
        return None


def drive(state, model, tools, clock, guard) -> tuple[Any, list[dict]]:
    events: list[dict] = []
    for _ in range(20):
        if state.done:
            break
        state, new = advance(state, model, tools, clock, guard=guard)
        events += new
    return state, events


def test_an_input_trip_stops_before_any_model_call(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([])
    guard = FakeGuard({"input": Verdict("deny", "it names a forbidden word", action="correct")})
    state, events = drive(new_state(tools, input="tell me"), model, tools, clock, guard)
    assert state.stop_reason == StopReason.GUARDRAIL and model.requests == []  # an input trip always stops
    assert events[-1]["guardrail"] == "deny" and "forbidden word" in state.error
    assert guard.checked[0] == ("input", "tell me", None, None)


def test_an_output_trip_with_correct_tells_the_model_once_then_stops(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([text("first"), text("second")])
    guard = FakeGuard({"output": Verdict("short", "it is longer than 3 characters", action="correct")})
    state, events = drive(new_state(tools), model, tools, clock, guard)
    assert state.stop_reason == StopReason.GUARDRAIL and state.output is None
    assert [e["kind"] for e in events] == ["model", "error", "model", "error"]
    assert events[0]["final_answer"] is None  # not accepted
    assert events[1]["guardrail"] == "short" and events[1]["correction"]
    sent = render_messages(state, [])
    assert any("not accepted: it is longer than 3 characters" in str(m["content"]) for m in sent)
    assert len(model.requests) == 2


def test_an_output_that_passes_is_redacted_in_the_answer_and_the_step(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([text("the secret is out")])
    state, events = drive(new_state(tools), model, tools, clock, FakeGuard())
    assert state.output == "the [x] is out"
    assert events[0]["text"] == "the [x] is out" and events[0]["final_answer"] == "the [x] is out"


def test_a_tool_argument_trip_with_correct_refuses_the_call_and_the_model_goes_on(clock):
    log: list[dict] = []
    tools = toolset(echo_tool(log=log))
    model = ScriptedModel([calls(("echo", {"text": "bad"})), calls(("echo", {"text": "bad"}))])
    guard = FakeGuard({"tool_arguments": Verdict("args", "text must not be 'bad'", action="correct")})
    state, events = drive(new_state(tools), model, tools, clock, guard)
    assert log == []  # never ran
    assert state.stop_reason == StopReason.GUARDRAIL  # the second trip of the same guardrail stops
    first = next(e for e in events if e["kind"] == "tool")
    assert first["is_error"] and first["guardrail"] == "args" and "refused these arguments" in first["output"]
    assert ("tool_arguments", None, "echo", {"text": "bad"}) in guard.checked


def test_a_tool_output_is_redacted_before_the_model_sees_it(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([calls(("echo", {"text": "secret"})), text("ok")])
    state, events = drive(new_state(tools), model, tools, clock, FakeGuard())
    tool = next(e for e in events if e["kind"] == "tool")
    assert tool["output"] == "echo:[x]"
    assert all("secret" not in str(m["content"]) for m in model.requests[1].messages if m["role"] == "tool")


def test_a_tool_output_trip_withholds_it_and_stops(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel([calls(("echo", {"text": "x"}))])
    guard = FakeGuard({"tool_output": Verdict("leak", "it holds a key")})
    state, events = drive(new_state(tools), model, tools, clock, guard)
    assert state.stop_reason == StopReason.GUARDRAIL
    assert kinds(events) == ["model", "tool", "error"]
    assert events[1]["output"].startswith("Guardrail 'leak' withheld") and events[1]["withheld"]


def test_cost_and_the_answering_model_are_recorded_per_step_and_summed(clock):
    tools = toolset(echo_tool())
    model = ScriptedModel(
        [
            ModelReply(tool_calls=calls(("echo", {"text": "1"})).tool_calls, cost_nanos=1500),
            ModelReply(text="ok", cost_nanos=250, model="anthropic/claude-x"),
        ]
    )
    state, events = run_until_stopped(new_state(tools), model, tools, clock)
    replies = [e for e in events if e["kind"] == "model"]
    assert [r["cost_nanos"] for r in replies] == [1500, 250] and state.cost_nanos == 1750
    assert "model" not in replies[0] and replies[1]["model"] == "anthropic/claude-x"


def test_without_a_price_the_cost_stays_unknown(clock):
    tools = toolset(echo_tool())
    state, events = run_until_stopped(new_state(tools), ScriptedModel([text("ok")]), tools, clock)
    assert state.cost_nanos is None and "cost_nanos" not in events[0]
