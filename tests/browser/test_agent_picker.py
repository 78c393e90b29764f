"""The playground's agent picker: a run starts from the chosen agent's configuration."""

from __future__ import annotations

from playwright.sync_api import expect

from agents.models import Agent, Run
from tests.browser.conftest import login
from tests.conftest import make_user


def test_a_run_from_a_picked_agent(new_page, artifacts):
    Agent.objects.create(name="steady", protocol="react", max_turns=4, temperature=0.1, instructions="Be precise.")
    make_user("alice")
    page = new_page()
    login(page, "alice")
    expect(page.locator("#agent option")).to_have_count(2)  # (none) and steady
    page.select_option("#agent", "steady")
    page.select_option("#protocol", "tools")  # ignored: the agent's own protocol applies
    page.fill("#input", "What is 12*7, plus 1?")
    page.click("#run-button")
    expect(page.locator("#final-answer")).to_have_text("85")
    expect(page.locator("#trace")).to_contain_text("ignores temperature=0.1")
    page.screenshot(path=str(artifacts / "playground-agent.png"), full_page=True)
    run = Run.objects.get()
    assert (run.agent, run.protocol, run.max_turns, run.instructions) == ("steady", "react", 4, "Be precise.")
    assert page.errors == []
