"""`run_evals --agent NAME`: every case starts from the agent's configuration (issue 17)."""

from __future__ import annotations

import json

import pytest
from django.core.management import CommandError

from agents.models import Agent, EvalRun, Run
from tests.evals.conftest import command

pytestmark = pytest.mark.django_db


def test_every_case_runs_from_the_agent(settings):
    Agent.objects.create(name="steady", protocol="react", temperature=0.2, instructions="Show your work.")
    out = json.loads(command("run_evals", "--agent", "steady", "--only", "arith-chain-plus", "--json"))
    assert out["passed"] == out["total"] == 1
    eval_run = EvalRun.objects.get()
    assert (eval_run.agent, eval_run.protocol) == ("steady", "react")
    runs = Run.objects.filter(agent="steady")
    assert runs.count() == 1
    run = runs.get()
    assert (run.protocol, run.temperature, run.instructions) == ("react", 0.2, "Show your work.")


def test_the_command_line_overrides_the_agent():
    Agent.objects.create(name="steady", protocol="react")
    command("run_evals", "--agent", "steady", "--protocol", "tools", "--only", "arith-chain-plus", "--json")
    assert Run.objects.get(agent="steady").protocol == "tools"


def test_an_unknown_agent_is_refused_before_anything_runs():
    with pytest.raises(CommandError, match="No agent named 'ghost'") as error:
        command("run_evals", "--agent", "ghost")
    assert error.value.returncode == 2
    assert not EvalRun.objects.exists() and not Run.objects.exists()
