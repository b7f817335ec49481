"""A real Prometheus server for the annotator's tests, fed by backfilling.

``PrometheusServer`` writes an OpenMetrics file, turns it into TSDB blocks with
``promtool tsdb create-blocks-from openmetrics`` in a fresh data directory, then starts ``prometheus``
on a free loopback port with no scrape targets (and optionally a rules file) and waits for ``/-/ready``.
Samples end a few seconds before start-up, so an instant query at "now" finds them (the lookback is
5m) and the backfilled blocks are older than anything the head will ever hold.

``require_prometheus()`` skips a test when the binaries are missing, and fails it when ``CI=true``:
CI installs the Debian package ``prometheus`` (with ``promtool``) and must not pass by skipping.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from ballast.testing.parts import missing_part

__all__ = ["BackfillSeries", "CountingProxy", "PrometheusServer", "require_prometheus", "require_promtool"]

INSTALL_HINT = "install the Debian package 'prometheus' (it brings promtool)"


def _need(*names: str) -> dict[str, str]:
    found = {n: shutil.which(n) for n in names}
    missing = [n for n, path in found.items() if path is None]
    if missing:
        missing_part(f"{' and '.join(missing)} not found on PATH: {INSTALL_HINT}")
    return {n: str(p) for n, p in found.items()}


def require_prometheus() -> tuple[str, str]:
    """Paths of ``prometheus`` and ``promtool``; skip (fail under CI=true) when either is missing."""
    paths = _need("prometheus", "promtool")
    return paths["prometheus"], paths["promtool"]


def require_promtool() -> str:
    return _need("promtool")["promtool"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _om_value(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


@dataclass(frozen=True)
class BackfillSeries:
    """A gauge series with one constant value, sampled every ``step`` seconds over the backfill window."""

    name: str
    labels: Mapping[str, str]
    value: float

    def selector(self) -> str:
        inner = ",".join(f'{k}="{v}"' for k, v in sorted(self.labels.items()))
        return f"{self.name}{{{inner}}}"


def openmetrics(series: Iterable[BackfillSeries], start: float, end: float, step: float = 15.0) -> str:
    """OpenMetrics text: one family per metric name, samples in time order, ``# EOF`` at the end."""
    families: dict[str, list[BackfillSeries]] = {}
    for s in series:
        families.setdefault(s.name, []).append(s)
    stamps = []
    t = start
    while t <= end:
        stamps.append(t)
        t += step
    lines: list[str] = []
    for name, members in families.items():
        lines.append(f"# TYPE {name} gauge")
        for s in members:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            value = _om_value(s.value)
            lines.extend(f"{name}{{{labels}}} {value} {ts:.3f}" for ts in stamps)
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


class PrometheusServer:
    """One Prometheus process with backfilled data; ``start()``/``stop()`` or a context manager."""

    def __init__(
        self,
        workdir: Path,
        series: Iterable[BackfillSeries] = (),
        *,
        rules: Path | None = None,
        history: float = 600.0,
        step: float = 15.0,
    ) -> None:
        self.prometheus, self.promtool = require_prometheus()
        self.workdir = Path(workdir)
        self.data = self.workdir / "data"
        self.series = list(series)
        self.rules = rules
        self.history = history
        self.step = step
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.workdir / "prometheus.log"
        self.backfill_seconds = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def backfill(self) -> None:
        self.data.mkdir(parents=True, exist_ok=True)
        if not self.series:
            return
        end = time.time() - 5
        text = openmetrics(self.series, end - self.history, end, self.step)
        source = self.workdir / "backfill.om"
        source.write_text(text)
        t0 = time.perf_counter()
        out = subprocess.run(
            [self.promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(self.data)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        self.backfill_seconds = time.perf_counter() - t0
        if out.returncode != 0:
            raise RuntimeError(f"promtool backfill failed: {out.stderr[-2000:]}")
        source.unlink()

    def start(self, timeout: float = 30.0) -> PrometheusServer:
        self.backfill()
        config = self.workdir / "prometheus.yml"
        text = "global:\n  scrape_interval: 15s\n  evaluation_interval: 15s\n"
        if self.rules is not None:
            text += f"rule_files:\n  - {self.rules}\n"
        config.write_text(text)
        self.port = free_port()
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [
                self.prometheus,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.data}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=15d",
                "--log.level=warn",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prometheus exited ({self.proc.returncode}): {self.log()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(self.url + "/-/ready", timeout=1).status_code == 200:
                    return self
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"prometheus did not get ready in {timeout}s: {self.log()[-2000:]}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)

    def __enter__(self) -> PrometheusServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def query(self, expr: str) -> list[tuple[dict[str, str], str]]:
        """An instant query as the test's own oracle: (labels, value text) per series."""
        resp = httpx.get(self.url + "/api/v1/query", params={"query": expr}, timeout=10)
        resp.raise_for_status()
        body = resp.json()
        assert body["status"] == "success", body
        return [(r["metric"], r["value"][1]) for r in body["data"]["result"]]

    def scalar(self, expr: str) -> float:
        """The single value of ``expr`` (which must select exactly one series)."""
        result = self.query(expr)
        assert len(result) == 1, f"{expr} selected {len(result)} series: {result}"
        return float(result[0][1])


@contextlib.contextmanager
def running(workdir: Path, series: Iterable[BackfillSeries], **kw: object) -> Iterator[PrometheusServer]:
    server = PrometheusServer(workdir, series, **kw)  # type: ignore[arg-type]
    server.start()
    try:
        yield server
    finally:
        server.stop()


class CountingProxy:
    """A reverse proxy in front of Prometheus under a path prefix (``/prom``), counting what passes.

    It stands for the ingress or auth proxy a real deployment puts in front of Prometheus: the annotator
    must work with a base URL that has a path, and tests count its queries here.
    """

    def __init__(self, upstream: str, prefix: str = "/prom") -> None:
        self.upstream = upstream.rstrip("/")
        self.prefix = prefix
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._lock = threading.Lock()
        outer = self
        client = httpx.Client(timeout=30)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                if not self.path.startswith(outer.prefix + "/"):
                    self._reply(404, b"outside the prefix\n", "text/plain")
                    return
                rest = self.path[len(outer.prefix) :]
                with outer._lock:
                    outer.requests.append((rest.split("?", 1)[0], dict(self.headers)))
                upstream = client.get(outer.upstream + rest)
                self._reply(upstream.status_code, upstream.content, upstream.headers.get("content-type", ""))

            def _reply(self, code: int, body: bytes, content_type: str) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._client = client
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05})

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{self.prefix}"

    def queries(self) -> int:
        with self._lock:
            return sum(1 for path, _ in self.requests if path == "/api/v1/query")

    def __enter__(self) -> CountingProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)
        self._client.close()
