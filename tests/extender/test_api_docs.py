"""The OpenAPI document and the error answers people meet on the docs page and with curl."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from ballast.extender.main import create_app
from ballast.model.policy import load_policy
from ballast.testing.parts import POLICY_FILE

LATER = 6 * 3600.0


def _app(offset: float = 0.0, **kw):
    return create_app(
        load_policy(POLICY_FILE), policy_poll_seconds=0, clock=lambda: time.time() + offset, **kw
    )


@pytest.mark.parametrize("verb", ["filter", "prioritize", "explain"])
def test_examples_are_fresh_hours_after_start(verb: str) -> None:
    """Examples dated at import were stale (every node failing) ~20 minutes after start."""
    app = _app(LATER)
    with TestClient(app) as c:
        spec = c.get("/openapi.json").json()
        ex = spec["paths"][f"/{verb}"]["post"]["requestBody"]["content"]["application/json"]["examples"]
        r = c.post(f"/{verb}", json=ex["whole nodes"]["value"])
        assert r.status_code == 200, r.text
        body = r.json()
        if verb == "filter":
            assert [n["metadata"]["name"] for n in body["Nodes"]["items"]] == ["node-a"], body
        elif verb == "prioritize":
            scores = {h["Host"]: h["Score"] for h in body}
            assert scores["node-a"] > scores["node-b"], body
        else:
            assert "node-a" in str(body) and "stale" not in str(body).lower(), body


def test_spec_declares_real_models_and_no_impossible_answers() -> None:
    spec = TestClient(_app()).get("/openapi.json").json()
    paths = spec["paths"]
    for path, model in [
        ("/filter", "ExtenderFilterResult"),
        ("/prioritize", "HostPriorityList"),
        ("/preempt", "ExtenderPreemptionResult"),
        ("/bind", "ExtenderBindingResult"),
    ]:
        schema = paths[path]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
        assert schema == {"$ref": f"#/components/schemas/{model}"}
    assert list(paths["/metrics"]["get"]["responses"]["200"]["content"]) == ["text/plain"]
    for ops in paths.values():
        for op in ops.values():
            assert "422" not in op["responses"]
    not_found = paths["/nodes/{name}"]["get"]["responses"]["404"]["content"]["application/json"]["schema"]
    assert not_found == {"$ref": "#/components/schemas/ErrorBody"}
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    assert "/redoc" not in TestClient(_app()).get("/docs").text


def _shape(body: dict) -> None:
    assert set(body) <= {"error", "field", "reason"} and isinstance(body["error"], str), body


def test_every_error_has_one_shape() -> None:
    app = _app()

    @app.api.get("/boom", include_in_schema=False)  # FastAPI, the part for everything but the verbs
    async def boom():
        raise RuntimeError("kaboom")

    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get("/nope")
        assert r.status_code == 404 and r.json()["field"] == "path"
        _shape(r.json())
        r = c.post("/filter/", json={})
        assert r.status_code == 404 and "did you mean /filter" in r.json()["reason"]
        _shape(r.json())
        r = c.get("/filter")
        assert r.status_code == 405 and r.json()["field"] == "method" and r.headers["allow"] == "POST"
        _shape(r.json())
        r = c.post("/filter", content=b"{")
        assert r.status_code == 400
        _shape(r.json())
        r = c.get("/nodes/ghost")
        assert r.status_code == 404 and r.json()["field"] == "name"
        _shape(r.json())
        r = c.get("/redoc")
        assert r.status_code == 404
        r = c.get("/boom")
        assert r.status_code == 500 and "kaboom" in r.json()["reason"]
        _shape(r.json())
