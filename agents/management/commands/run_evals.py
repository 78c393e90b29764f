"""`manage.py run_evals`: run the eval cases, store the results, print a summary table."""

from __future__ import annotations

import json
import logging
import sys

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from tqdm import tqdm

from agents import errors
from agents.evals.cases import DEFAULT_CASES, CaseError, load_cases
from agents.evals.runner import EvalConfig, plan, run_evals
from agents.management.tables import format_table


class Command(BaseCommand):
    help = "Run the eval cases against a provider/model/protocol and store the results (exit 0 only if all pass)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--agent", default=None, help="run every case from this agent's configuration")
        parser.add_argument("--provider", default=None, help="default: the agent's, or AGENT_DEFAULT_PROVIDER")
        parser.add_argument("--model", default=None)
        parser.add_argument("--protocol", choices=["tools", "react"], default=None, help="default: each case's own")
        parser.add_argument("--cases", default=str(DEFAULT_CASES), help="a YAML or JSON file of cases")
        parser.add_argument("--only", default="", help="a glob (or substring) on case ids")
        parser.add_argument("--concurrency", type=int, default=1)
        parser.add_argument("--max-reflections", type=int, default=0, help="retries with a self-critique (0-5)")
        parser.add_argument("--user", default=None, help="recorded as who ran the evals")
        parser.add_argument("--json", action="store_true", help="print the eval run and its results as JSON")
        parser.add_argument(
            "--replay",
            action="store_true",
            help="answer tool calls from each case's fixtures (made by export_cases): no real tool runs; "
            "with --protocol, every case runs in that protocol",
        )

    def handle(self, *args, **opts) -> None:
        logger = logging.getLogger("agents")
        level = logger.level
        logger.setLevel(logging.WARNING)  # the table is the output
        try:
            self._handle(opts)
        finally:
            logger.setLevel(level)  # in-process callers (call_command, the evals API) keep their own logging

    def _handle(self, opts) -> None:
        if not 1 <= opts["concurrency"] <= 16:
            raise CommandError("--concurrency must be between 1 and 16.", returncode=2)
        if not 0 <= opts["max_reflections"] <= 5:
            raise CommandError("--max-reflections must be between 0 and 5.", returncode=2)
        try:
            cases = load_cases(opts["cases"], opts["only"] or None)
        except CaseError as exc:
            raise CommandError(str(exc), returncode=2) from None
        if opts["replay"] and all(case.fixtures is None for case in cases):
            raise CommandError("--replay needs cases with fixtures (made by export_cases).", returncode=2)
        agent = self._agent(opts["agent"])
        config = EvalConfig(
            provider=opts["provider"] or (agent and agent.provider) or settings.AGENT_DEFAULT_PROVIDER,
            model=opts["model"] or (agent and agent.model) or None,
            protocol=opts["protocol"] or (agent and agent.protocol) or None,
            agent=agent.name if agent else None,
            max_reflections=opts["max_reflections"],
            concurrency=opts["concurrency"],
            cases_file=opts["cases"],
            only=opts["only"],
            replay=opts["replay"],
        )
        total = len(plan(cases, config.protocol, config.replay))
        if total == 0:
            raise CommandError("No case matches --only / --protocol.", returncode=2)
        eval_run = self._run(cases, config, total, self._user(opts["user"]), quiet=opts["json"])
        self._report(eval_run, as_json=opts["json"])
        if eval_run.passed != eval_run.total:
            sys.exit(1)

    def _agent(self, name: str | None):
        if name is None:
            return None
        from agents.models import Agent

        agent = Agent.objects.filter(name=name).first()
        if agent is None:
            raise CommandError(f"No agent named '{name}'.", returncode=2)
        return agent

    def _user(self, username: str | None):
        if username is None:
            return None
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user '{username}'.", returncode=2)
        return user

    def _run(self, cases, config: EvalConfig, total: int, user, *, quiet: bool):
        bar = tqdm(total=total, desc="evals", unit="case", file=sys.stderr, disable=quiet and not sys.stderr.isatty())
        try:
            return run_evals(cases=cases, config=config, created_by=user, progress=lambda result: bar.update(1))
        except errors.InvalidRequest as exc:
            raise CommandError(" ".join(m for msgs in exc.detail.values() for m in msgs), returncode=2) from None
        finally:
            bar.close()

    def _report(self, eval_run, *, as_json: bool) -> None:
        results = list(eval_run.results.order_by("case_id", "protocol"))
        if as_json:
            from agents.api.views.evals import EvalRunDetailSerializer

            self.stdout.write(json.dumps(EvalRunDetailSerializer(eval_run).data, indent=2, default=str))
            return
        rows = [
            (r.case_id, r.protocol, "pass" if r.passed else "FAIL", r.turns, f"{r.latency_ms:.0f}", r.reason)
            for r in results
        ]
        for line in format_table(("case", "protocol", "result", "turns", "ms", "why not"), rows):
            self.stdout.write(line)
        self.stdout.write(
            f"\n{eval_run.passed}/{eval_run.total} passed ({eval_run.pass_rate:.0%}) · provider {eval_run.provider} · "
            f"model {eval_run.model} · mean turns {eval_run.mean_turns:.2f} · p50 {eval_run.p50_latency_ms:.0f} ms · "
            f"p95 {eval_run.p95_latency_ms:.0f} ms · tokens {eval_run.tokens} · eval run {eval_run.pk}"
        )
