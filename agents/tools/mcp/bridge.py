"""One asyncio event loop per process, in an OS thread of its own, for the asyncio-based MCP SDK; sync code waits on it.

Our engine and views are synchronous and run either in plain threads (tests, the CLI, gunicorn's gthread worker) or
as greenlets under gunicorn's gevent worker, which monkey-patches the standard library. The MCP client sessions live
on this loop for the life of the process (stdio servers stay up between calls); a caller submits a coroutine with
`run(coro, timeout)` and waits for its result, at most `timeout` seconds, after which the coroutine is cancelled.

Under gevent the loop thread must keep out of gevent's way, since gevent's patched primitives only work in a thread
whose hub runs, and this thread runs asyncio instead:
- the thread is a real OS thread (the unpatched `_thread.start_new_thread`; a patched `threading.Thread` would be
  a greenlet of the caller's thread);
- the loop waits with the unpatched selector (gevent replaces `selectors.DefaultSelector` with its own);
- the loop's default executor (what resolves a host name) runs each job in its own OS thread, not in a
  `ThreadPoolExecutor` whose workers would be greenlets that never get to run here;
- stdio servers are started with the unpatched `os.posix_spawn` (agents/tools/mcp/stdio.py): gevent's Popen can
  only watch a child from the main thread's hub.
The caller's side needs nothing special: `concurrent.futures.Future.result(timeout)` waits on a patched condition,
which under gevent parks only the calling greenlet, and the loop thread may notify it (gevent's locks work across
OS threads). tests/tools/test_mcp_green.py runs calls under `gevent.monkey.patch_all()`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def original(module: str, name: str) -> Any:
    """`module.name` as the standard library defines it, even when gevent has patched the module."""
    monkey = sys.modules.get("gevent.monkey")
    if monkey is not None and monkey.is_module_patched(module):
        return monkey.get_original(module, name)
    return getattr(importlib.import_module(module), name)


def start_os_thread(target: Callable[[], None]) -> None:
    original("_thread", "start_new_thread")(target, ())


class OsThreadExecutor(concurrent.futures.ThreadPoolExecutor):
    """The loop's default executor: each job in a new OS thread (asyncio insists on a ThreadPoolExecutor)."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def job() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever awaits the job
                future.set_exception(exc)

        start_os_thread(job)
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        return None  # nothing pooled: each job's thread ends with its job


class EventLoopThread:
    """An event loop running forever in its own OS thread."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.SelectorEventLoop(original("selectors", "DefaultSelector")())
        self.loop.set_default_executor(OsThreadExecutor())
        start_os_thread(self._run)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            self.loop.close()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        """The coroutine's result, run on the loop; TimeoutError (the coroutine cancelled) past `timeout` seconds."""
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(max(timeout, 0.0))
        except TimeoutError:
            if future.cancel():  # still running: cancelled on the loop now
                raise TimeoutError(f"timed out after {timeout:.3g} s") from None
            return future.result()  # it finished meanwhile, or the TimeoutError was its own
        except BaseException:
            future.cancel()  # the caller was interrupted (a worker shutting down): the call stops too
            raise

    def submit(self, coro: Coroutine[Any, Any, Any]) -> concurrent.futures.Future[Any]:
        """Run the coroutine on the loop without waiting for it."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        """Stop the loop once the work already queued has run (the thread then closes it)."""
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.loop.stop)
