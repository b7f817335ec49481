"""Callers and bodies: the size cap (413), the body deadline (408) and how faults and disconnects are
counted, against the app and against a real uvicorn server (the protocol ``ballast extender`` ships) over a
real socket."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from ballast.extender.main import create_app
from ballast.model.policy import load_policy
from ballast.testing.parts import POLICY_FILE, wait_for
from tests.conftest import read_fixture
from tests.shipped_server import shipped_server

BODY = read_fixture("full-nodes/01-filter-burstable-checkout-api.json")


def _app(**kw):
    return create_app(load_policy(POLICY_FILE), **kw)


def _sample(app, verb: str, code: str) -> float:
    value = app.state.services.metrics.requests.labels(verb, code)._value.get()
    return float(value)


def test_declared_oversize_body_is_refused_before_reading() -> None:
    app = _app(max_body_bytes=1000)
    with TestClient(app) as c:
        r = c.post("/filter", content=b"x" * 1001, headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert r.json()["field"] == "(body)" and "1000" in r.json()["reason"]
    assert _sample(app, "filter", "413") == 1


def test_streamed_oversize_body_without_length_is_cut_off() -> None:
    app = _app(max_body_bytes=10_000)
    sent = []

    def chunks() -> Iterator[bytes]:
        for _ in range(1000):
            sent.append(1)
            yield b"[" * 1000

    with TestClient(app) as c:
        r = c.post("/prioritize", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413
    assert r.json()["field"] == "(body)"


def test_a_body_under_the_cap_is_answered() -> None:
    raw = json.dumps(BODY).encode()
    app = _app(max_body_bytes=len(raw))
    with TestClient(app) as c:
        assert c.post("/filter", content=raw, headers={"content-type": "application/json"}).status_code == 200
    assert _sample(app, "filter", "200") == 1


def test_an_internal_fault_is_counted_as_500() -> None:
    app = _app()

    def broken(args):
        raise RuntimeError("boom")

    app.state.services.extender.filter = broken
    with TestClient(app) as c:
        r = c.post("/filter", json=BODY)
    assert r.status_code == 200 and "boom" in r.json()["Error"]
    assert _sample(app, "filter", "500") == 1
    assert _sample(app, "filter", "200") == 0


def _partial_request(port: int, declared: int, sent: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    head = (
        "POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {declared}\r\n\r\n"
    )
    s.sendall(head.encode() + sent)
    return s


def test_slow_body_is_cut_off_by_a_real_server() -> None:
    app = _app(body_timeout=1.0)
    with shipped_server(app) as port:
        s = _partial_request(port, 100, b"{")
        start = time.monotonic()
        answer = b""
        s.settimeout(0.2)
        while time.monotonic() - start < 50:  # until the server answers and closes the connection
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                with contextlib.suppress(OSError):
                    s.send(b" ")  # trickle a byte now and then, as a slow-loris client does
                continue
            except ConnectionResetError:
                break
            if not chunk:
                break
            answer += chunk
        s.close()
        elapsed = time.monotonic() - start
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert elapsed < 50
    assert _sample(app, "filter", "408") == 1


def test_a_client_that_disconnects_is_one_info_line(caplog: pytest.LogCaptureFixture) -> None:
    app = _app(body_timeout=60.0)
    caplog.set_level("INFO")
    with shipped_server(app) as port:
        s = _partial_request(port, 1000, b'{"Pod": ')
        time.sleep(0.2)  # let the server start reading; the assertion below waits for the outcome
        s.close()
        wait_for(lambda: _sample(app, "filter", "disconnect") == 1, timeout=30, what="disconnect counted")
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    assert any("disconnected" in r.getMessage() and r.levelname == "INFO" for r in caplog.records)
