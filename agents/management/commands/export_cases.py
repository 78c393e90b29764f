"""`manage.py export_cases`: stored runs as eval cases (YAML on stdout) that `run_evals --replay` replays."""

from __future__ import annotations

import uuid

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agents.evals import export
from agents.models import RunStatus, StopReason

DEFAULT_USER = "admin"


class Command(BaseCommand):
    help = (
        "Write stored runs as eval cases (YAML, on stdout): the input, the final answer as the expected answer and "
        "the recorded tool outputs as fixtures. Only runs --user may see; runs without a final answer are skipped."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--run", nargs="+", action="extend", default=[], metavar="ID", help="run ids")
        parser.add_argument("--status", choices=RunStatus.values, default=None, help="only runs in this status")
        parser.add_argument("--stop-reason", choices=StopReason.values, default=None, help="only runs stopped so")
        parser.add_argument(
            "--limit", type=int, default=export.DEFAULT_LIMIT, help="without --run: the newest N matching runs"
        )
        parser.add_argument("--user", default=None, help="who exports: only the runs they may see (default admin)")

    def handle(self, *args, **opts) -> None:
        if not (opts["run"] or opts["status"] or opts["stop_reason"]):
            raise CommandError("Name runs with --run, or select them with --status / --stop-reason.", returncode=2)
        if opts["limit"] < 1:
            raise CommandError("--limit must be at least 1.", returncode=2)
        user = self._user(opts["user"])
        try:
            runs = export.select_runs(
                user=user,
                run_ids=opts["run"],
                status=opts["status"],
                stop_reason=opts["stop_reason"],
                limit=opts["limit"],
            )
        except export.RunNotFound as exc:
            raise CommandError(str(exc), returncode=2) from None
        chosen = {run.pk for run in runs}
        for raw in dict.fromkeys(opts["run"]):
            if uuid.UUID(raw.strip()) not in chosen:
                self.stderr.write(f"run {raw}: left out, it does not match --status / --stop-reason")
        exported = export.export_cases(runs=runs, exporter=user)
        for case in exported.cases:
            self._progress(f"run {case['source_run']} → case {case['id']} ({len(case['fixtures'])} fixture(s))")
        for line in exported.skipped + exported.notes:
            self.stderr.write(line)
        if not exported.cases:
            raise CommandError("No eval case: no selected run could be exported.")
        self.stdout.write(export.to_yaml(exported, user), ending="")
        self._progress(f"{len(exported.cases)} case(s) from {len(runs)} selected run(s).")

    def _user(self, username: str | None):
        """The exporting user: --user's, else admin (whom `make run` creates)."""
        user = get_user_model().objects.filter(username=username or DEFAULT_USER).first()
        if user is not None:
            return user
        if username is not None:
            raise CommandError(f"No user '{username}'.", returncode=2)
        raise CommandError(
            f"No user '{DEFAULT_USER}' (the default --user): run 'make run' (or '.venv/bin/python manage.py "
            "ensure_admin') first, or name a user with --user.",
            returncode=2,
        )

    def _progress(self, line: str) -> None:
        self.stderr.write(line, style_func=str)  # progress, not an error: not in the error colour
