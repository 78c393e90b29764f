"""Fixtures and helpers of the eval tests (run_evals, the evals API and admin, bench)."""

from __future__ import annotations

import io
import logging
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone


@pytest.fixture(autouse=True)
def _agents_log_level():
    """run_evals quiets the `agents` loggers for its own output; in-process that would outlive the test."""
    logger = logging.getLogger("agents")
    level = logger.level
    yield
    logger.setLevel(level)


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    """Users are made per test (and per eval case): a cheap hasher keeps the suite fast."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def command(name: str, *args: str) -> str:
    """Run a management command in-process; its stdout (a SystemExit propagates)."""
    out = io.StringIO()
    call_command(name, *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def stored_run(owner, **fields):
    """A finished run row, without running the agent loop."""
    from agents.models import Run

    defaults = {
        "input": "stored",
        "provider": "demo",
        "model": "demo-1",
        "deadline": timezone.now() + timedelta(seconds=60),
        "status": "done",
        "stop_reason": "final_answer",
        "output": "x",
    }
    return Run.objects.create(owner=owner, **{**defaults, **fields})


def stored_eval_run(results: dict[tuple[str, str], bool], owner=None, **fields):
    """An EvalRun with one result per (case, protocol) → passed, each linked to a stored run of `owner`."""
    from agents.models import EvalResult, EvalRun

    passed = sum(results.values())
    eval_run = EvalRun.objects.create(
        provider="demo",
        model="demo-1",
        protocol="per case",
        cases_file="agents/evals/cases.yaml",
        total=len(results),
        passed=passed,
        pass_rate=passed / len(results) if results else 0.0,
        finished_at=timezone.now(),
        **fields,
    )
    for (case_id, protocol), ok in results.items():
        EvalResult.objects.create(
            eval_run=eval_run,
            case_id=case_id,
            protocol=protocol,
            run=stored_run(owner) if owner is not None else None,
            passed=ok,
            reason="" if ok else f"missing 'x' in {case_id}",
            output="x",
            turns=2,
        )
    return eval_run
