"""The garbage collector set for gunicorn's workers (reactsite/serving/heap.py): a raised young threshold, and the
survivors frozen after the 1st, 10th, 100th and 1000th request; GC_TUNING=0 leaves Python's defaults."""

from __future__ import annotations

import gc
import runpy
from types import SimpleNamespace

import pytest
from django.core.signals import request_finished
from django.db import close_old_connections

from reactsite.serving import heap
from tests.integration._support import ROOT


@pytest.fixture
def fresh_heap(monkeypatch):
    """heap's module state as in a new worker; the collector and the signal as they were, afterwards. Django's own
    receiver that closes old database connections is off meanwhile: these requests are signals only, and a
    connection an earlier test of this process left open must not be touched by a test without the database."""
    threshold = gc.get_threshold()
    monkeypatch.setattr(heap, "_done", 0)
    monkeypatch.setattr(heap, "_installed", False)
    request_finished.disconnect(close_old_connections)
    yield
    request_finished.connect(close_old_connections)
    request_finished.disconnect(dispatch_uid="reactsite.serving.heap")
    gc.unfreeze()
    gc.set_threshold(*threshold)


def finish_requests(n: int) -> list[int]:
    """Send request_finished n times; the frozen count after each."""
    counts = []
    for _ in range(n):
        request_finished.send(sender=None)
        counts.append(gc.get_freeze_count())
    return counts


def test_install_raises_the_young_threshold_and_freezes_after_the_first_requests(fresh_heap, settings):
    settings.GC_TUNING = True
    gc.unfreeze()
    before = gc.get_freeze_count()
    middle, old = gc.get_threshold()[1:]
    heap.install()
    assert gc.get_threshold() == (heap.YOUNG_THRESHOLD, middle, old)

    first = finish_requests(1)[0]
    assert first > before + 1000  # the first request's survivors are frozen
    kept = [[] for _ in range(100)]  # new long-lived objects after that freeze ...
    # Each request's count with the requests done by then: a request another thread of this process finishes
    # meanwhile (a server a test left running) counts too, as it would in a worker, so the 10th is found by `_done`.
    seen = []
    for _ in range(11):
        seen.append((finish_requests(1)[0], heap._done))
    before_10th = [count for count, done in seen if done < 10]
    at_10th = next(i for i, (_, done) in enumerate(seen) if done >= 10)
    assert max(before_10th, default=first) <= first  # nothing more is frozen until the 10th (freed objects count down)
    previous = seen[at_10th - 1][0] if at_10th else first
    assert seen[at_10th][0] - previous >= len(kept)  # ... frozen at the 10th
    assert max(count for count, _ in seen[at_10th:]) <= seen[at_10th][0]
    assert heap._done >= 12


def test_after_the_last_freeze_the_receiver_goes(fresh_heap, settings, monkeypatch):
    settings.GC_TUNING = True
    heap.install()
    monkeypatch.setattr(heap, "_done", heap.FREEZE_AFTER[-1] - 1)
    receivers = len(request_finished.receivers)
    finish_requests(1)
    assert heap._done == heap.FREEZE_AFTER[-1]
    assert len(request_finished.receivers) == receivers - 1
    finish_requests(1)
    assert heap._done == heap.FREEZE_AFTER[-1]  # no longer counted


def test_gc_tuning_off_leaves_pythons_defaults(fresh_heap, settings):
    settings.GC_TUNING = False
    gc.unfreeze()
    frozen, before = gc.get_freeze_count(), gc.get_threshold()
    heap.install()
    assert gc.get_threshold() == before
    assert max(finish_requests(3)) <= frozen
    heap.done()
    assert heap._done == 0 and gc.get_freeze_count() <= frozen


@pytest.mark.parametrize("worker_class", ["reactsite.serving.gunicorn_worker.GeventWorker", "gthread"])
def test_gunicorns_post_worker_init_installs_it(fresh_heap, settings, worker_class, monkeypatch):
    settings.GC_TUNING = True
    conf = runpy.run_path(str(ROOT / "gunicorn.conf.py"))
    monkeypatch.setattr("signal.signal", lambda *args: None)  # the gevent branch's SIGTERM handler: not in pytest
    conf["post_worker_init"](SimpleNamespace(cfg=SimpleNamespace(worker_class_str=worker_class)))
    assert gc.get_threshold()[0] == heap.YOUNG_THRESHOLD
    gc.unfreeze()
    before = gc.get_freeze_count()
    assert finish_requests(1)[0] > before + 1000  # the worker's heap, frozen after its first request
