"""Work started in several threads at once, for tests of concurrent requests."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connection


def in_threads(n: int, work: Callable[[int], Any], timeout_s: float = 120) -> list:
    """work(i) in n threads released together by a barrier; each closes its own database connection. Each result,
    or the exception a thread raised (for the assertions to report)."""
    barrier = threading.Barrier(n)
    results: list = [None] * n

    def target(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[i] = work(i)
        except Exception as exc:  # noqa: BLE001 - reported by the assertions
            results[i] = exc
        finally:
            connection.close()

    threads = [threading.Thread(target=target, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout_s)
    return results
