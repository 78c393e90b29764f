"""The run page shows the retry prompt an unusable reply earned, and why it was sent (issue 33, item 4): the same
text the model was sent, rendered by the engine from the stored steps."""

from __future__ import annotations

import re

import pytest

from tests.console.conftest import add_step, page_html, reply_step, step_html, stored_run

pytestmark = pytest.mark.django_db


def test_a_react_reply_without_keywords_shows_why_and_the_correction_sent(superuser, alice):
    run = stored_run(alice, protocol="react", status="running", stop_reason=None, output=None)
    reply_step(run, text="I would use a tool here.")
    add_step(run, "error", message="Unusable reply: no line starting with 'Action:' or 'Final Answer:' was found")

    error = step_html(page_html(superuser, run), 1)

    assert "Why a retry:</span> Unusable reply: no line starting with" in error
    prompt = re.search(
        r'<details class="retry-prompt"><summary>Retry prompt sent to the model</summary><pre>(.*?)</pre>', error, re.S
    )
    assert prompt, error
    text = prompt.group(1)
    assert text.startswith("Your last reply could not be used: no line starting with")
    assert "\nAction Input: a JSON object" in text and "\nFinal Answer: the answer" in text


def test_a_native_empty_reply_shows_the_tools_correction(superuser, alice):
    run = stored_run(alice, protocol="tools", status="running", stop_reason=None, output=None)
    reply_step(run, text="")
    add_step(run, "error", message="Unusable reply: the reply was empty")

    error = step_html(page_html(superuser, run), 1)

    assert "Your last reply was empty. Call a tool, or answer the user&#x27;s task." in error


def test_an_answer_that_broke_the_output_schema_shows_the_schema_sent_again(superuser, alice):
    schema = {"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
    run = stored_run(alice, status="running", stop_reason=None, output=None, output_schema=schema)
    reply_step(run, text="{}", final_answer="{}")
    add_step(
        run, "error", message="The final answer does not fit the output schema: 'n' is a required property", output=True
    )

    error = step_html(page_html(superuser, run), 1)

    assert "Your final answer does not fit the required output schema (&#x27;n&#x27; is a required property)" in error
    assert "&quot;required&quot;: [&quot;n&quot;]" in error


def test_an_error_that_ended_the_run_shows_no_retry_prompt(superuser, alice):
    run = stored_run(alice, stop_reason="timeout", output=None, error="deadline reached")
    reply_step(run, text="Thought: hm\nAction: calculator\nAction Input: 1")
    add_step(
        run, "tool", call_id="call_0", name="calculator", arguments={"expression": "1"}, output="1", is_error=False
    )
    add_step(run, "error", message="deadline reached before a model call")

    error = step_html(page_html(superuser, run), 2)

    assert "deadline reached before a model call" in error
    assert "retry-prompt" not in error and "Why a retry" not in error
