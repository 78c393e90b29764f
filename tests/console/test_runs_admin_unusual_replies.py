"""The run page shows a reply that did not end the ordinary way as such (refused with its text, output truncated,
content filtered, a paused turn), and the model's own thinking folded away (issue 33, item 4)."""

from __future__ import annotations

import re

import pytest

from tests.console.conftest import add_step, page_html, reply_step, step_html, stored_run

pytestmark = pytest.mark.django_db


def test_a_refusal_reads_refused_with_its_text(superuser, alice):
    run = stored_run(alice, stop_reason="refused", output=None, error="I will not do <that>.")
    reply_step(run, text="I will not do <that>.", finish="refused")
    add_step(run, "error", message="The model refused: I will not do <that>.")

    first = step_html(page_html(superuser, run), 0)

    assert '<div class="finish errornote">refused: I will not do &lt;that&gt;.</div>' in first


def test_a_refusal_without_text_says_so(superuser, alice):
    run = stored_run(alice, stop_reason="refused", output=None)
    reply_step(run, finish="refused")
    assert "refused: (no reason given)" in step_html(page_html(superuser, run), 0)


@pytest.mark.parametrize(
    ("finish", "label", "ends"),
    [
        ("output_truncated", "output truncated: the reply reached the output token limit", True),
        ("content_filtered", "content filtered: the provider&#x27;s content filter stopped the reply", True),
        ("pause_turn", "paused: the provider paused a long turn; the next call continues it", False),
    ],
)
def test_the_way_a_reply_ended_is_shown_on_its_step(superuser, alice, finish, label, ends):
    run = stored_run(alice)
    reply_step(run, text="The first primes are 2, 3 and", finish=finish)

    first = step_html(page_html(superuser, run), 0)

    shown = re.search(r'<div class="finish( errornote)?">(.*?)</div>', first)
    assert shown and shown.group(2).startswith(label)
    assert bool(shown.group(1)) is ends


def test_an_ordinary_reply_shows_no_finish(superuser, alice):
    run = stored_run(alice)
    reply_step(run, thought="Easy.", final_answer="4", text="4")
    first = step_html(page_html(superuser, run), 0)
    assert 'class="finish' not in first and "<details" not in first
    assert "Thought:</span> <pre>Easy.</pre>" in first


def test_thinking_is_folded_text_and_redacted_blocks_are_counted(superuser, alice):
    run = stored_run(alice)
    blocks = [
        {"type": "thinking", "thinking": "First <12*7>, then add.", "signature": "sig"},
        {"type": "redacted_thinking", "data": "EmwKAhgB"},
        {"type": "redacted_thinking", "data": "EmwKAhgC"},
        {"type": "tool_use", "id": "tu_1", "name": "calculator", "input": {"expression": "12*7"}},
    ]
    calls = [{"id": "tu_1", "name": "calculator", "arguments": {"expression": "12*7"}}]
    reply_step(run, thought="First <12*7>, then add.", thinking=True, blocks=blocks, tool_calls=calls)

    first = step_html(page_html(superuser, run), 0)

    folded = re.search(r'<details class="thinking"><summary>Thinking</summary>(.*?)</details>', first, re.S)
    assert folded, first
    assert "<pre>First &lt;12*7&gt;, then add.</pre>" in folded.group(1)
    assert "2 blocks of thinking the provider sent encrypted" in folded.group(1)
    assert "Thought:" not in first  # shown once, folded
    assert "Action:</span> calculator" in first
    assert "sig" not in first.replace("signature", "")  # the signature is the provider's, never shown


def test_a_real_refused_run_reads_refused_on_its_page(superuser, alice, settings, stub):
    from agents.runs import drive, submit
    from tests.providers import stub_llm as llm

    llm.point_sdks_at(settings, stub, retries=0)
    stub.add("POST", llm.OPENAI_PATH, json=llm.openai_message({"content": None, "refusal": "Not this one."}))
    options = submit.RunOptions(input="Do the thing", provider="openai", tools=["calculator"])
    run = drive.execute(run_id=submit.start_run(owner=alice, options=options).pk)

    html = page_html(superuser, run)

    assert run.stop_reason == "refused"
    assert "refused: Not this one." in step_html(html, 0)
    assert "The model refused: Not this one." in step_html(html, 1)
