"""`manage.py run_evals`: run the eval cases, store the results, print a summary table."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from tqdm import tqdm

from agents import errors
from agents.api.views.evals import EvalRunDetailSerializer
from agents.evals import reports
from agents.evals.cases import DEFAULT_CASES, CaseError, load_cases
from agents.evals.gates import Verdict, summarise_cases
from agents.evals.runner import EvalConfig, hold_gate, plan, run_evals
from agents.management.tables import format_table
from agents.models import EvalRun
from agents.runs import agent_config
from agents.usage.prices import money_text as money


class Command(BaseCommand):
    help = (
        "Run the eval cases against a provider/model/protocol, store the results and hold them to a gate: exit 0 "
        "when it passes, 1 when it fails, 2 on bad arguments (docs/evals.md)."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument(
            "--agent",
            default=None,
            help="run every case from this agent's configuration: name, or name@n for its version n",
        )
        parser.add_argument("--provider", default=None, help="default: the agent's, or AGENT_DEFAULT_PROVIDER")
        parser.add_argument("--model", default=None)
        parser.add_argument("--protocol", choices=["tools", "react"], default=None, help="default: each case's own")
        parser.add_argument("--cases", default=str(DEFAULT_CASES), help="a YAML or JSON file of cases")
        parser.add_argument("--only", default="", help="a glob (or substring) on case ids")
        parser.add_argument(
            "--concurrency",
            type=int,
            default=None,
            help="cases at once, 1-16 (default AGENT_EVAL_CONCURRENCY, else 4; 1 on SQLite)",
        )
        parser.add_argument("--repeat", type=int, default=1, help="attempts of each case and protocol (1-20)")
        parser.add_argument("--baseline", type=int, default=None, help="an eval run id to compare with")
        parser.add_argument(
            "--max-drop", type=float, default=0.0, help="with --baseline: how far (0-1) the pass rate may fall below it"
        )
        parser.add_argument("--min-pass-rate", type=float, default=None, help="0-1; default 1.0, or 0 with --baseline")
        parser.add_argument("--junit", default=None, metavar="PATH", help="write JUnit XML here")
        parser.add_argument("--report", default=None, metavar="PATH", help="write a JSON report here")
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
        concurrency = opts["concurrency"]
        if concurrency is None:
            concurrency = settings.AGENT_EVAL_CONCURRENCY or (1 if connection.vendor == "sqlite" else 4)
        self._check_arguments(opts, concurrency)
        baseline = self._baseline(opts["baseline"])
        # Relative to where the command runs: the runner reads a relative path as the project's (hashing it there).
        opts["cases"] = str(Path(opts["cases"]).absolute())
        try:
            cases = load_cases(opts["cases"], opts["only"] or None)
        except CaseError as exc:
            raise CommandError(str(exc), returncode=2) from None
        if opts["replay"] and all(case.fixtures is None for case in cases):
            raise CommandError("--replay needs cases with fixtures (made by export_cases).", returncode=2)
        agent = self._agent(opts["agent"])
        config = EvalConfig(
            provider=opts["provider"] or (agent and agent.values["provider"]) or settings.AGENT_DEFAULT_PROVIDER,
            model=opts["model"] or (agent and agent.values["model"]) or None,
            protocol=opts["protocol"] or (agent and agent.values["protocol"]) or None,
            agent=opts["agent"] if agent else None,  # as named: "name" runs its current version, "name@n" version n
            max_reflections=opts["max_reflections"],
            concurrency=concurrency,
            cases_file=opts["cases"],
            only=opts["only"],
            replay=opts["replay"],
            repeat=opts["repeat"],
            baseline=baseline,
        )
        total = len(plan(cases, config.protocol, config.replay, config.repeat))
        if total == 0:
            raise CommandError("No case matches --only / --protocol.", returncode=2)
        eval_run = self._run(cases, config, total, self._user(opts["user"]), quiet=opts["json"])
        verdict = hold_gate(eval_run, min_pass_rate=opts["min_pass_rate"], max_drop=opts["max_drop"])
        results = list(eval_run.results.order_by("case_id", "protocol", "attempt"))
        self._write_files(opts, eval_run, results, verdict)
        self._report(eval_run, results, verdict, as_json=opts["json"])
        if not verdict.passed:
            sys.exit(1)

    def _check_arguments(self, opts, concurrency: int) -> None:
        """Exit 2 before anything runs on an argument out of range, or a report path that cannot be written."""
        for name, value, low, high in (
            ("--concurrency", concurrency, 1, 16),
            ("--max-reflections", opts["max_reflections"], 0, 5),
            ("--repeat", opts["repeat"], 1, 20),
            ("--max-drop", opts["max_drop"], 0, 1),
            ("--min-pass-rate", opts["min_pass_rate"], 0, 1),
        ):
            if value is not None and not low <= value <= high:
                raise CommandError(f"{name} must be between {low} and {high}.", returncode=2)
        if opts["max_drop"] and opts["baseline"] is None:
            raise CommandError("--max-drop needs --baseline.", returncode=2)
        for flag in ("junit", "report"):
            path = opts[flag]
            if path is not None:
                folder = Path(path).resolve().parent
                if not folder.is_dir() or not os.access(folder, os.W_OK) or Path(path).is_dir():
                    raise CommandError(f"--{flag} {path}: cannot write there (no such folder, or not writable).",
                                       returncode=2)  # fmt: skip

    def _baseline(self, pk: int | None) -> EvalRun | None:
        if pk is None:
            return None
        baseline = EvalRun.objects.filter(pk=pk).first()
        if baseline is None:
            raise CommandError(f"No eval run {pk} to compare with (--baseline).", returncode=2)
        if baseline.finished_at is None:
            raise CommandError(f"Eval run {pk} has not finished: it cannot be a baseline.", returncode=2)
        return baseline

    def _write_files(self, opts, eval_run, results, verdict: Verdict) -> None:
        if opts["junit"]:
            reports.write(opts["junit"], reports.junit(eval_run, results, verdict))
        if opts["report"]:
            reports.write(opts["report"], reports.json_text(reports.report(eval_run, results, verdict)))

    def _agent(self, name: str | None):
        if name is None:
            return None
        try:
            return agent_config.find(name)
        except errors.InvalidRequest as exc:
            raise CommandError(" ".join(exc.detail["agent"]), returncode=2) from None

    def _user(self, username: str | None):
        if username is None:
            return None
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user '{username}'.", returncode=2)
        return user

    def _run(self, cases, config: EvalConfig, total: int, user, *, quiet: bool):
        bar = tqdm(total=total, desc="evals", unit="case", file=sys.stderr, disable=quiet and not sys.stderr.isatty())
        tally = {"passed": 0, "failed": 0}

        def progress(result) -> None:
            tally["passed" if result.passed else "failed"] += 1
            bar.set_postfix(tally, refresh=False)
            bar.update(1)

        try:
            return run_evals(cases=cases, config=config, created_by=user, progress=progress)
        except errors.InvalidRequest as exc:
            raise CommandError(" ".join(m for msgs in exc.detail.values() for m in msgs), returncode=2) from None
        finally:
            bar.close()

    def _report(self, eval_run, results, verdict: Verdict, *, as_json: bool) -> None:
        if as_json:
            data = EvalRunDetailSerializer(eval_run).data
            self.stdout.write(json.dumps(data, indent=2, default=str))
            return
        flaky = set(verdict.flaky)
        rows: list[tuple[object, ...]] = [
            (r.case_id, r.protocol, r.attempt, "pass" if r.passed else "FAIL", f"{r.score:.2f}", r.turns,
             f"{r.latency_ms:.0f}", r.reason + (" (flaky)" if f"{r.case_id} [{r.protocol}]" in flaky else ""))
            for r in results
        ]  # fmt: skip
        header: tuple[str, ...] = ("case", "protocol", "try", "result", "score", "turns", "ms", "why not")
        if eval_run.repeat == 1:
            rows, header = [row[:2] + row[3:] for row in rows], header[:2] + header[3:]
        for line in format_table(header, rows):
            self.stdout.write(line)
        if eval_run.repeat > 1:
            self._repeats(results)
        cost = f" · cost {money(eval_run.cost_nanos)}" if eval_run.cost_nanos else ""
        self.stdout.write(
            f"\n{eval_run.passed}/{eval_run.total} passed ({eval_run.pass_rate:.0%}) · score {eval_run.score:.2f} · "
            f"provider {eval_run.provider} · model {eval_run.model} · mean turns {eval_run.mean_turns:.2f} · "
            f"p50 {eval_run.p50_latency_ms:.0f} ms · p95 {eval_run.p95_latency_ms:.0f} ms · tokens {eval_run.tokens}"
            f"{cost} · eval run {eval_run.pk}"
        )
        self._gate(verdict)

    def _repeats(self, results) -> None:
        rows = [
            (s.case_id, s.protocol, f"{s.passed}/{s.attempts}", "yes" if s.all_passed else "no",
             f"{s.mean_score:.2f}", f"{s.spread:.2f}", "flaky" if s.flaky else "")
            for s in summarise_cases(results)
        ]  # fmt: skip
        self.stdout.write("")
        for line in format_table(("case", "protocol", "passed", "all", "score", "spread", ""), rows):
            self.stdout.write(line)

    def _gate(self, verdict: Verdict) -> None:
        gate = verdict.gate
        held = f"pass rate ≥ {gate.min_pass_rate:.0%}"
        if gate.baseline_id is not None:
            held += f", at most {gate.max_drop:.0%} below eval run {gate.baseline_id} ({gate.baseline_pass_rate:.0%})"
        if verdict.passed:
            self.stdout.write(f"gate passed ({held})")
        else:
            self.stdout.write(f"gate FAILED ({held}): " + "; ".join(verdict.failures))
        if verdict.regressions:
            self.stdout.write("passed in the baseline, failing now: " + ", ".join(verdict.regressions))
