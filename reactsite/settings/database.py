"""The database: SQLite in WAL mode by default, PostgreSQL through DATABASE_URL; how connections are kept and checked,
how commits wait, and the tasks queue that lives in it (docs/configuration.md, "Django and the database")."""

from reactsite.settings.base import BASE_DIR, env

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
_DEFAULT = DATABASES["default"]
if _DEFAULT["ENGINE"] == "django.db.backends.sqlite3":
    _DEFAULT.setdefault("OPTIONS", {}).update(
        {
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
            "transaction_mode": "IMMEDIATE",
            "timeout": 20,
        }
    )
    _DEFAULT.setdefault("TEST", {})["NAME"] = str(BASE_DIR / "test_db.sqlite3")
    # Django's backend, but under gevent a wait for the write lock yields to other greenlets (reactsite/serving/sqlite).
    _DEFAULT["ENGINE"] = "reactsite.serving.sqlite"
# Connections are reused across requests (opening one per request cost a connect and, on SQLite, the pragmas each
# time). PostgreSQL: a psycopg pool per process (DB_POOL_MAX_SIZE), and a run hands its connection back to the pool
# before every model call, so runs waiting on models hold none of PostgreSQL's connections. SQLite: a persistent
# connection per thread, checked before reuse (a file handle, not a server slot: kept during model calls).
_POSTGRES = _DEFAULT["ENGINE"] == "django.db.backends.postgresql"
if _POSTGRES and env.bool("DB_POOL", default=True):
    from reactsite.serving import pgpool

    _DEFAULT.setdefault("OPTIONS", {})["pool"] = {
        "min_size": env.int("DB_POOL_MIN_SIZE", default=2),
        "max_size": env.int("DB_POOL_MAX_SIZE", default=20),
        "timeout": env.float("DB_POOL_TIMEOUT_S", default=10.0),
        "check": pgpool.check,  # one broken connection has the whole pool checked (reactsite/serving/pgpool.py)
    }
else:
    # Under gevent a connection belongs to a client connection's greenlet and closes with it
    # (reactsite/serving/green.py).
    _DEFAULT["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=300)
# A connection whose session is gone (PostgreSQL restarted, failed over, or ended it) is found out and replaced before
# it serves anything: a persistent one is checked (SELECT 1) before a request's first query; with the pool, Django
# hands psycopg_pool `check=ConnectionPool.check_connection`, which checks each connection as it leaves the pool (an
# empty query, cheap next to the failed requests a dead connection causes: docs/performance.md).
_DEFAULT["CONN_HEALTH_CHECKS"] = True
if _POSTGRES:  # a server that does not answer (a lost host, a full backlog) fails a connect in seconds, not minutes
    _DEFAULT.setdefault("OPTIONS", {}).setdefault("connect_timeout", env.int("DB_CONNECT_TIMEOUT_S", 5))
# PostgreSQL: parameters bound by the server and statements prepared on the connection after two runs, so the
# hot path's few statements are parsed and planned once per pooled connection instead of on every request (which
# cuts PostgreSQL's CPU per run: docs/performance.md). Behind a transaction-mode pgbouncer, which cannot keep prepared
# statements, set DB_SERVER_SIDE_BINDING=0.
if _POSTGRES and env.bool("DB_SERVER_SIDE_BINDING", default=True):
    _DEFAULT.setdefault("OPTIONS", {}).update(
        {"server_side_binding": True, "prepare_threshold": env.int("DB_PREPARE_THRESHOLD", default=2)}
    )
AGENT_RELEASE_DB_DURING_MODEL_CALLS = env.bool("AGENT_RELEASE_DB_DURING_MODEL_CALLS", default=_POSTGRES)
# PostgreSQL: a unit's commit that only a model call follows (no tool with side effects, no pause, not the run's
# end) does not wait for its WAL flush (synchronous_commit off for that one transaction). A killed worker loses
# nothing by it (the server has the commit); only a crash of the database server itself can lose such a step (its
# run then repeats its last model calls). Every other commit, and the run's last, waits as before, which also makes
# all earlier ones durable. The insert of a sync or step run does not wait either (its model call comes next, and the
# request's last commit waits before any response names the run). AGENT_RELAXED_COMMITS=0: all of them wait.
AGENT_RELAXED_COMMITS = env.bool("AGENT_RELAXED_COMMITS", default=True)
