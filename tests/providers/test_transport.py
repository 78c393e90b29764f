"""The SDKs' transport: idle keep-alive connections are probed with poll(2), and a connection the server closed is
still never reused (agents/providers/transport.py)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from agents.providers import transport
from agents.providers.anthropic_provider import AnthropicProvider
from agents.providers.openai_compat import OpenAIProvider
from tests.integration._support import ROOT, clean_env
from tests.providers import stub_llm as llm
from tests.providers.stub_llm import ANTHROPIC_PATH, OPENAI_PATH


def test_the_probe_sees_data_and_a_close_but_not_an_idle_socket():
    ours, theirs = socket.socketpair()
    try:
        assert transport.readable(ours) is False  # idle: reusable
        theirs.sendall(b"x")
        assert transport.readable(ours) is True  # unexpected data: not reusable
        ours.recv(1)
        theirs.close()
        assert transport.readable(ours) is True  # the other side closed: expired
    finally:
        ours.close()
    assert transport.readable(None) is True


@pytest.fixture
def openai_env(settings, stub):
    settings.OPENAI_API_KEY = llm.fake_key()
    settings.OPENAI_BASE_URL = stub.url + "/v1"
    return stub


def test_idle_connections_are_probed_by_our_backend_and_reused(openai_env, monkeypatch):
    probes: list[bool] = []
    real = transport.readable
    monkeypatch.setattr(transport, "readable", lambda sock: probes.append(real(sock)) or probes[-1])
    openai_env.add("POST", OPENAI_PATH, json=llm.openai_text("ok"), repeat=True)
    provider = OpenAIProvider()

    for _ in range(3):
        assert provider.complete(llm.request()).text == "ok"

    # the idle connection was probed by us (httpcore probes idle connections when a request comes and when one
    # ends) and found good each time
    assert len(probes) >= 2 and not any(probes)
    assert len({r.peer for r in openai_env.requests}) == 1  # ... and reused


def test_a_connection_the_server_closed_quietly_is_not_reused(settings):
    """The server answers with keep-alive, then closes the idle connection without a word (as servers do after
    their keep-alive timeout): the probe sees the close, and the next call opens a new connection instead of
    failing on the dead one."""
    import json
    import threading
    import time

    listener = socket.create_server(("127.0.0.1", 0))
    peers: list[tuple] = []
    body = json.dumps(llm.openai_text("ok")).encode()

    def serve() -> None:
        for _ in range(2):
            conn, peer = listener.accept()
            peers.append(peer)
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, rest = data.partition(b"\r\n\r\n")
            length = int(next(h.split(b":")[1] for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")))
            while len(rest) < length:
                rest += conn.recv(65536)
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
            )
            time.sleep(0.2)
            conn.close()  # quietly: no Connection: close was announced

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    settings.OPENAI_API_KEY = llm.fake_key()
    settings.OPENAI_BASE_URL = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    settings.AGENT_LLM_MAX_RETRIES = 0  # a reused dead connection would fail the call outright
    provider = OpenAIProvider()
    try:
        assert provider.complete(llm.request()).text == "ok"
        time.sleep(0.5)  # the server has closed the idle connection meanwhile
        assert provider.complete(llm.request()).text == "ok"
    finally:
        server.join(5)
        listener.close()
    assert len(peers) == 2 and peers[0] != peers[1]  # a new connection for the second call


@pytest.mark.parametrize(
    ("provider", "path", "reply", "keep"),
    [
        (OpenAIProvider, OPENAI_PATH, llm.openai_text, 2),
        (OpenAIProvider, OPENAI_PATH, llm.openai_text, 6),
        (AnthropicProvider, ANTHROPIC_PATH, llm.anthropic_text, 3),
    ],
)
def test_idle_connections_kept_are_bounded_by_the_setting(settings, stub, provider, path, reply, keep):
    """AGENT_HTTP_MAX_KEEPALIVE, for both SDKs: after a burst of 8 concurrent calls, the client keeps `keep`
    connections for the next burst (reused) and closes the rest (the SDKs' default would keep all 8)."""
    settings.OPENAI_API_KEY = settings.ANTHROPIC_API_KEY = llm.fake_key()
    settings.OPENAI_BASE_URL, settings.ANTHROPIC_BASE_URL = stub.url + "/v1", stub.url
    settings.AGENT_HTTP_MAX_KEEPALIVE = keep
    stub.add("POST", path, json=reply("ok"), delay_s=0.3, repeat=True)
    model = provider()

    llm.burst(model, 8)
    llm.burst(model, 8)
    first, second = ({r.peer for r in stub.requests[i : i + 8]} for i in (0, 8))

    assert len(stub.requests) == 16 and len(first) == len(second) == 8
    assert len(first & second) == keep


GREEN = """
from gevent import monkey; monkey.patch_all()
import select, socket
from agents.providers import transport
assert select.poll is not transport._os_poll()  # gevent's poll is patched in; ours is the operating system's
a, b = socket.socketpair()
print(transport.readable(a), end=" ")
b.close()
print(transport.readable(a))
"""


def test_under_gevent_the_probe_is_the_operating_systems_poll():
    proc = subprocess.run(
        [sys.executable, "-c", GREEN],
        cwd=ROOT,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["False", "True"]


class Recording(transport.httpcore2.NetworkStream):
    """A network stream that records what reaches the socket, and answers reads from a script."""

    def __init__(self, replies: list[bytes] | None = None) -> None:
        self.events: list[tuple[str, bytes]] = []
        self.replies = list(replies or [])

    def write(self, buffer, timeout=None) -> None:
        self.events.append(("send", bytes(buffer)))

    def read(self, max_bytes, timeout=None) -> bytes:
        self.events.append(("recv", b""))
        return self.replies.pop(0) if self.replies else b""

    def close(self) -> None:
        self.events.append(("close", b""))


def test_a_requests_head_and_body_reach_the_socket_in_one_send_before_the_answer_is_read():
    inner = Recording([b"HTTP/1.1 200 OK\r\n"])
    stream = transport._Stream(inner)

    stream.write(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n", 5.0)
    stream.write(b"", 5.0)  # h11's end of message with a known length: nothing
    stream.write(b"{}", 5.0)
    assert inner.events == []  # held until the answer is wanted
    assert stream.read(65536, 5.0) == b"HTTP/1.1 200 OK\r\n"
    stream.read(65536, 5.0)

    assert inner.events == [
        ("send", b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"),
        ("recv", b""),
        ("recv", b""),
    ]


def test_a_large_body_is_sent_as_it_is_written_and_a_closed_stream_sends_nothing_held():
    inner = Recording()
    stream = transport._Stream(inner)
    head, chunk = b"POST / HTTP/1.1\r\n\r\n", b"x" * transport.COALESCE_MAX

    stream.write(head)
    stream.write(chunk)  # past the bound: sent now, with the head
    stream.write(b"tail")
    stream.close()  # what is still held is dropped with the connection

    assert inner.events == [("send", head + chunk), ("close", b"")]


def test_each_sdk_call_is_one_send_and_the_server_gets_it_whole(openai_env, monkeypatch):
    sends: list[int] = []
    real = transport._Stream._flush
    monkeypatch.setattr(transport._Stream, "_flush", lambda self: sends.append(self._held_size) or real(self))
    openai_env.add("POST", OPENAI_PATH, json=llm.openai_text("ok"), repeat=True)
    provider = OpenAIProvider()
    request = llm.request()

    for _ in range(3):
        assert provider.complete(request).text == "ok"

    assert len(sends) == 3  # one send per call: head and body together
    assert len(openai_env.requests) == 3
    assert all(r.json()["messages"] for r in openai_env.requests)  # each body arrived whole
