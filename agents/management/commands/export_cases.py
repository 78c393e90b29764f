"""`manage.py export_cases`: stored runs as eval cases (YAML on stdout, or --output's file) that `run_evals --replay`
replays; `--labelled`: the cases reviewers labelled in the admin's review queue."""

from __future__ import annotations

import uuid

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from agents.evals import export
from agents.models import LabelledCase, RunStatus, StopReason

DEFAULT_USER = "admin"


class Command(BaseCommand):
    help = (
        "Write stored runs as eval cases (YAML, on stdout): the input, the final answer as the expected answer and "
        "the recorded tool outputs as fixtures. Only runs --user may see; runs without a final answer are skipped. "
        "With --labelled: every case reviewers labelled in the admin's review queue."
    )

    def add_arguments(self, parser) -> None:
        parser.add_argument("--run", nargs="+", action="extend", default=[], metavar="ID", help="run ids")
        parser.add_argument("--status", choices=RunStatus.values, default=None, help="only runs in this status")
        parser.add_argument("--stop-reason", choices=StopReason.values, default=None, help="only runs stopped so")
        parser.add_argument(
            "--limit", type=int, default=export.DEFAULT_LIMIT, help="without --run: the newest N matching runs"
        )
        parser.add_argument("--user", default=None, help="who exports: only the runs they may see (default admin)")
        parser.add_argument(
            "--labelled",
            action="store_true",
            help="every case reviewers labelled in the admin's review queue, instead of runs",
        )
        parser.add_argument("--output", default=None, metavar="PATH", help="write the cases to PATH, not stdout")

    def handle(self, *args, **opts) -> None:
        if opts["labelled"]:
            if opts["run"] or opts["status"] or opts["stop_reason"] or opts["user"]:
                raise CommandError("--labelled takes no --run, --status, --stop-reason or --user.", returncode=2)
            self._labelled(opts["output"])
            return
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
        self._write(export.to_yaml(exported, user), opts["output"])
        self._progress(f"{len(exported.cases)} case(s) from {len(runs)} selected run(s).")

    def _labelled(self, output: str | None) -> None:
        """Every labelled case, oldest first (a file that grows at its end as reviewers label more)."""
        labelled = list(LabelledCase.objects.order_by("created_at", "pk").values_list("case", flat=True))
        if not labelled:
            raise CommandError("No labelled case: label runs in the admin's review queue first.")
        self._write(export.labelled_yaml(labelled), output)
        self._progress(f"{len(labelled)} labelled case(s).")

    def _write(self, text: str, output: str | None) -> None:
        if output is None:
            self.stdout.write(text, ending="")
            return
        try:
            with open(output, "w", encoding="utf-8") as file:
                file.write(text)
        except OSError as exc:
            raise CommandError(f"Cannot write {output}: {exc.strerror}.", returncode=2) from None
        self._progress(f"Wrote {output}.")

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
