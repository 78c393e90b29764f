"""Shared fixtures."""

import os
import time

import pytest

# Loopback must never go through a proxy (the SDKs honour HTTP_PROXY).
os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"

from tests.support.http_stub import StubServer  # noqa: E402

_TEST_DB_LOCK: list = []  # the open lock file, held for the whole session


def pytest_configure(config):
    """Under pytest-xdist each worker has its own Redis database (gw0: 1, gw1: 2, …; a plain run keeps the URL's):
    a test's `cache.clear()` empties only its own worker's cache. Before collection, so modules that read REDIS_URL
    see it, and the processes a test starts (`app_env`) share their worker's database.

    A test's users get a fast password hash (MD5: microseconds, where the production hasher takes 0.8 s a user, and
    the suite makes a few thousand users); the processes a test starts keep the production hasher."""
    from django.conf import settings

    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    url = os.environ.get("REDIS_URL", "")
    if not (worker.startswith("gw") and url):
        return
    from urllib.parse import urlsplit, urlunsplit

    from django.test.signals import clear_cache_handlers

    parts = urlsplit(url)
    os.environ["REDIS_URL"] = urlunsplit(parts._replace(path=f"/{int(worker[2:]) + 1}"))
    settings.REDIS_URL = os.environ["REDIS_URL"]
    for conf in settings.CACHES.values():
        if conf.get("LOCATION") == url:
            conf["LOCATION"] = settings.REDIS_URL
    clear_cache_handlers(setting="CACHES")


# The files that take longest, slowest first. xdist hands whole files to its processes in collection order, so these
# start at once and the short files fill in around them; one of them started last would keep one core busy alone
# at the end of the run. A file not named here keeps its place after them.
SLOWEST_FIRST = (
    "tests/integration/test_celery.py",  # PostgreSQL only
    "tests/integration/test_keyed_deploys.py",
    "tests/integration/test_kill9.py",
    "tests/memory/test_pgvector.py",
    "tests/integration/test_worker.py",
    "tests/observability/test_metrics.py",
    "tests/evals/test_bench_command.py",
    "tests/tools/test_mcp_green.py",
    "tests/cli/test_agent_command.py",
    "tests/cli/test_agent_stream.py",
    "tests/cli/test_plain_shell.py",
    "tests/memory/test_pgvector_server.py",
    "tests/cli/test_agent_threads.py",
    "tests/cli/test_first_hour.py",
    "tests/cli/test_readme_tour.py",
    "tests/integration/test_json_log.py",
    "tests/api/test_schedules.py",
    "tests/integration/test_streams_at_once.py",
    "tests/observability/test_tracing.py",
    "tests/integration/test_concurrency.py",
    "tests/cli/test_readme_commands.py",
    "tests/clients/test_generated_python_client.py",
    "tests/integration/test_db_outage.py",
)


@pytest.fixture(autouse=True)
def _one_connection_heavy_test_at_a_time(request):
    """On PostgreSQL, a test marked `connection_heavy` (twenty processes killed and restarted, every connection
    terminated, Celery workers and beats) waits for any other such test in the run's other processes to end: two of
    them at once, beside the rest of the suite, would pass the server's 100 connections."""
    if request.node.get_closest_marker("connection_heavy") is None or "postgres" not in os.environ.get(
        "DATABASE_URL", ""
    ):
        yield
        return
    import fcntl
    import tempfile

    path = os.path.join(tempfile.gettempdir(), f"reactsite-tests-heavy-{os.getuid()}.lock")
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """The slowest files first (SLOWEST_FIRST), each file's tests still together and in their order."""
    rank = {path: n for n, path in enumerate(SLOWEST_FIRST)}
    root = config.rootpath

    def place(item) -> int:
        return rank.get(item.path.relative_to(root).as_posix(), len(rank))

    items.sort(key=place)


