"""One bind time: the hot value (annotator and agent), the extender's estimates and the rebalancer date a
pod's placement by the same rule (``ballast.contract.pod.bound_at``), so one pod is never "just placed" to
one program and long settled to another.

Each case below is one way the three readers disagreed while each had its own parser: the extender had no
creation-time fallback (a pod created on its node was dated when the watch saw it), the extender and the
rebalancer read a time without an offset as the machine's local time and took the last ``PodScheduled``
condition, and the hot value read a time with spaces around it.
"""

from __future__ import annotations

from typing import Any

import pytest

from ballast.contract.pod import bound_at
from ballast.contract.times import format_rfc3339
from ballast.extender.cache import pod_record
from ballast.model.hot_value import binding_from_pod
from ballast.model.policy import Estimation
from ballast.rebalancer.pods import pod_facts

CREATED = 1_800_000_000.0
SCHEDULED = CREATED + 5


def pod(conditions: list[dict[str, Any]] | None, created: str = format_rfc3339(CREATED)) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "default", "uid": "u1", "creationTimestamp": created},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
        "status": {"phase": "Running", "conditions": conditions or []},
    }


def scheduled(when: str) -> dict[str, Any]:
    return {"type": "PodScheduled", "status": "True", "lastTransitionTime": when}


def readings(obj: dict[str, Any]) -> dict[str, float | None]:
    """What each program takes for the pod's bind time (``None``: it does not know)."""
    binding = binding_from_pod(obj)
    record = pod_record(obj)
    facts = pod_facts(obj, Estimation())
    return {
        "hot value": binding.when if binding is not None else None,
        "extender": record.scheduled_at if record is not None else None,
        "rebalancer": facts.placed or None,
    }


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (pod([scheduled(format_rfc3339(SCHEDULED))]), SCHEDULED),
        (pod(None), CREATED),
        (pod([scheduled("2027-01-15T08:00:05")]), CREATED),
        (pod([scheduled("2027-01-15T08:00:05")], created="2027-01-15T08:00:00"), None),
        (pod([scheduled(format_rfc3339(SCHEDULED)), scheduled(format_rfc3339(SCHEDULED + 60))]), SCHEDULED),
        (pod([scheduled("garbage")]), CREATED),
        (pod([scheduled(f" {format_rfc3339(SCHEDULED)} ")]), CREATED),
    ],
    ids=[
        "scheduled",
        "created-on-its-node",
        "no-offset-is-no-time",
        "no-time-at-all",
        "first-condition",
        "unreadable-condition",
        "padded-time",
    ],
)
def test_every_program_dates_a_binding_alike(obj: dict[str, Any], expected: float | None) -> None:
    assert bound_at(obj) == expected
    assert readings(obj) == {"hot value": expected, "extender": expected, "rebalancer": expected}
