"""When a pod was bound (``ballast.contract.pod.bound_at``): the one rule, on the one time parser."""

from __future__ import annotations

from typing import Any

import pytest

from ballast.contract.pod import bound_at
from ballast.contract.times import format_rfc3339

CREATED = 1_800_000_000.0
SCHEDULED = CREATED + 5


def pod(conditions: list[Any] | None = None, created: object = format_rfc3339(CREATED)) -> dict[str, Any]:
    meta = {"name": "p", "namespace": "default", "uid": "u1"}
    if created is not None:
        meta["creationTimestamp"] = created
    status = {"phase": "Running"} if conditions is None else {"phase": "Running", "conditions": conditions}
    return {"metadata": meta, "spec": {"nodeName": "n1"}, "status": status}


def scheduled(when: object, status: str = "True") -> dict[str, Any]:
    return {"type": "PodScheduled", "status": status, "lastTransitionTime": when}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (pod([scheduled(format_rfc3339(SCHEDULED))]), SCHEDULED),
        (pod([scheduled("2027-01-15T10:00:05+02:00")]), SCHEDULED),
        (pod([{"type": "Ready", "status": "True", "lastTransitionTime": "2030-01-01T00:00:00Z"}]), CREATED),
        (pod([scheduled(format_rfc3339(SCHEDULED + 60), status="False")]), CREATED),
        (pod([scheduled(format_rfc3339(SCHEDULED)), scheduled(format_rfc3339(SCHEDULED + 60))]), SCHEDULED),
        (pod(), CREATED),
        (pod([scheduled("2027-01-15T08:00:05")]), CREATED),
        (pod([scheduled("garbage")]), CREATED),
        (pod([scheduled(None)]), CREATED),
        (pod([scheduled(12345)]), CREATED),
        (pod([scheduled(format_rfc3339(SCHEDULED))], created=None), SCHEDULED),
        (pod(created=None), None),
        (pod(created="2027-01-15T08:00:00"), None),
        (pod(["junk", None]), CREATED),
        ({"metadata": "junk", "status": {"conditions": "junk"}}, None),
        ("not a pod", None),
    ],
    ids=[
        "condition",
        "condition-any-offset",
        "other-conditions-only",
        "not-scheduled",
        "two-conditions-first",
        "no-condition-creation",
        "no-offset-is-no-time",
        "unreadable-condition",
        "null-condition-time",
        "number-condition-time",
        "no-creation",
        "nothing",
        "creation-without-offset",
        "junk-conditions",
        "junk-pod",
        "not-a-mapping",
    ],
)
def test_bound_at(obj: Any, expected: float | None) -> None:
    assert bound_at(obj) == expected
