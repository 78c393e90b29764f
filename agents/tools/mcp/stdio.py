"""The stdio transport of an MCP server: a child process spoken to with one JSON-RPC message per line.

Ours rather than the SDK's `stdio_client`, which starts the server through asyncio's child-process support, and so
under gevent's monkey-patching through gevent's Popen: gevent can watch a child only from the main thread's hub,
not from the thread our event loop runs in (agents/tools/mcp/bridge.py), and it disables the standard Popen's own
fork/exec there too. This starts the server with the unpatched `os.posix_spawn` on two pipes, reads and writes the
pipes through the loop, and polls `waitpid` for its end: the same with or without gevent. Like the SDK, it passes the
server only a few harmless environment variables (PATH, HOME…) plus the configured `env`, starts it in a session of
its own, and stops it as the MCP lifecycle says: close its stdin, wait, then SIGTERM and SIGKILL its process group.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import logging
import os
import shutil
import signal
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import mcp.types as types
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from mcp.client.stdio import get_default_environment
from mcp.shared.message import SessionMessage

from agents.tools.mcp.bridge import original
from agents.tools.mcp.config import ServerConfig

log = logging.getLogger("agents.tools.mcp")

MAX_LINE_BYTES = 8 * 1024 * 1024  # one message; a longer line ends the session
GRACE_S = 2.0  # after closing stdin, after SIGTERM, after SIGKILL
POLL_S = 0.02

Incoming = MemoryObjectSendStream[SessionMessage | Exception]


class Child:
    """A server process started by `spawn`: its pid, our ends of its stdin and stdout, and its exit."""

    def __init__(self, pid: int, stdin: int, stdout: int) -> None:
        self.pid, self.stdin, self.stdout = pid, stdin, stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """The exit code once it has exited (-1 when another part of the process reaped it: gevent does)."""
        if self.returncode is None:
            try:
                pid, status = original("os", "waitpid")(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -1
            else:
                if pid:
                    self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def signal_group(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, sig)


# Servers of this process still running: killed at exit if closing their sessions did not stop them.
LIVE: set[Child] = set()


def spawn(config: ServerConfig) -> Child:
    """Start the server in a new session, its stdin and stdout on pipes, its stderr ours; OSError when it cannot."""
    env = get_default_environment() | dict(config.env)
    path = config.command
    if os.sep not in path:
        path = shutil.which(path, path=env.get("PATH")) or ""
        if not path:
            raise FileNotFoundError(f"command not found: {config.command}")
    child_in, our_in = _pipe()
    our_out, child_out = _pipe()
    actions: list[tuple[int, ...]] = [(os.POSIX_SPAWN_DUP2, child_in, 0), (os.POSIX_SPAWN_DUP2, child_out, 1)]
    actions += [(os.POSIX_SPAWN_CLOSE, fd) for fd in _inheritable_fds()]  # like Popen's close_fds
    try:
        pid = original("os", "posix_spawn")(
            path, [config.command, *config.args], env, file_actions=actions, setsid=True
        )
    except BaseException:
        for fd in (our_in, our_out):
            os.close(fd)
        raise
    finally:
        for fd in (child_in, child_out):
            os.close(fd)
    return Child(pid, our_in, our_out)


def _pipe() -> tuple[int, int]:
    """A pipe whose ends are above stdin/stdout/stderr (dup2 onto 0 or 1 needs them elsewhere), close-on-exec."""
    ends = []
    for fd in os.pipe():
        if fd <= 2:
            high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
            os.close(fd)
            fd = high
        ends.append(fd)
    return ends[0], ends[1]


def _inheritable_fds() -> list[int]:
    """Descriptors above 2 a child would inherit (most are close-on-exec already; a few, e.g. sockets passed down
    by a process manager, are not)."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return []
    fds = []
    for name in names:
        with contextlib.suppress(OSError, ValueError):
            if int(name) > 2 and os.get_inheritable(int(name)):
                fds.append(int(name))
    return fds


@contextlib.asynccontextmanager
async def stdio_transport(config: ServerConfig) -> AsyncIterator[tuple[Any, Any]]:
    """Start the server and yield the session's (read stream, write stream); the server is stopped on the way out."""
    child = spawn(config)
    LIVE.add(child)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE_BYTES, loop=loop)
    try:
        stdout, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader, loop=loop), os.fdopen(child.stdout, "rb", buffering=0)
        )
        stdin, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(child.stdin, "wb", buffering=0))
    except BaseException:
        await stop(child)
        raise
    to_session, from_server = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    to_server, from_session = anyio.create_memory_object_stream[SessionMessage](0)
    async with anyio.create_task_group() as pipes:
        pipes.start_soon(_read, reader, to_session)
        pipes.start_soon(_write, from_session, stdin, to_session.close)
        try:
            yield from_server, to_server
        finally:
            with anyio.CancelScope(shield=True):
                stdin.close()  # the server's cue to exit
                await stop(child)
                stdout.close()
                for stream in (to_session, from_server, to_server, from_session):
                    await stream.aclose()
            pipes.cancel_scope.cancel()


async def _read(reader: asyncio.StreamReader, sink: Incoming) -> None:
    """Server messages into the session until the server's stdout ends (it exited) or a line is too long."""
    async with sink:
        while True:
            try:
                line = await reader.readline()
            except ValueError:  # longer than MAX_LINE_BYTES: the stream cannot be resynchronised
                log.warning("an MCP stdio server sent a line over %d bytes; closing its session", MAX_LINE_BYTES)
                return
            if not line:
                return
            if not line.strip():
                continue
            try:
                item: SessionMessage | Exception = SessionMessage(
                    types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                )
            except ValueError as exc:  # not JSON-RPC (a server printing to stdout): the session reports it
                item = exc
            try:
                await sink.send(item)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                return


async def _write(source: MemoryObjectReceiveStream[SessionMessage], pipe: Any, lost: Callable[[], None]) -> None:
    """Session messages to the server's stdin; a closed pipe ends the session instead of losing requests silently."""
    async with source:
        async for message in source:
            if pipe.is_closing():
                lost()
                return
            data = message.message.model_dump_json(by_alias=True, exclude_unset=True)
            pipe.write(data.encode() + b"\n")


async def stop(child: Child) -> None:
    """Wait for the server to exit after its stdin closed; then SIGTERM, then SIGKILL, its process group."""
    await asyncio.shield(asyncio.ensure_future(_stop(child)))  # runs to its end even if our caller is cancelled


async def _stop(child: Child) -> None:
    for sig in (None, signal.SIGTERM, signal.SIGKILL):
        if sig is not None:
            child.signal_group(sig)
        deadline = time.monotonic() + GRACE_S
        while child.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
        if child.returncode is not None:
            LIVE.discard(child)
            return
    log.warning("MCP stdio server (pid %d) is still alive after SIGKILL", child.pid)


def kill_all() -> None:
    """At interpreter exit, for servers that closing their sessions did not stop: SIGKILL their process groups."""
    for child in list(LIVE):
        child.signal_group(signal.SIGKILL)
        LIVE.discard(child)


def forget_all() -> None:
    """In a forked child: those servers are the parent's to stop."""
    LIVE.clear()
