"""A long thread's summary in the engine (agents/engine/summary.py): the request it sends, the step it records, the
history it leaves, and what a failed or impossible call leaves instead (the turns truncated)."""

from __future__ import annotations

import math

from agents.engine import RunState, StepKind
from agents.engine import history as h
from agents.engine import summary as s
from agents.engine.prompts import render_messages
from agents.engine.types import ModelError, ModelReply, ModelRequest, StopReason, Usage

KEPT = [{"input": "question 3", "output": "answer 3", "stop_reason": "final_answer"}]
LEFT_OUT = [
    {"input": "question 1", "output": "answer 1", "stop_reason": "final_answer"},
    {"input": "question 2", "output": None, "stop_reason": "max_turns"},
]


class Model:
    """Answers `reply` (or raises `error`) and keeps each request."""

    def __init__(self, reply: ModelReply | None = None, error: Exception | None = None) -> None:
        self.reply, self.error, self.requests = reply, error, []

    def complete(self, request: ModelRequest) -> ModelReply:
        self.requests.append(request)
        if self.error is not None:
            raise self.error
        assert self.reply is not None
        return self.reply


def state(**kwargs) -> RunState:
    kwargs.setdefault("history", list(KEPT))
    return RunState(input="question 4", deadline=kwargs.pop("deadline", 2_000.0), **kwargs)


def job(summary: str = "", covered: int = 0, turns=LEFT_OUT) -> s.Condense:
    return s.Condense(summary, covered, list(turns), covered + len(turns))


def test_a_summary_turn_reads_as_a_user_note_and_an_acknowledgement_in_both_protocols():
    turns = h.with_summary(KEPT, "They asked for 12*7.", 2)
    assert turns[0] == {"summary": "They asked for 12*7.", "runs": 2}
    for protocol, ack in (("tools", h.SUMMARY_ACK), ("react", f"Final Answer: {h.SUMMARY_ACK}")):
        rendered = h.messages(turns, protocol)
        assert [m["role"] for m in rendered] == ["user", "assistant", "user", "assistant"]
        assert rendered[0]["content"] == "(The earlier part of this conversation, condensed: 2 earlier runs.)\n" + (
            "They asked for 12*7."
        )
        assert rendered[1]["content"] == ack
        assert rendered[2]["content"] == "question 3"
    # The run's request counts the pair among the history's messages (a provider's cache breakpoint follows them).
    messages = render_messages(state(history=turns), [])
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert h.size(turns[0]) == len(h.messages(turns[:1], "tools")[0]["content"]) + len(h.SUMMARY_ACK)


def test_with_summary_replaces_the_summary_a_history_had():
    once = h.with_summary(KEPT, "old", 1)
    assert h.with_summary(once, "new", 2) == [{"summary": "new", "runs": 2}, *KEPT]


def test_the_first_request_sends_the_turns_numbered_and_an_extension_sends_the_summary_so_far_first():
    (system, user) = s.request_messages(job())
    assert system == {"role": "system", "content": s.SYSTEM} and system["content"].startswith(s.SUMMARY_MARK)
    assert user["content"] == (
        f"{s.FIRST}\n\nTurn 1\nUser: question 1\nAssistant: answer 1\n\n"
        "Turn 2\nUser: question 2\nAssistant: (No final answer: that run stopped with max_turns.)"
    )
    (_, extended) = s.request_messages(job("They asked twice.", 2, LEFT_OUT[:1]))
    assert extended["content"] == (
        f"{s.SO_FAR}\nThey asked twice.\n\n{s.EXTEND}\n\nTurn 3\nUser: question 1\nAssistant: answer 1"
    )


def test_a_summary_is_one_call_recorded_as_a_summary_step_its_tokens_the_runs_and_no_turn():
    model = Model(ModelReply(text="<think>hm</think> They asked for 12*7.", usage=Usage(40, 9), cost_nanos=7))
    before = state(prompt_tokens=5, completion_tokens=1, cost_nanos=3)

    after, events, text = s.summarize(before, model, lambda: 1_000.0, job())

    assert text == "They asked for 12*7."
    (request,) = model.requests
    assert (request.tools, request.max_output_tokens, request.timeout_s) == ([], s.SUMMARY_MAX_TOKENS, 1_000.0)
    assert request.messages == s.request_messages(job())
    assert after.history == [{"summary": "They asked for 12*7.", "runs": 2}, *KEPT]
    assert (
        events
        == after.steps
        == [
            {
                "index": 0,
                "kind": StepKind.SUMMARY,
                "latency_ms": 0,
                "summary": "They asked for 12*7.",
                "runs": 2,
                "condensed": 2,
                "extended": False,
                "usage": {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49},
                "cost_nanos": 7,
            }
        ]
    )
    assert (after.prompt_tokens, after.completion_tokens, after.cost_nanos, after.turns) == (45, 10, 10, 0)
    assert before.history == KEPT and before.steps == []  # pure: the state given is unchanged


def test_an_extension_says_so_and_covers_the_runs_it_was_asked_to():
    model = Model(ModelReply(text="Both.", usage=Usage(3, 1)))
    after, events, text = s.summarize(state(), model, lambda: 1_000.0, job("One.", 4, LEFT_OUT[:1]))
    assert text == "Both."
    assert (events[0]["extended"], events[0]["runs"], events[0]["condensed"]) == (True, 5, 1)
    assert after.history[0] == {"summary": "Both.", "runs": 5}


def test_a_long_summary_is_cut():
    model = Model(ModelReply(text="x" * (s.SUMMARY_MAX_CHARS + 500)))
    _, _, text = s.summarize(state(), model, lambda: 1_000.0, job())
    assert text is not None and len(text) == s.SUMMARY_MAX_CHARS


def test_a_failed_call_is_a_step_with_its_error_and_the_turns_stay_left_out_after_the_summary_so_far():
    model = Model(error=ModelError("openai failed: 500"))
    after, events, text = s.summarize(state(), model, lambda: 1_000.0, job("One.", 1, LEFT_OUT[:1]))
    assert text is None
    (step,) = events
    assert (step["kind"], step["summary"], step["error"]) == ("summary", None, "openai failed: 500")
    assert step["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    assert after.history == [{"summary": "One.", "runs": 1}, *KEPT]  # the summary so far still leads
    assert after.status == "running" and after.stop_reason is None

    empty = Model(ModelReply(text="  ", usage=Usage(8, 0)))
    after, events, text = s.summarize(state(), empty, lambda: 1_000.0, job())
    assert (text, events[0]["error"], after.history, after.prompt_tokens) == (
        None,
        "the model's summary was empty",
        KEPT,
        8,
    )


def test_no_call_past_the_deadline_at_the_token_limit_or_once_cancelled():
    model = Model(ModelReply(text="never"))
    for given, interrupt in (
        (state(deadline=999.0), None),
        (state(max_total_tokens=10, prompt_tokens=10), None),
        (state(deadline=math.inf), lambda: True),
    ):
        after, events, text = s.summarize(given, model, lambda: 1_000.0, job("One.", 1), interrupt)
        assert (events, text, after.history) == ([], None, [{"summary": "One.", "runs": 1}, *KEPT])
    assert model.requests == []
    done = state()
    done.finish(StopReason.CANCELLED)
    assert s.summarize(done, model, lambda: 1_000.0, job())[1:] == ([], None)
