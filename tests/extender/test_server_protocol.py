"""The extender's HTTP server as shipped (uvicorn's httptools protocol with Ballast's bounds) against
callers that misbehave at the HTTP layer: pipelined requests, half-closed connections, heads trickled or
oversized, malformed requests and bodies declared over the cap, each over a real socket."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import time
from collections.abc import Iterator

import pytest
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from ballast.extender.cli import server_config
from ballast.extender.connections import MAX_HEAD_BYTES
from ballast.extender.main import create_app
from ballast.model.policy import load_policy
from ballast.testing.parts import POLICY_FILE, wait_for
from tests.conftest import read_fixture
from tests.shipped_server import shipped_server

BODY = json.dumps(read_fixture("full-nodes/01-filter-burstable-checkout-api.json")).encode()


@pytest.fixture
def app():
    return create_app(
        load_policy(POLICY_FILE), policy_poll_seconds=0, body_timeout=60.0, max_body_bytes=1 << 20
    )


@pytest.fixture
def port(app) -> Iterator[int]:
    with shipped_server(app, first_byte_timeout=1.0) as p:
        yield p


def _post(path: str, body: bytes = BODY, *extra: str) -> bytes:
    head = [
        f"POST {path} HTTP/1.1",
        "Host: x",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    ]
    return ("\r\n".join([*head, *extra]) + "\r\n\r\n").encode() + body


def _get(path: str, *extra: str) -> bytes:
    return ("\r\n".join([f"GET {path} HTTP/1.1", "Host: x", *extra]) + "\r\n\r\n").encode()


def _connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def _until_closed(s: socket.socket, within: float = 10.0) -> bytes:
    """Everything the server sends until it closes the connection (failing if it does not in time)."""
    s.settimeout(within)
    got = b""
    with contextlib.suppress(ConnectionResetError):
        while chunk := s.recv(65536):
            got += chunk
    return got


def _answer(s: socket.socket) -> bytes:
    """One answer on a kept-alive connection: its head and the body its Content-Length says."""
    s.settimeout(10)
    got = b""
    while b"\r\n\r\n" not in got:
        got += s.recv(65536)
    head, _, body = got.partition(b"\r\n\r\n")
    length = int(re.search(rb"content-length: (\d+)", head, re.IGNORECASE).group(1))  # type: ignore[union-attr]
    while len(body) < length:
        body += s.recv(65536)
    return head + b"\r\n\r\n" + body


def _statuses(answers: bytes) -> list[int]:
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", answers)]


def _sample(app, verb: str, code: str) -> float:
    return float(app.state.services.metrics.requests.labels(verb, code)._value.get())


def test_the_shipped_server_parses_with_llhttp(app) -> None:
    assert issubclass(server_config(app, "127.0.0.1", 0).http, HttpToolsProtocol)


def test_pipelined_requests_are_answered_in_order(port: int) -> None:
    with _connect(port) as s:
        s.sendall(_post("/filter") + _get("/healthz") + _post("/prioritize", BODY, "Connection: close"))
        answers = _until_closed(s)
    assert _statuses(answers) == [200, 200, 200], answers[:300]
    filtered, healthy, scored = answers.index(b"FailedNodes"), answers.index(b"ok"), answers.index(b'"Score"')
    assert filtered < healthy < scored


async def _slow_app(scope, receive, send) -> None:
    """An ASGI app that answers each request after 0.3 s (any app's work; uvicorn's own protocol closed a
    half-closed connection at once and lost the answer)."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await asyncio.sleep(0.3)
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"4")]})
    await send({"type": "http.response.body", "body": b"done"})


def test_a_client_that_half_closes_after_its_requests_reads_the_answers() -> None:
    with shipped_server(_slow_app) as port, _connect(port) as s:
        s.sendall(_post("/filter") + _post("/prioritize"))
        s.shutdown(socket.SHUT_WR)
        answers = _until_closed(s)  # and the server closes once both are answered
    assert _statuses(answers) == [200, 200], answers[:300]
    assert answers.count(b"done") == 2


