"""gunicorn's own error answers are JSON like every other error of the API (issue 39, item 7): a NUL in a header
(400), a request line over 4 KB (414), headers over 8 KB (431). Raw requests to a real gunicorn."""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

import pytest

from reactsite.serving.gunicorn_worker import json_error


def raw(url: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(request)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split(" ")[1]), headers, body


@pytest.mark.parametrize(
    "request_bytes, status, words",
    [
        (b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 400, "Bad Request"),
        (b"GET /api/v1/" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "URI Too Long"),
        (b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n" + b"X-Big: " + b"b" * 9000 + b"\r\n\r\n", 431, "Too Large"),
        (b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: v\r\n" % i for i in range(120)) + b"\r\n",
         431, "Too Large"),
    ],
    ids=["nul-in-header", "long-request-line", "big-header", "many-headers"],
)  # fmt: skip
def test_gunicorn_errors_are_json(server, request_bytes, status, words):
    code, headers, body = raw(server.url, request_bytes)
    assert code == status
    assert headers["content-type"] == "application/json"
    assert int(headers["content-length"]) == len(body)
    detail = json.loads(body)["detail"]
    assert words in detail


def test_the_server_still_serves_after_them(server):
    raw(server.url, b"GET /api/v1/" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    request = b"GET /api/v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    code, headers, body = raw(server.url, request)
    assert code == 200 and json.loads(body)["status"] == "ok"


def test_an_error_page_becomes_the_same_status_in_json():
    page = (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Type: text/html\r\n"
        b"Content-Length: 9\r\n\r\n<html><body><h1><p>Request Header Fields Too Large</p></h1>\n"
        b"  Error parsing headers: &#x27;limit request headers fields&#x27;\n</body></html>"
    )
    head, _, body = json_error(page).partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0] == b"HTTP/1.1 431 Request Header Fields Too Large"
    assert b"Content-Type: application/json" in head and b"Content-Length: %d" % len(body) in head
    assert json.loads(body) == {
        "detail": "Request Header Fields Too Large: Error parsing headers: 'limit request headers fields'"
    }
