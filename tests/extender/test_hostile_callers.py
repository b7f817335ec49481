"""Hostile or broken callers cannot exhaust the extender: silent connections, too many connections,
bodies in flight across requests, huge node lists, floods of unknown names.

The connection tests run ``ballast extender`` as its own process (uvicorn as shipped, with the flags
under test); the others run the app in-process.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from ballast.extender.main import create_app
from ballast.kube.client import Kube, load_api_client
from ballast.model.policy import load_policy
from ballast.testing.controlplane import free_port
from ballast.testing.parts import POLICY_FILE, wait_for
from tests.conftest import CAPTURE_TIME, read_fixture


class Served:
    def __init__(self, proc: subprocess.Popen, port: int, log: Path) -> None:
        self.proc, self.port, self.log = proc, port, log

    def ok(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False


@pytest.fixture
def serve(tmp_path: Path) -> Iterator:
    started: list[Served] = []

    def start(*flags: str, nofile: int | None = None) -> Served:
        port = free_port()
        log = tmp_path / f"extender-{port}.log"
        argv = [sys.executable, "-m", "ballast", "extender", "--host", "127.0.0.1", "--port", str(port),
                "--policy", str(POLICY_FILE), "--policy-poll", "0", *flags]  # fmt: skip

        def limit() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
        with log.open("wb") as out:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env, preexec_fn=limit)
        served = Served(proc, port, log)
        started.append(served)
        wait_for(served.ok, timeout=60, what="the extender answering /healthz")
        return served

    yield start
    for s in started:
        s.proc.terminate()
        s.proc.wait(10)


def _silent(port: int, count: int) -> list[socket.socket]:
    out = []
    for _ in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        out.append(s)
    return out


def _closed_by_server(s: socket.socket) -> bool:
    s.settimeout(0.05)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True


def test_silent_connections_are_closed_and_the_count_is_capped(serve) -> None:
    ext = serve("--max-connections", "20", "--first-byte-timeout", "1")
    socks = _silent(ext.port, 40)
    try:
        # past the cap: closed at once; the rest: closed once silent for a second
        wait_for(lambda: sum(map(_closed_by_server, socks)) >= 20, timeout=1.0, what="over-cap ones closed")
        wait_for(lambda: all(map(_closed_by_server, socks)), timeout=5.0, what="silent ones closed")
        assert ext.ok()
    finally:
        for s in socks:
            s.close()


def test_accept_errors_at_the_descriptor_limit_are_logged_a_few_times_not_per_attempt(serve) -> None:
    ext = serve("--first-byte-timeout", "30", nofile=64)
    socks = []
    try:
        for _ in range(150):  # far past the server's 64 descriptors: its accept() fails with EMFILE
            with_timeout = socket.socket()
            with_timeout.setblocking(False)
            with_timeout.connect_ex(("127.0.0.1", ext.port))
            socks.append(with_timeout)
        time.sleep(4)
    finally:
        for s in socks:
            s.close()
    text = ext.log.read_text(errors="replace")
    lines = [line for line in text.splitlines() if "accept" in line.lower()]
    assert 1 <= len(lines) <= 5, (len(lines), lines[:3])
    assert len(text) < 64 * 1024


def _send_headers(port: int, length: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(
        b"POST /filter HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {length}\r\n\r\n".encode()
    )
    return s


def test_bytes_in_flight_are_bounded_across_requests(serve) -> None:
    mib = 1024 * 1024
    ext = serve("--max-body-bytes", str(8 * mib), "--max-body-bytes-in-flight", str(16 * mib))
    held = []
    try:
        for _ in range(2):  # two bodies of 7 MiB, 6 MiB sent each and then stalled: 12 MiB in flight
            s = _send_headers(ext.port, 7 * mib)
            s.sendall(b" " * (6 * mib))
            held.append(s)
        time.sleep(1)
        third = _send_headers(ext.port, 7 * mib)
        held.append(third)
        with contextlib.suppress(OSError):  # the server may answer and close while we still send
            third.sendall(b" " * (6 * mib))
        third.settimeout(10)
        answer = b""
        while True:  # the answer says Connection: close; read it to the end (or to the reset of what
            try:  # we were still sending)
                chunk = third.recv(65536)
            except ConnectionResetError:
                break
            if not chunk:
                break
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
        assert b"--max-body-bytes-in-flight" in answer or b"(body)" in answer
    finally:
        for s in held:
            s.close()
    assert ext.ok()


@pytest.fixture
def names_mode(fake_kube, kubeconfig: Path) -> Iterator[TestClient]:
    kube = Kube(load_api_client(str(kubeconfig)), timeout=2.0)
    app = create_app(load_policy(POLICY_FILE), kube=kube, clock=lambda: CAPTURE_TIME, policy_poll_seconds=0)
    with TestClient(app) as client:
        assert app.state.services.cache.wait_synced(10)
        yield client


def test_a_request_with_too_many_nodes_is_a_400_naming_the_field(names_mode: TestClient) -> None:
    pod = read_fixture("full-nodes/01-filter-burstable-checkout-api.json")["Pod"]
    r = names_mode.post("/filter", json={"Pod": pod, "NodeNames": [f"n{i}" for i in range(50_001)]})
    assert r.status_code == 400 and r.json()["field"] == "NodeNames" and "50000" in r.json()["reason"]
    r = names_mode.post("/filter", json={"Pod": pod, "Nodes": {"items": [{}] * 50_001}})
    assert r.status_code == 400 and r.json()["field"] == "Nodes.items"


def test_unknown_names_are_counted_and_logged_once_not_per_name(names_mode: TestClient, caplog) -> None:
    pod = read_fixture("full-nodes/01-filter-burstable-checkout-api.json")["Pod"]
    with caplog.at_level(logging.INFO, "ballast"):
        r = names_mode.post("/filter", json={"Pod": pod, "NodeNames": [f"ghost-{i}" for i in range(20_000)]})
    assert r.status_code == 200 and len(r.json()["NodeNames"]) == 20_000
    about = [rec for rec in caplog.records if "not in the cache" in rec.getMessage()]
    assert len(about) == 1, len(about)
    assert "1 node name" in about[0].getMessage() or "ghost-0" in about[0].getMessage()
