"""Shared benchmark plumbing: start a server in its own process, time sequential requests."""

from __future__ import annotations

import contextlib
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(argv: list[str], port: int, env: dict[str, str] | None = None) -> Iterator[str]:
    """Run a server command until its /docs or /healthz answers; stop it afterwards."""
    with serve_process(argv, port, env) as (url, _):
        yield url


@contextlib.contextmanager
def serve_process(
    argv: list[str], port: int, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen]]:
    """``serve``, also giving the process (the cluster bench reads its CPU time)."""
    # stderr goes to a file, never an unread pipe: a server logging at info fills a pipe's 64 KB and then
    # blocks in its log handler, which stalled a long cluster bench.
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed in the finally below, after the server)
    proc = subprocess.Popen(argv, env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"server exited: {log.read().decode()[-2000:]}")
            try:
                httpx.get(url + "/docs", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise RuntimeError("server did not start")
        yield url, proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def echo_cmd(port: int) -> list[str]:
    """The echo floor as a user would run it: ``uvicorn app`` with uvicorn's defaults in this environment
    (its HTTP implementation and event loop are whatever uvicorn picks from what is installed)."""
    return [
        sys.executable,
        "-m",
        "uvicorn",
        "bench.echo_extender:app",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--no-access-log",
        "--log-level",
        "warning",
    ]


def granian_cmd(target: str, port: int, factory: bool = False) -> list[str]:
    """``target`` served by granian (Rust HTTP core, one worker process, one runtime thread)."""
    return [
        sys.executable,
        "-m",
        "granian",
        "--interface",
        "asgi",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--runtime-threads",
        "1",
        "--no-ws",
        "--log-level",
        "warning",
        *(["--factory"] if factory else []),
        target,
    ]


def ballast_cmd(port: int, policy: str, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "ballast",
        "extender",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--policy",
        policy,
        "--log-level",
        "warning",
        *extra,
    ]


@dataclass
class Timing:
    p50: float
    p90: float
    p99: float
    rps: float

    def row(self) -> str:
        return f"{self.p50 * 1000:.1f} / {self.p90 * 1000:.1f} / {self.p99 * 1000:.1f}"


def measure(client: httpx.Client, url: str, body: bytes, count: int, warmup: int = 3) -> Timing:
    headers = {"Content-Type": "application/json"}
    for _ in range(warmup):
        client.post(url, content=body, headers=headers).raise_for_status()
    samples = []
    start = time.perf_counter()
    for _ in range(count):
        t = time.perf_counter()
        r = client.post(url, content=body, headers=headers)
        samples.append(time.perf_counter() - t)
        r.raise_for_status()
    total = time.perf_counter() - start
    samples.sort()
    q = statistics.quantiles(samples, n=100, method="inclusive") if len(samples) > 1 else samples * 99
    return Timing(q[49], q[89], q[98], count / total)


def measure_pair(
    client: httpx.Client, urls: tuple[str, str], body: bytes, count: int, warmup: int = 3
) -> tuple[Timing, Timing]:
    """``measure`` for two servers with their requests alternating, so a load swing on a shared machine
    hits both alike (measured one after the other, a swing lands on one of them and moves the ratio)."""
    headers = {"Content-Type": "application/json"}
    for url in urls:
        for _ in range(warmup):
            client.post(url, content=body, headers=headers).raise_for_status()
    samples: tuple[list[float], list[float]] = ([], [])
    for _ in range(count):
        for url, out in zip(urls, samples, strict=True):
            t = time.perf_counter()
            r = client.post(url, content=body, headers=headers)
            out.append(time.perf_counter() - t)
            r.raise_for_status()
    return _timing(samples[0]), _timing(samples[1])


def _timing(samples: list[float]) -> Timing:
    """Quantiles of ``samples``; the rate is one over their mean (requests back to back)."""
    samples = sorted(samples)
    q = statistics.quantiles(samples, n=100, method="inclusive") if len(samples) > 1 else samples * 99
    return Timing(q[49], q[89], q[98], len(samples) / sum(samples))
