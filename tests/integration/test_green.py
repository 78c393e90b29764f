"""Under gevent, open database connections are shared between the requests of different greenlets, one at a time."""

from __future__ import annotations

import subprocess
import sys

from tests.integration._support import ROOT, clean_env

SCRIPT = """
from gevent import monkey; monkey.patch_all()
import os, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reactsite.settings")
django.setup()
import gevent
from django.core.signals import request_finished, request_started
from django.db import connection, connections
from reactsite.serving import green

raws, overlap, busy = [], [0], set()

def client_connection(requests):
    for _ in range(requests):  # one client connection: a greenlet serving its requests
        request_started.send(sender=None)
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        raw = connection.connection
        if id(raw) in busy:
            overlap[0] += 1  # two greenlets holding one connection at once
        busy.add(id(raw))
        raws.append(raw)
        gevent.sleep(0.01)  # a request in flight: others run meanwhile
        busy.discard(id(raw))
        request_finished.send(sender=None)

# 40 client connections, 10 at a time: each greenlet is new, but the connections are not
for wave in range(4):
    gevent.joinall([gevent.spawn(client_connection, 2) for _ in range(10)])
distinct = len({id(r) for r in raws})
in_transaction = []

def holds_a_transaction():
    from django.db import transaction
    request_started.send(sender=None)
    with transaction.atomic():
        connection.cursor().execute("SELECT 1")
        request_finished.send(sender=None)  # a streaming response ending inside a transaction
        in_transaction.append(connection.connection is not None and connection.in_atomic_block)

gevent.spawn(holds_a_transaction).join()
idle = len(green._idle["default"])
green.close_idle()
closed = 0
for raw in {id(r): r for r in raws}.values():
    try:
        raw.execute("SELECT 1")
    except Exception:
        closed += 1
print(len(raws), distinct, overlap[0], in_transaction[0], idle, closed)
"""


def test_idle_connections_are_shared_between_greenlets_one_at_a_time(tmp_path):
    env = clean_env(DEBUG="1", DATABASE_URL=f"sqlite:///{tmp_path / 'g.sqlite3'}")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )

    assert proc.returncode == 0, proc.stderr[-3000:]
    requests, distinct, overlap, kept_in_transaction, idle, closed = proc.stdout.split()[-6:]
    assert int(requests) == 80
    assert int(distinct) == 10  # 40 greenlets, 80 requests: as many connections as were ever in use at once
    assert int(overlap) == 0  # never two greenlets on one connection at the same time
    assert kept_in_transaction == "True"  # a connection inside a transaction stays with its greenlet
    assert int(idle) == 9  # the 10 less the one that stayed with the transaction's greenlet
    assert int(closed) == 10  # close_idle closes the idle ones; the other went with its greenlet


def test_without_gevent_nothing_is_installed():
    from django.core.signals import request_finished, request_started

    from reactsite.serving import green

    assert not green.patched()
    for signal in (request_started, request_finished):
        assert not any("reactsite.serving.green" in str(key) for key, *_ in signal.receivers)


WAIT = """
from gevent import monkey; monkey.patch_all()
import os, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reactsite.settings")
django.setup()
from django.db import connection, connections
from agents.engine.types import ModelRequest
from agents.runs.calls import unheld
from reactsite.serving import green

class Model:
    def complete(self, request):
        held = [w for w in connections.all(initialized_only=True) if w.connection]
        print("during", len(held), len(green._idle["default"]))
        return "reply"

with connection.cursor() as cursor:
    cursor.execute("SELECT 1")
before = connection.connection
reply = unheld(Model()).complete(ModelRequest(messages=[], tools=[], protocol="native", timeout_s=5.0))
print("after", reply, connection.connection is before)
"""