def test_a_client_that_half_closes_inside_a_body_is_a_disconnect(app, port: int) -> None:
    with _connect(port) as s:
        s.sendall(_post("/filter", BODY)[: -len(BODY) // 2])
        time.sleep(0.2)  # the request is being read
        s.shutdown(socket.SHUT_WR)
        start = time.monotonic()
        assert _until_closed(s) == b""
        assert time.monotonic() - start < 5  # at once, not at the body deadline (60 s)
    wait_for(lambda: _sample(app, "filter", "disconnect") == 1, timeout=10, what="the disconnect counted")


def test_a_head_trickled_a_byte_at_a_time_is_closed_at_the_first_byte_deadline(port: int) -> None:
    with _connect(port) as s:
        start = time.monotonic()
        s.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\n")
        closed = False
        while time.monotonic() - start < 8:
            try:
                s.sendall(
                    b"X"
                )  # a byte every 0.1 s: each one used to restart nothing and hold the connection
            except OSError:
                closed = True
                break
            s.settimeout(0.1)
            try:
                if s.recv(1) == b"":
                    closed = True
                    break
            except TimeoutError:
                pass
            except OSError:
                closed = True
                break
        elapsed = time.monotonic() - start
    assert closed and 0.9 <= elapsed < 3, elapsed


def test_the_keep_alive_deadline_bounds_the_next_head_too(port: int) -> None:
    with _connect(port) as s:
        s.sendall(_get("/healthz"))
        assert _answer(s).startswith(b"HTTP/1.1 200")
        s.sendall(b"GET /healthz HTTP/1.1\r\n")  # and never the rest of the head
        start = time.monotonic()
        assert _until_closed(s, within=15) == b""
        assert time.monotonic() - start < 8  # uvicorn's 5 s keep-alive timeout, counted from the answer


def test_heads_over_the_cap_are_a_400_whole_or_never_ending(port: int) -> None:
    with _connect(port) as s:
        s.sendall(_get("/healthz", "X-Big: " + "a" * (MAX_HEAD_BYTES - 1000)))
        assert _answer(s).startswith(b"HTTP/1.1 200")  # under the cap: answered as before
    with _connect(port) as s:
        s.sendall(_get("/healthz", "X-Big: " + "a" * (MAX_HEAD_BYTES + 1)))
        answer = _until_closed(s)
    assert _statuses(answer) == [400], answer[:200]
    with _connect(port) as s:  # one header that never ends, sent in pieces: refused, not held in memory
        s.sendall(b"GET /healthz HTTP/1.1\r\nX-Big: ")
        with contextlib.suppress(OSError):
            for _ in range(MAX_HEAD_BYTES // 1024 + 2):
                s.sendall(b"a" * 1024)
                time.sleep(0.005)
        answer = _until_closed(s)
    assert _statuses(answer) == [400], answer[:200]


@pytest.mark.parametrize(
    "raw",
    [
        b"GARBAGE\r\n\r\n",
        b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
        b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Header: y\r\n\r\n",
        b"POST /filter HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
def test_malformed_requests_are_a_400_and_the_server_goes_on(port: int, raw: bytes) -> None:
    with _connect(port) as s:
        s.sendall(raw)
        answer = _until_closed(s)
    assert _statuses(answer) == [400], answer[:200]
    with _connect(port) as s:
        s.sendall(_get("/healthz", "Connection: close"))
        assert _statuses(_until_closed(s)) == [200]


def test_a_body_declared_over_the_cap_is_a_413_before_it_is_sent(port: int) -> None:
    with _connect(port) as s:
        s.sendall(b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n{")
        answer = _answer(s)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"--max-body-bytes" in answer


def test_version_says_what_serves_it(port: int) -> None:
    try:
        import uvloop  # noqa: F401

        picked = "uvloop"
    except ImportError:
        picked = "asyncio"
    with _connect(port) as s:
        s.sendall(_get("/version", "Connection: close"))
        answer = _until_closed(s)
    server = json.loads(answer.partition(b"\r\n\r\n")[2])["server"]
    assert server == {"http": "httptools", "loop": picked}
