"""What the rebalancer benchmarks share: an API client that answers every call and counts it, and the
bundled policy with a ``spec.rebalance`` (``bench.rebalancer_bench``, ``bench.rebalancer_memory``)."""

from __future__ import annotations

from typing import Any

import yaml

from ballast.contract.annotations import CPU_USAGE_AVG_5M
from ballast.testing.parts import POLICY_FILE


class CountingKube:
    """Answers every call with success and counts it by kind."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    def _count(self, kind: str) -> None:
        self.calls[kind] = self.calls.get(kind, 0) + 1

    def create(self, path: str, body: Any) -> dict[str, Any]:
        self._count("eviction" if path.endswith("/eviction") else "event")
        return {}

    def get(self, path: str, query: Any = None) -> dict[str, Any]:
        self._count("get")
        return {}

    def list_all(self, path: str, params: Any = None, page: int = 500) -> tuple[list, str]:
        self._count("list")
        return [], ""


def policy_text(per_cycle: int) -> str:
    doc = yaml.safe_load(POLICY_FILE.read_text())
    doc["spec"]["rebalance"] = {
        "thresholds": [{"name": CPU_USAGE_AVG_5M, "high": 0.80, "low": 0.45}],
        "consecutiveAbnormal": 1,
        "limits": {"perCycle": per_cycle, "perNamespace": per_cycle, "perNode": 2},
    }
    return yaml.safe_dump(doc)
