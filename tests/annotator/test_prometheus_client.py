"""The Prometheus API client against httpx.MockTransport: prefixes, auth, parameters, retries, errors."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import math
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from ballast.annotator.prometheus import PrometheusClient, PrometheusConfig, PrometheusError

Handler = Callable[[httpx.Request], httpx.Response]


def vector(*items: tuple[dict, str], warnings: list[str] | None = None) -> dict:
    body: dict = {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": m, "value": [1.0, v]} for m, v in items]},
    }
    if warnings:
        body["warnings"] = warnings
    return body


def run(config: PrometheusConfig, handler: Handler, call: str = "query", *args: str):
    async def go():
        async with PrometheusClient(config, transport=httpx.MockTransport(handler)) as client:
            return await getattr(client, call)(*args)

    return asyncio.run(go())


def cfg(url: str = "http://prom.example:9090", **kw) -> PrometheusConfig:
    kw.setdefault("backoff", 0.001)
    return PrometheusConfig(url=url, **kw)


def test_query_path_prefix_params_and_headers() -> None:
    seen: list[httpx.Request] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req)
        return httpx.Response(200, json=vector(({"instance": "a"}, "42.5"), ({"instance": "b"}, "NaN")))

    config = cfg(
        "https://thanos.example/prom/",
        params={"dedup": "true", "partial_response": "false"},
        headers={"X-Scope-OrgID": "team-a"},
    )
    series = run(config, handler, "query", "cpu_usage_avg_5m")
    (req,) = seen
    assert req.url.path == "/prom/api/v1/query"
    assert dict(req.url.params) == {
        "dedup": "true",
        "partial_response": "false",
        "query": "cpu_usage_avg_5m",
    }
    assert req.headers["X-Scope-OrgID"] == "team-a"
    assert [s.labels for s in series] == [{"instance": "a"}, {"instance": "b"}]
    assert series[0].value == 42.5 and math.isnan(series[1].value)


def test_bearer_token_file_is_read_per_request(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    auth: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        auth.append(req.headers["Authorization"])
        return httpx.Response(200, json=vector())

    async def go():
        config = cfg(bearer_token_file=str(token))
        async with PrometheusClient(config, transport=httpx.MockTransport(handler)) as client:
            await client.query("up")
            token.write_text("rotated")
            await client.query("up")

    asyncio.run(go())
    assert auth == ["Bearer first", "Bearer rotated"]


def test_basic_auth_from_password_file(tmp_path: Path) -> None:
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    seen: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        seen.append(req.headers["Authorization"])
        return httpx.Response(200, json=vector())

    run(cfg(username="ballast", password_file=str(password)), handler, "query", "up")
    assert seen == ["Basic " + base64.b64encode(b"ballast:s3cret").decode()]


def test_retries_5xx_and_timeouts_then_succeeds() -> None:
    answers: list[object] = [
        httpx.Response(503, text="busy"),
        httpx.ReadTimeout("slow"),
        httpx.Response(200, json=vector(({"instance": "a"}, "1"))),
    ]
    calls = []

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append(req)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer  # type: ignore[return-value]

    series = run(cfg(retries=2), handler, "query", "up")
    assert len(calls) == 3 and series[0].value == 1


def test_gives_up_after_retries_naming_the_query() -> None:
    calls = []

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append(req)
        return httpx.Response(500, json={"status": "error", "errorType": "internal", "error": "boom"})

    with pytest.raises(PrometheusError) as err:
        run(cfg(retries=1), handler, "query", "cpu_usage_avg_5m")
    assert len(calls) == 2
    assert err.value.query == "cpu_usage_avg_5m" and err.value.status == 500
    assert "cpu_usage_avg_5m" in str(err.value) and "boom" in str(err.value)


def test_bad_query_is_not_retried() -> None:
    calls = []

    def handler(req: httpx.Request) -> httpx.Response:
        calls.append(req)
        return httpx.Response(
            400, json={"status": "error", "errorType": "bad_data", "error": "parse error at char 4"}
        )

    with pytest.raises(PrometheusError, match="bad_data: parse error"):
        run(cfg(retries=3), handler, "query", "cpu{")
    assert len(calls) == 1


def test_non_api_answer_is_an_error() -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>login</html>")

    with pytest.raises(PrometheusError, match="not a Prometheus API answer"):
        run(cfg(), handler, "query", "up")


def test_warnings_keep_the_data(caplog: pytest.LogCaptureFixture) -> None:
    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=vector(({"instance": "a"}, "3"), warnings=["partial response"]))

    series = run(cfg(), handler, "query", "up")
    assert [s.value for s in series] == [3]
    assert "partial response" in caplog.text


def test_scalar_and_matrix_answers() -> None:
    def scalar(req: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, json={"status": "success", "data": {"resultType": "scalar", "result": [1, "7"]}}
        )

    assert [s.value for s in run(cfg(), scalar, "query", "7")] == [7]

    def matrix(req: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"status": "success", "data": {"resultType": "matrix", "result": []}})

    with pytest.raises(PrometheusError, match="not an instant vector"):
        run(cfg(), matrix, "query", "up[5m]")


def test_a_malformed_item_costs_only_itself(caplog: pytest.LogCaptureFixture) -> None:
    """One item that is not a sample (a string, no value, labels that are not strings) is skipped and
    counted; the well-formed samples of the same answer are kept."""
    good = {"metric": {"instance": "10.0.0.1:9100"}, "value": [1, "42"]}
    items = [good, "oops", None, 7, {"metric": {"instance": 5}, "value": [1, "1"]}, {"metric": {}}, good]

    def handler(req: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, json={"status": "success", "data": {"resultType": "vector", "result": items}}
        )

    with caplog.at_level(logging.WARNING):
        answer = run(cfg(), handler, "query", "up")
    assert [s.value for s in answer] == [42, 42]
    assert answer.malformed == 5
    assert caplog.text.count("skipping a malformed sample") == 1


def ready_handler(ready: int, buildinfo: int) -> tuple[Handler, list[str]]:
    paths: list[str] = []

    def handler(req: httpx.Request) -> httpx.Response:
        paths.append(req.url.path)
        if req.url.path.endswith("/-/ready"):
            return httpx.Response(ready, text="Prometheus Server is Ready.")
        if req.url.path.endswith("/api/v1/status/buildinfo"):
            return httpx.Response(buildinfo, json={"status": "success", "data": {"version": "2.42.0"}})
        return httpx.Response(404)

    return handler, paths


def test_check_ready_uses_ready_endpoint_and_never_promql() -> None:
    handler, paths = ready_handler(200, 200)
    assert run(cfg("http://p/x"), handler, "check_ready") == "/-/ready"
    assert paths == ["/x/-/ready"]


def test_check_ready_falls_back_to_buildinfo_behind_a_prefix() -> None:
    handler, paths = ready_handler(404, 200)
    assert "2.42.0" in run(cfg("http://mimir/prometheus"), handler, "check_ready")
    assert paths == ["/prometheus/-/ready", "/prometheus/api/v1/status/buildinfo"]


@pytest.mark.parametrize(("ready", "message"), [(503, "not ready"), (401, "refused the credentials")])
def test_check_ready_failures(ready: int, message: str) -> None:
    handler, _ = ready_handler(ready, 200)
    with pytest.raises(PrometheusError, match=message):
        run(cfg(retries=0), handler, "check_ready")


def test_check_ready_connection_refused() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there

    async def go():
        async with PrometheusClient(cfg(f"http://127.0.0.1:{port}", retries=1)) as client:
            await client.check_ready()

    with pytest.raises(PrometheusError, match="cannot connect"):
        asyncio.run(go())


def test_validate_reports_every_problem(tmp_path: Path) -> None:
    problems = PrometheusConfig(
        url="prometheus:9090",
        bearer_token_file=str(tmp_path / "missing"),
        password_file=str(tmp_path / "missing-too"),
        cert_file=str(tmp_path / "cert"),
    ).validate()
    text = json.dumps(problems)
    assert "expected http(s)://" in text
    assert "--prometheus-bearer-token-file" in text and "--prometheus-password-file" in text
    assert "needs --prometheus-username" in text
    assert "go together" in text
    assert PrometheusConfig(url="http://prometheus:9090/prefix").validate() == []
