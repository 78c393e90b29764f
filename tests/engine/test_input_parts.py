"""An input with images (API.md v1.2): neutral parts through the engine, a thread's images within their bound, the
demo model saying what it was given. Pure engine (and the demo model), no database."""

from __future__ import annotations

import base64

import pytest

from agents.engine import RunState, advance, parts
from agents.engine import history as h
from agents.engine.prompts import RETRY, reflection_messages, render_messages
from agents.providers.demo import DemoProvider, images_given
from agents.providers.fake import ScriptedModel, text
from tests.engine.conftest import new_state, run_until_stopped, toolset

PNG = {"type": "image", "data": "iVBORw0KGgoAAAA=", "media_type": "image/png"}  # 11 bytes
URL = {"type": "image", "url": "https://images.example.test/cat.png"}
PARTS = [{"type": "text", "text": "What is 12*7, plus 1?"}, PNG]
NOTE = {"type": "text", "text": h.IMAGE_LEFT_OUT}


def test_text_of_and_images():
    assert parts.text_of("plain") == "plain"
    assert parts.text_of([{"type": "text", "text": "a"}, PNG, {"type": "text", "text": "b"}]) == "a\n\nb"
    assert parts.text_of([PNG]) == ""
    assert parts.images("plain") == [] and parts.images(None) == []
    assert parts.images([{"type": "text", "text": "a"}, PNG, URL]) == [PNG, URL]


def test_appended_adds_to_a_string_or_as_a_last_text_part():
    assert parts.appended("task", "\n\nmore") == "task\n\nmore"
    assert parts.appended(PARTS, "\n\nmore") == [*PARTS, {"type": "text", "text": "more"}]
    assert parts.appended(PARTS, "") is PARTS


@pytest.mark.parametrize(("raw", "size"), [(b"", 0), (b"a", 1), (b"ab", 2), (b"abc", 3), (b"abcd" * 100, 400)])
def test_decoded_size_without_decoding(raw, size):
    encoded = base64.b64encode(raw).decode()
    assert parts.decoded_size(encoded) == size
    assert parts.decoded_size(encoded.rstrip("=")) == size  # unpadded too


def test_a_string_input_renders_as_before():
    messages = render_messages(RunState(input="the task"), [])
    assert messages[1] == {"role": "user", "content": "the task"}


def test_an_input_with_parts_renders_them_as_the_user_content():
    state = RunState(input=parts.text_of(PARTS), input_parts=PARTS)
    assert render_messages(state, [])[1] == {"role": "user", "content": PARTS}


def test_parts_without_an_image_render_as_their_text():
    only_text = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    state = RunState(input=parts.text_of(only_text), input_parts=only_text)
    assert render_messages(state, [])[1] == {"role": "user", "content": "a\n\nb"}
    noted = h.images_bounded([turn(0, images=1)], 0)
    assert h.messages(noted, "tools")[0] == {"role": "user", "content": f"q0\n\n{h.IMAGE_LEFT_OUT}"}


def test_a_retry_after_a_reflection_adds_the_critique_as_a_text_part():
    steps = [{"index": 0, "kind": "model", "reflection": True, "text": "Take bigger steps.", "tool_calls": []}]
    state = RunState(input=parts.text_of(PARTS), input_parts=PARTS, steps=steps)
    content = render_messages(state, [])[1]["content"]
    assert content[:2] == PARTS
    assert content[2] == {"type": "text", "text": RETRY.format(critique="Take bigger steps.").lstrip("\n")}


def test_a_reflection_request_merges_into_a_trailing_user_message_with_parts():
    merged = reflection_messages([{"role": "system", "content": "s"}, {"role": "user", "content": PARTS}], 2)
    assert merged[-1]["content"][:2] == PARTS
    assert merged[-1]["content"][2]["text"].startswith("You did not reach a final answer within 2 turns")


def test_the_state_round_trips_its_parts():
    state = RunState(input="x", input_parts=PARTS)
    assert RunState.from_json(state.to_json()).input_parts == PARTS
    assert RunState.from_json({**RunState(input="x").to_json()}).input_parts is None
    legacy = {k: v for k, v in RunState(input="x").to_json().items() if k != "input_parts"}
    assert RunState.from_json(legacy).input_parts is None  # a state stored before parts existed


def test_the_model_gets_the_parts_through_the_loop(clock):
    model = ScriptedModel([text("Two cats.")])
    state = new_state(input=parts.text_of(PARTS), input_parts=PARTS)
    state, _ = advance(state, model, toolset(), clock)
    assert state.output == "Two cats."
    assert model.requests[0].messages[1]["content"] == PARTS


# --- a thread's images ------------------------------------------------------------------------------------------


def turn(i: int, images: int = 0) -> dict:
    t: dict = {"input": f"q{i}", "output": f"a{i}", "stop_reason": "final_answer"}
    if images:
        t["input_parts"] = [{"type": "text", "text": f"q{i}"}] + [PNG] * images
    return t


def test_history_renders_an_earlier_runs_parts():
    rendered = h.messages([turn(0, images=1), turn(1)], "tools")
    assert rendered[0] == {"role": "user", "content": turn(0, images=1)["input_parts"]}
    assert rendered[2] == {"role": "user", "content": "q1"}


def test_images_bounded_keeps_the_newest_images():
    turns = [turn(0, images=2), turn(1), turn(2, images=2)]
    kept = h.images_bounded(turns, 3)
    assert kept[2] == turns[2] and kept[1] is turns[1]
    assert kept[0]["input_parts"] == [{"type": "text", "text": "q0"}, NOTE, PNG]  # its last image, the older a note
    assert turns[0]["input_parts"][1] == PNG  # the turns given are not changed


def test_images_bounded_to_none_leaves_notes_only():
    kept = h.images_bounded([turn(0, images=2)], 0)
    assert kept[0]["input_parts"] == [{"type": "text", "text": "q0"}, NOTE, NOTE]
    assert h.images_bounded([turn(0, images=1)], -3)[0]["input_parts"][1] == NOTE


# --- the demo model -----------------------------------------------------------------------------------------------


def test_images_given_describes_each_image():
    assert images_given([PNG]) == "I was given 1 image (image/png, 11 bytes)."
    big = {"type": "image", "data": "A" * 4000, "media_type": "image/jpeg"}
    assert images_given([big, URL]) == ("I was given 2 images (image/jpeg, 2.9 KB; a link to images.example.test).")


@pytest.mark.parametrize("protocol", ["tools", "react"])
def test_the_demo_model_says_what_it_was_given_and_still_answers(clock, calculator, protocol):
    tools = toolset(calculator)
    state = new_state(tools, input=parts.text_of(PARTS), input_parts=PARTS, protocol=protocol)
    state, _ = run_until_stopped(state, DemoProvider(), tools, clock)
    assert state.output == "I was given 1 image (image/png, 11 bytes). 85"


def test_the_demo_model_without_images_answers_as_before(clock, calculator):
    tools = toolset(calculator)
    state, _ = run_until_stopped(new_state(tools, input="What is 12*7, plus 1?"), DemoProvider(), tools, clock)
    assert state.output == "85"
