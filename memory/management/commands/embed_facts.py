"""Give every fact its vector in the index: facts remembered before it existed, after pgvector was enabled, or all
of them after a model change (--rebuild). Creates the index first when the database can hold one."""

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connection
from tqdm import tqdm

from memory import backfill, embeddings, vectors


class Command(BaseCommand):
    help = "Compute the vectors of memory facts that have none in the vector index (all of them with --rebuild)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--rebuild", action="store_true", help="re-create the index and embed every fact again")
        parser.add_argument("--batch", type=int, default=backfill.BATCH, help="facts per transaction (default 500)")

    def handle(self, *args, rebuild: bool, batch: int, **options) -> None:
        if not settings.MEMORY_VECTORS:
            raise CommandError("MEMORY_VECTORS is off: facts get no vectors.")
        if batch < 1:
            raise CommandError("--batch must be at least 1.")
        if rebuild:
            vectors.uninstall(connection)
        if not vectors.install(connection):
            raise CommandError(f"No vector index on this database: {vectors.why_not(connection)}.")
        todo = backfill.missing_count(connection, rebuild=rebuild)
        self.stdout.write(f"{todo} fact(s) to embed with {embeddings.MODEL_ID} ({vectors.kind(connection)} index).")
        with tqdm(total=todo, unit="fact", disable=todo == 0 or options["verbosity"] == 0) as bar:
            done = backfill.embed_missing(connection, rebuild=rebuild, batch=batch, progress=bar.update)
        self.stdout.write(self.style.SUCCESS(f"Embedded {done} fact(s)."))
