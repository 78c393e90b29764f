"""Every tool call carries an idempotency key (run id + step index); `remember` uses it (issue 11)."""

from __future__ import annotations

import pytest

from agents.engine.dispatch import Toolset, run_tool
from agents.tools import ToolContext
from memory.models import Fact
from memory.tools import remember

pytestmark = pytest.mark.django_db


def test_the_key_names_the_run_and_the_step():
    context = ToolContext(user_id=1, run_id="r-1")
    assert context.for_call(7).idempotency_key == "r-1:7"
    assert ToolContext(user_id=1).for_call(7).idempotency_key is None  # no run, no key


def test_the_engine_hands_each_call_its_own_key():
    seen = []

    class Probe:
        name, description, sensitive, timeout_s, inline = "probe", "", False, 1.0, True
        parameters = {"type": "object"}

        def __call__(self, arguments, context):
            seen.append(context.idempotency_key)
            return "ok"

    toolset = Toolset({"probe": Probe()}, ToolContext(user_id=1, run_id="r-9"))
    run_tool(toolset, "probe", {}, 1.0, step=4)
    run_tool(toolset, "probe", {}, 1.0, step=6)
    assert seen == ["r-9:4", "r-9:6"]


def test_a_repeated_remember_call_answers_as_the_first_time(alice):
    from agents.models import Run
    from tests.conftest import stored_run_fields

    run = Run.objects.create(owner=alice, **stored_run_fields())
    call = ToolContext(user_id=alice.pk, run_id=str(run.pk)).for_call(3)

    first = remember({"text": "I like tea"}, call)
    again = remember({"text": "I like tea"}, call)  # the same call, repeated by a resumed run
    other = remember({"text": "I like tea"}, call.for_call(5))  # a later, different call

    assert first == again == "Remembered: I like tea"
    assert other == "Already remembered: I like tea"
    assert Fact.objects.filter(owner=alice).count() == 1
