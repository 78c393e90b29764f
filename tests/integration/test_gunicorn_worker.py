"""The gevent worker gunicorn.conf.py selects (reactsite/serving/gunicorn_worker.py), served for real: whole
responses, bodiless ones, several on one connection."""

from __future__ import annotations

import socket

import pytest


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
    """A HEAD answer has a Content-Length and no body: its head arrives as the request ends (no hang)."""
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(b"HEAD /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        data = b""
        while not data.endswith(b"\r\n\r\n"):
            chunk = conn.recv(65536)
            assert chunk, "connection closed before the head"
            data += chunk
    assert data.startswith(b"HTTP/1.1 200 ") and b"content-length:" in data.lower()
