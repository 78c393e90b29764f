"""Under gevent a greenlet's database connection is kept across its requests and closed when the greenlet is gone."""

from __future__ import annotations

import subprocess
import sys

from tests.integration._support import ROOT, clean_env

SCRIPT = """
from gevent import monkey; monkey.patch_all()
import os, gc, django
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "reactsite.settings")
django.setup()
gc.disable()  # closing must not wait for the cycle collector
import gevent
from django.core.signals import request_finished
from django.db import connection

raws = []

def client_connection(requests):
    for _ in range(requests):  # one keep-alive client: several requests, one greenlet
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        raws.append(connection.connection)
        request_finished.send(sender=None)

gevent.joinall([gevent.spawn(client_connection, 3) for _ in range(5)])
gevent.sleep(0)
per_greenlet = len({id(r) for r in raws})
closed = 0
for raw in {id(r): r for r in raws}.values():
    try:
        raw.execute("SELECT 1")
    except Exception:
        closed += 1
print(per_greenlet, closed)
"""


def test_a_greenlets_connection_is_reused_then_closed_with_it(tmp_path):
    env = clean_env(DEBUG="1", DATABASE_URL=f"sqlite:///{tmp_path / 'g.sqlite3'}")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60, check=False
    )

    assert proc.returncode == 0, proc.stderr[-3000:]
    reused_per_greenlet, closed = map(int, proc.stdout.split()[-2:])
    assert reused_per_greenlet == 5  # one connection per client greenlet, kept across its 3 requests
    assert closed == 5  # ... and closed once the greenlet was gone, with no garbage collection


def test_without_gevent_nothing_is_installed():
    from django.core.signals import request_finished

    from reactsite import green

    assert not green.patched()
    assert not any("reactsite.green" in str(key) for key, *_ in request_finished.receivers)
