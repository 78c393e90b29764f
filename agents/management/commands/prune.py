"""`manage.py prune [--days N] [--dry-run]`: retention by hand (the worker runs it hourly with AGENT_RETENTION_DAYS)."""

from __future__ import annotations

import time

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from tqdm import tqdm

from agents.background import retention
from agents.management.tables import format_table


class Command(BaseCommand):
    help = (
        "Delete finished runs older than N days (with their steps; runs an eval result points at are kept), "
        "idempotency keys older than 24 hours, finished task rows older than 7 days and expired cache rows."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--days",
            type=int,
            default=None,
            help="keep runs younger than this (default: AGENT_RETENTION_DAYS; 0 keeps every run)",
        )
        parser.add_argument("--dry-run", action="store_true", help="count what would be deleted; delete nothing")
        parser.add_argument("--batch", type=int, default=retention.BATCH, help="rows per delete transaction")

    def handle(self, *args, **opts) -> None:
        days = settings.AGENT_RETENTION_DAYS if opts["days"] is None else opts["days"]
        if days < 0:
            raise CommandError("--days must be 0 (keep every run) or more.", returncode=2)
        if opts["batch"] < 1:
            raise CommandError("--batch must be at least 1.", returncode=2)
        dry = opts["dry_run"]
        planned = retention.prune(days, dry_run=True)  # totals for the progress bar (and the answer of a dry run)
        started = time.monotonic()
        if dry:
            result = planned
        else:
            bar = tqdm(
                total=planned.total - planned.counts.get("steps", 0), unit="rows", disable=None, file=self.stderr
            )
            with bar:
                result = retention.prune(days, progress=lambda kind, n: _advance(bar, kind, n), batch=opts["batch"])
        seconds = time.monotonic() - started
        rows = [[kind, str(n)] for kind, n in result.counts.items()]
        self.stdout.write("\n".join(format_table(["rows", "would delete" if dry else "deleted"], rows)))
        kept = (
            "every run is kept (no --days and AGENT_RETENTION_DAYS=0)" if not days else f"runs older than {days} days"
        )
        verb = "Would delete" if dry else "Deleted"
        self.stdout.write(f"{verb} {result.total} rows in {seconds:.2f} s; {kept}.")


def _advance(bar: tqdm, kind: str, n: int) -> None:
    bar.set_description(kind)
    bar.update(n)
