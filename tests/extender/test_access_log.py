"""The access log by default: failed and slow requests and a summary a minute, not a line per request;
``--access-log`` brings the line per request back."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from ballast.extender.api.access import LINES_PER_SECOND, AccessLog, AccessLogged
from ballast.extender.main import create_app
from ballast.model.policy import load_policy
from ballast.testing.parts import POLICY_FILE


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "ballast.access"]


def app(**kw: Any) -> Any:
    return create_app(load_policy(POLICY_FILE), policy_poll_seconds=0, **kw)


def test_a_fast_success_logs_nothing_a_failure_does(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ballast.access")
    with TestClient(app(slow_request=30.0)) as c:
        assert c.get("/healthz").status_code == 200
        assert c.post("/filter", content=b"{").status_code == 400
    logged = lines(caplog)
    assert len(logged) == 2, logged  # the 400, and the summary at shutdown
    level, text = logged[0]
    assert level == logging.WARNING and text.startswith("POST /filter 400 ") and text.endswith("ms (failed)")
    assert logged[1][0] == logging.INFO and "1 failed" in logged[1][1]


def test_the_flag_brings_back_a_line_per_request(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ballast.access")
    with TestClient(app(access_log=True, slow_request=30.0)) as c:
        c.get("/healthz")
        c.post("/filter", content=b"{")
    logged = [text for _, text in lines(caplog)]
    assert logged[0].startswith("GET /healthz 200 ") and logged[0].endswith("ms")
    assert logged[1].startswith("POST /filter 400 ")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def serve(access: AccessLog, clock: Clock, path: str, status: int = 200, takes: float = 0.001) -> None:
    """One request through the access log's middleware, ``takes`` seconds long by the clock."""

    async def endpoint(scope: Any, receive: Any, send: Any) -> None:
        clock.now += takes
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    async def send(message: Any) -> None:
        pass

    asyncio.run(AccessLogged(endpoint, access)({"type": "http", "method": "POST", "path": path}, None, send))


def test_a_slow_request_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="ballast.access")
    clock = Clock()
    access = AccessLog(slow=0.1, clock=clock)
    serve(access, clock, "/bind", takes=0.099)
    assert lines(caplog) == []
    serve(access, clock, "/bind", takes=0.150)
    assert lines(caplog) == [(logging.WARNING, "POST /bind 200 150.0ms (slower than 100ms)")]


def test_the_summary_counts_every_request_and_only_when_there_were_some(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="ballast.access")
    clock = Clock()
    access = AccessLog(slow=0.1, clock=clock)
    access.summarise()
    assert lines(caplog) == []  # a quiet minute says nothing
    for ms in (1, 2, 3, 40):
        serve(access, clock, "/filter", takes=ms / 1000)
    serve(access, clock, "/prioritize", takes=0.002)
    serve(access, clock, "/bind", takes=0.2)
    serve(access, clock, "/nodes/x", status=404)
    caplog.clear()
    clock.now += 10
    access.summarise()
    (level, text), *_ = lines(caplog)
    assert level == logging.INFO
    assert text.startswith("requests in the last 10s: filter 4 (p99 40.0ms), prioritize 1 (p99 2.0ms), ")
    assert "bind 1 (p99 200.0ms), other 1 (p99 1.0ms); 1 failed, 1 slower" in text
    caplog.clear()
    access.summarise()
    assert lines(caplog) == []


def test_failed_lines_are_capped_and_the_summary_says_how_many_were_not_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="ballast.access")
    clock = Clock()
    access = AccessLog(clock=clock)
    for _ in range(LINES_PER_SECOND + 5):
        serve(access, clock, "/filter", status=400, takes=0.0)
    assert len(lines(caplog)) == LINES_PER_SECOND
    access.summarise()
    assert f"{LINES_PER_SECOND + 5} failed" in lines(caplog)[-1][1]
    assert "(5 of them not logged" in lines(caplog)[-1][1]
    clock.now += 1
    serve(access, clock, "/filter", status=400, takes=0.0)
    assert len(lines(caplog)) == LINES_PER_SECOND + 2  # a new second, a new allowance


def test_the_summary_runs_every_period() -> None:
    clock = Clock()
    access = AccessLog(clock=clock)
    serve(access, clock, "/filter")

    async def run() -> None:
        task = asyncio.create_task(access.run_summaries(0.01))
        deadline = time.monotonic() + 5
        while access.window and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(run())
    assert not access.window  # summarised and reset by the task
