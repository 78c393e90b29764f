"""The gevent worker whose responses leave in one send (reactsite/serving/gunicorn_worker.py): the socket it hands
gunicorn, then the real server (gunicorn.conf.py selects it): whole responses, bodiless ones, several on one
connection."""

from __future__ import annotations

import socket

import pytest

from reactsite.serving.gunicorn_worker import CoalescingSocket

SIZED_HEAD = b"HTTP/1.1 200 OK\r\nServer: gunicorn\r\nContent-Length: 2\r\n\r\n"
CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


class Recorder:
    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.closed = False

    def sendall(self, data: bytes, *args) -> None:
        self.sent.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def fileno(self) -> int:
        return 7


def test_a_sized_head_leaves_with_the_body_in_one_send():
    sock = Recorder()
    wrapped = CoalescingSocket(sock)
    wrapped.sendall(SIZED_HEAD)
    assert sock.sent == []
    wrapped.sendall(b"ok")
    wrapped.flush()
    assert sock.sent == [SIZED_HEAD + b"ok"]


def test_a_streamed_head_leaves_at_once():
    """An event stream's client must see its headers before the first event (which may come much later)."""
    sock = Recorder()
    CoalescingSocket(sock).sendall(CHUNKED_HEAD)
    assert sock.sent == [CHUNKED_HEAD]


def test_a_head_with_no_body_after_it_leaves_when_the_request_is_done():
    sock = Recorder()
    wrapped = CoalescingSocket(sock)
    wrapped.sendall(SIZED_HEAD.replace(b"2", b"0"))
    assert sock.sent == []
    wrapped.flush()
    wrapped.flush()
    assert sock.sent == [SIZED_HEAD.replace(b"2", b"0")]


def test_anything_else_asked_of_the_socket_sends_the_held_head_first():
    sock = Recorder()
    wrapped = CoalescingSocket(sock)
    wrapped.sendall(SIZED_HEAD)
    assert wrapped.fileno() == 7  # sendfile(2) writes to the descriptor directly: the head must be out already
    assert sock.sent == [SIZED_HEAD]
    wrapped.sendall(b"ok")
    assert sock.sent == [SIZED_HEAD, b"ok"]


def test_a_body_that_is_not_a_head_passes_through():
    sock = Recorder()
    wrapped = CoalescingSocket(sock)
    wrapped.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n")  # no blank line: not a whole head
    assert len(sock.sent) == 1


def test_only_the_first_write_of_a_response_can_be_held():
    """A later chunk that happens to look like a sized head (a body quoting HTTP) is sent at once, not delayed."""
    sock = Recorder()
    wrapped = CoalescingSocket(sock)
    wrapped.sendall(CHUNKED_HEAD)
    wrapped.sendall(SIZED_HEAD)
    assert sock.sent == [CHUNKED_HEAD, SIZED_HEAD]


def _exchange(url: str, requests_: list[bytes], expect: int) -> list[bytes]:
    """Send the requests on one connection; read until `expect` responses (by their status lines) have arrived."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        for request in requests_:
            conn.sendall(request)
        data = b""
        while data.count(b"HTTP/1.1 ") < expect or not data.endswith(b"}"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    return [b"HTTP/1.1 " + part for part in data.split(b"HTTP/1.1 ")[1:]]


@pytest.mark.django_db(transaction=True)
def test_responses_arrive_whole_and_keep_alive_goes_on(server):
    get = b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    responses = _exchange(server.url, [get, get], expect=2)
    assert len(responses) == 2
    for response in responses:
        head, _, body = response.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:"))[15:])
        assert len(body) == length and body.startswith(b"{")


@pytest.mark.django_db(transaction=True)
def test_a_head_request_gets_its_head_at_once(server):
    """A HEAD answer has a Content-Length and no body: its head is held, then sent as the request ends (no hang)."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(b"HEAD /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        data = b""
        while not data.endswith(b"\r\n\r\n"):
            chunk = conn.recv(65536)
            assert chunk, "connection closed before the head"
            data += chunk
    assert data.startswith(b"HTTP/1.1 200 ") and b"content-length:" in data.lower()
