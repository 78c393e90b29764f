"""Python's garbage collector set for gunicorn's long-lived workers (docs/performance.md, the GC freeze).

After a worker's 1st, 10th, 100th and 1000th request it collects once and freezes the survivors, and its youngest
generation is collected every 7,000 allocations; `GC_TUNING=0` keeps Python's defaults. The price: cyclic garbage of
the requests in flight at those four moments is never reclaimed (bounded, small).
"""

from __future__ import annotations

import gc

FREEZE_AFTER = (1, 10, 100, 1000)  # requests done
YOUNG_THRESHOLD = 7000  # Python's default is 700

_done = 0
_installed = False


def install() -> None:
    """In a gunicorn worker, once Django is set up: raise the young threshold and freeze after the first requests
    (`run_worker` keeps Python's defaults)."""
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
