"""Python's cyclic garbage collector, set for gunicorn's workers: long-lived processes serving many requests.

A full collection scans every object the collector tracks. After its first requests a worker tracks ~200,000 of them
(Django, DRF, the SDKs and their pydantic models, loaded lazily by the first requests), nearly all alive for the whole
life of the process, so each full collection took ~150 ms, during which none of the worker's hundreds of runs in
flight moved (W3 at 8 clients on a 2-core host: one every ~8 s; the collector took 4.2 % of the worker's CPU, and
1.3 % with the settings below).

So a worker collects once and freezes what survives (`gc.freeze()`: later collections never scan those objects
again) after its 1st, 10th, 100th and 1000th request, when what the first requests load is in place:
a full collection then takes ~18 ms. The youngest generation is collected every 7,000 allocations instead of 700
(fewer collections of the middle one; each young collection stays ~ms). Measured in docs/performance.md.

The cost: cyclic garbage frozen at one of those four moments (of a request in flight then) is never reclaimed; that
is bounded (four moments in a worker's life) and small. `GC_TUNING=0` leaves Python's defaults.
"""

from __future__ import annotations

import gc

FREEZE_AFTER = (1, 10, 100, 1000)  # requests done
YOUNG_THRESHOLD = 7000  # Python's default is 700

_done = 0
_installed = False


def install() -> None:
    """In a gunicorn worker, once Django is set up: raise the young threshold and freeze after the first requests.
    (`run_worker` keeps Python's defaults: its bench, 200 runs at once, showed no steady gain within its noise.)"""
    from django.conf import settings
    from django.core.signals import request_finished

    global _installed
    if not settings.GC_TUNING:
        return
    _installed = True
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    request_finished.connect(_request_finished, dispatch_uid="reactsite.serving.heap")


def _request_finished(**kwargs) -> None:
    done()


def done() -> None:
    """One request is done: at the moments of FREEZE_AFTER, collect and freeze the survivors. A no-op in a process
    that did not `install()` (a test run, a management command)."""
    global _done
    if not _installed:
        return
    _done += 1
    if _done in FREEZE_AFTER:
        gc.collect()
        gc.freeze()
        if _done == FREEZE_AFTER[-1]:
            from django.core.signals import request_finished

            request_finished.disconnect(dispatch_uid="reactsite.serving.heap")
