"""Generated requests: from the OpenAPI schema (schemathesis) and arbitrary JSON (hypothesis).

None may produce a 5xx: kube-scheduler treats any non-200 as a failed call, and a 500 hides the reason.
"""

from __future__ import annotations

import json

import schemathesis
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from ballast.extender.main import create_app
from ballast.model.policy import load_policy
from ballast.testing.parts import POLICY_FILE

APP = create_app(load_policy(POLICY_FILE))
schema = schemathesis.openapi.from_asgi("/openapi.json", APP)


@schema.parametrize()
@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
def test_schema_generated_requests_never_5xx(case) -> None:
    response = case.call_and_validate(checks=[not_a_server_error])
    assert response.status_code < 500


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)
KEYS = st.sampled_from(
    [
        "Pod",
        "Nodes",
        "NodeNames",
        "pod",
        "nodes",
        "items",
        "metadata",
        "name",
        "annotations",
        "spec",
        "containers",
        "resources",
        "requests",
        "cpu",
        "ownerReferences",
        "kind",
    ]
)
SHAPED = st.recursive(
    st.none() | st.integers() | st.text(max_size=6) | st.just("0.9,2026-11-22T07:00:00Z"),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(KEYS, children, max_size=4),
    max_leaves=25,
)


@given(body=st.one_of(JSON, SHAPED, st.dictionaries(KEYS, SHAPED, max_size=3)))
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
def test_arbitrary_json_gets_200_or_400(body) -> None:
    with TestClient(APP) as client:
        for verb in ("filter", "prioritize"):
            r = client.post(
                f"/{verb}", content=json.dumps(body), headers={"Content-Type": "application/json"}
            )
            assert r.status_code in (200, 400), (verb, body, r.status_code, r.text)
            if r.status_code == 400:
                assert r.json()["field"]
