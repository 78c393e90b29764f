"""Memory by meaning on PostgreSQL with pgvector (issue 35): the memory tests, run again in a subprocess against a
throwaway PostgreSQL 18 with pgvector (tests/support/pgvector_server.py), must pass with the vector index in use —
the `vector` column and its HNSW index, not the full-text fallback that CI's system PostgreSQL (no pgvector) gets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.pgvector_server import pgvector_server

ROOT = Path(__file__).resolve().parents[2]
INNER = [
    "tests/memory/test_semantic.py",
    "tests/memory/test_isolation.py",
    "tests/memory/test_api.py",
    "tests/memory/test_ranking.py",
]


@pytest.fixture(scope="module")
def pg():
    with pgvector_server() as server:
        yield server


def run(pg, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "DATABASE_URL": pg.url(), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("REDIS_URL", None)
    return subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_memory_tests_pass_on_pgvector_with_the_index_in_use(pg):
    inner = run(pg, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", *INNER)
    assert inner.returncode == 0, inner.stdout[-4000:] + inner.stderr[-2000:]
    assert "no vector index on this database" not in inner.stdout  # the vector tests ran: none skipped for it
    assert " passed" in inner.stdout


def test_migrate_builds_the_vector_column_and_hnsw_index_and_the_check_is_quiet(pg):
    migrate = run(pg, sys.executable, "manage.py", "migrate", "-v0")
    assert migrate.returncode == 0, migrate.stderr
    shell = run(
        pg,
        sys.executable,
        "manage.py",
        "shell",
        "--no-imports",
        "-c",
        "from memory import vectors; from django.db import connection; "
        "print(vectors.kind(), vectors.index_dim()); cur = connection.cursor(); "
        "cur.execute(\"SELECT indexdef FROM pg_indexes WHERE indexname = 'memory_fact_vec_hnsw'\"); "
        "print(cur.fetchone()[0])",
    )
    assert shell.returncode == 0, shell.stderr
    kind, index = shell.stdout.strip().splitlines()[-2:]
    assert kind == "pgvector 256"
    assert "USING hnsw (vec vector_cosine_ops)" in index
    check = run(pg, sys.executable, "manage.py", "check", "--database", "default")
    assert check.returncode == 0 and "memory.W001" not in check.stderr + check.stdout, check.stderr