def test_a_greenlet_waiting_on_its_model_holds_no_sqlite_connection(tmp_path):
    """Under gevent on SQLite the run's connection waits in the idle set during the model call (other greenlets use
    it meanwhile) and the same one comes back afterwards: no connect per call."""
    env = clean_env(DEBUG="1", DATABASE_URL=f"sqlite:///{tmp_path / 'w.sqlite3'}")
    proc = subprocess.run(
        [sys.executable, "-c", WAIT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )

    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "during 0 1" in proc.stdout  # none held by the waiting greenlet; its connection is in the idle set
    assert "after reply True" in proc.stdout  # ... and it is the same connection afterwards


LOCK = """
from gevent import monkey; monkey.patch_all()
import os, time, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reactsite.settings")
django.setup()
import gevent
from django.db import connection, transaction

with connection.cursor() as cursor:
    cursor.execute("CREATE TABLE t (x INTEGER)")
# another writer (as another process would be), through the backend's own SQLite library: two copies of SQLite in one
# process (the standard module's and sqlean.py's) do not see each other's locks (reactsite/serving/sqlite/driver.py)
other = connection.Database.connect(connection.settings_dict["NAME"], isolation_level=None)
other.execute("BEGIN IMMEDIATE")
ticks, done = [], []

def ticker():
    while not done:
        ticks.append(time.monotonic())
        gevent.sleep(0.002)

def writer():
    with transaction.atomic():  # BEGIN IMMEDIATE: waits for `other` to commit
        connection.cursor().execute("INSERT INTO t VALUES (1)")
    done.append(time.monotonic())

started = time.monotonic()
t, w = gevent.spawn(ticker), gevent.spawn(writer)
gevent.sleep(0.3)
other.execute("COMMIT")  # the lock is free now
w.join(5); t.join(1)
waited = done[0] - started
during = sum(1 for at in ticks if at < started + 0.3)
with connection.cursor() as cursor:
    cursor.execute("SELECT count(*) FROM t")
    rows = cursor.fetchone()[0]
print(f"{waited:.3f} {during} {rows}")
"""


def test_waiting_for_sqlites_write_lock_lets_other_greenlets_run(tmp_path):
    """Another process holds the write lock for 0.3 s: the greenlet that wants it waits (and then writes), and the
    rest of the process keeps running meanwhile (SQLite's own busy handler would have stopped every greenlet)."""
    env = clean_env(DEBUG="1", DATABASE_URL=f"sqlite:///{tmp_path / 'l.sqlite3'}")
    proc = subprocess.run(
        [sys.executable, "-c", LOCK], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )

    assert proc.returncode == 0, proc.stderr[-3000:]
    waited, ticks, rows = proc.stdout.split()[-3:]
    assert 0.3 <= float(waited) < 3  # it waited for the lock, then got it
    assert int(rows) == 1
    assert int(ticks) >= 30  # another greenlet ran every ~2 ms throughout the wait (the process never stalled)


CONNECT = """
from gevent import monkey; monkey.patch_all()
import os, time, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reactsite.settings")
django.setup()
import gevent
from django.db import connection

# another process, a writer (through the backend's SQLite library: see LOCK)
other = connection.Database.connect(connection.settings_dict["NAME"], isolation_level=None)
other.execute("CREATE TABLE t (x INTEGER)")  # the file is still in rollback-journal mode
other.execute("BEGIN IMMEDIATE")  # switching it to WAL (our init_command) must wait for this lock
ticks, opened = [], []

def ticker():
    while not opened:
        ticks.append(time.monotonic())
        gevent.sleep(0.002)

def request():
    with connection.cursor() as cursor:  # opens the connection: PRAGMA journal_mode=WAL
        cursor.execute("SELECT count(*) FROM t")
        opened.append((time.monotonic(), cursor.fetchone()[0]))
        cursor.execute("PRAGMA journal_mode")
        opened.append(cursor.fetchone()[0])

started = time.monotonic()
t, r = gevent.spawn(ticker), gevent.spawn(request)
gevent.sleep(0.3)
other.execute("COMMIT")
r.join(5); t.join(1)
during = sum(1 for at in ticks if at < started + 0.3)
print(f"{opened[0][0] - started:.3f} {opened[0][1]} {opened[1]} {during}")
"""


def test_opening_a_connection_while_the_file_is_locked_waits_and_lets_other_greenlets_run(tmp_path):
    """A connection opened while another process holds the lock its `PRAGMA journal_mode=WAL` needs waits for the lock
    (it used to fail at once with "database is locked": a 500 on the first requests of a server started under load),
    and other greenlets keep running meanwhile."""
    env = clean_env(DEBUG="1", DATABASE_URL=f"sqlite:///{tmp_path / 'c.sqlite3'}")
    proc = subprocess.run(
        [sys.executable, "-c", CONNECT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )

    assert proc.returncode == 0, proc.stderr[-3000:]
    waited, rows, mode, ticks = proc.stdout.split()[-4:]
    assert 0.3 <= float(waited) < 3  # it waited for the lock, then opened
    assert (rows, mode) == ("0", "wal")
    assert int(ticks) >= 30  # the process kept running while it waited