@pytest.fixture(scope="session")
def django_db_modify_db_settings(django_db_modify_db_settings_parallel_suffix):
    """Two suites at once on one machine (two shells, or CI beside a developer) would create, use and drop the same
    test database: a session that finds the default one taken (an advisory lock per database name) uses its own."""
    import fcntl
    import hashlib
    import tempfile

    from django.conf import settings
    from pytest_django.fixtures import _set_suffix_to_test_databases

    conf = settings.DATABASES["default"]
    name = conf.get("TEST", {}).get("NAME") or f"{conf.get('HOST')}:{conf.get('PORT')}/test_{conf['NAME']}"
    digest = hashlib.sha256(str(name).encode()).hexdigest()[:16]
    lock = open(os.path.join(tempfile.gettempdir(), f"reactsite-test-db-{digest}.lock"), "w")  # noqa: SIM115
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        _TEST_DB_LOCK.append(lock)
    except BlockingIOError:
        lock.close()
        _set_suffix_to_test_databases(f"p{os.getpid()}")


@pytest.fixture(scope="session", autouse=True)
def _doorbell_listeners_stop_before_the_test_database_goes(django_db_setup):
    """A stream test leaves this process's doorbell listener running (on PostgreSQL a LISTEN connection): stop it
    before the test database is dropped, which PostgreSQL refuses while a session is connected."""
    yield
    import threading

    from agents.runs import doorbell

    doorbell.stop_listeners()
    for thread in threading.enumerate():
        if thread.name == "doorbell":
            thread.join(3)


@pytest.fixture(autouse=True)
def _demo_writes_at_once(settings):
    """The demo model pauses between the words of a streamed reply for people; tests that want it set it."""
    settings.AGENT_DEMO_WORD_PAUSE_S = 0


@pytest.fixture(autouse=True)
def _evals_in_the_test_transaction(settings):
    """run_evals runs cases on threads (4 by default on PostgreSQL), each with its own connection, which cannot see a
    test's open transaction and commits past it. Tests run cases one at a time unless they set a concurrency (and then
    use a transactional database)."""
    settings.AGENT_EVAL_CONCURRENCY = 1


@pytest.fixture
def stub():
    """A scripted HTTP server on 127.0.0.1, stopped after the test."""
    with StubServer() as server:
        yield server


@pytest.fixture(autouse=True)
def _fresh_cache(request):
    """Rate-limit counters and idempotency state never leak from one test to the next."""
    names = request.fixturenames
    wanted = "transactional_db" if "transactional_db" in names else "db" if "db" in names else None
    if wanted is None and request.node.get_closest_marker("django_db"):
        marker = request.node.get_closest_marker("django_db")
        wanted = "transactional_db" if marker.kwargs.get("transaction") else "db"
    if wanted is not None:
        from django.core.cache import cache

        request.getfixturevalue(wanted)  # database access is set up before we touch the database cache
        cache.clear()
    yield


def make_user(username: str, *, staff: bool = False, reviewer: bool = False, superuser: bool = False):
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user(username, password="pw-" + username, is_staff=staff, is_superuser=superuser)
    if reviewer:
        user.user_permissions.add(Permission.objects.get(codename="review_run"))
    return User.objects.get(pk=user.pk)  # fresh object: permission cache empty


def client_for(user):
    """A DRF client authenticated with the user's API token, as a real client would be."""
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@pytest.fixture
def alice(db):
    return make_user("alice")


@pytest.fixture
def bob(db):
    return make_user("bob")


@pytest.fixture
def reviewer(db):
    return make_user("rita", staff=True, reviewer=True)


@pytest.fixture
def api(alice):
    return client_for(alice)


def stored_run_fields(**fields) -> dict:
    """The columns of a finished demo run, for run rows made without running the agent loop."""
    from datetime import timedelta

    from django.utils import timezone

    defaults = {
        "input": "stored",
        "provider": "demo",
        "model": "demo-1",
        "tools": ["calculator", "search"],
        "sensitive_tools": ["search"],
        "deadline": timezone.now() + timedelta(seconds=60),
        "status": "done",
        "stop_reason": "final_answer",
        "output": "x",
    }
    return {**defaults, **fields}


@pytest.fixture(autouse=True)
def no_hold_outlives_its_test():
    """Every lease this process holds is dropped when the work holding it ends: one left behind would be renewed by
    the lease keeper for as long as the process lives, so its run could never be handed to another worker."""
    yield
    from agents.runs import leases

    deadline = time.monotonic() + 2  # work a test started in another thread may still be unwinding
    while leases.held() and time.monotonic() < deadline:
        time.sleep(0.05)
    left = leases.held()
    for token in left:
        leases.drop(token)
    assert not left, f"{len(left)} lease(s) still held after the test"
