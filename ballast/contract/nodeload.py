"""The NodeLoad contract (``ballast.io/v1alpha1``, ``scheduler_config/crd-nodeload.yaml``): one
cluster-scoped object per node, named after it and owned by its Node, whose status the node's agent writes
(its measured usage and each pod's, means over ``window``) and the rebalancer reads.

Both sides take the object's coordinates, its status shape and its freshness rule from here, so the
writer and the reader cannot drift. Rendering is for the agent; :func:`parse_status` is for readers and is
total: any JSON value becomes a :class:`NodeLoadStatus` or ``None`` ("no information"), never an
exception, because a NodeLoad is written by a node and a node is not trusted to write well-formed data.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from ballast.contract.durations import format_duration, parse_duration
from ballast.contract.quantity import QuantityError, format_quantity, parse_quantity
from ballast.contract.times import format_rfc3339, parse_rfc3339

GROUP = "ballast.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "NodeLoad"
PLURAL = "nodeloads"
NODELOAD_PATH = f"/apis/{API_VERSION}/{PLURAL}"
"""The collection's REST path; ``f"{NODELOAD_PATH}/{node}"`` is one node's object, ``.../status`` its
status subresource (the only part the agent writes after creating it)."""

FRESH_REPORT_INTERVALS = 2
"""A NodeLoad counts while its ``updateTime`` is within this many report intervals of now."""

MAX_PODS = 1000
"""The CRD's ``maxItems``: far above any kubelet's ``maxPods``; a longer list is a broken writer."""

MAX_METRICS = 64
"""The CRD's ``maxProperties`` of ``node.metrics``: the agent measures a dozen at most."""
MAX_METRIC_NAME = 63
"""A metric name is an annotation key's name part: at most 63 characters."""

MAX_CPU_CORES = 100_000
MAX_MEMORY_BYTES = 2**60
"""Sane ceilings: a value above them is a broken writer, read as no information for that entry."""


POD_PRESSURE_RESOURCES = ("cpu", "memory", "io")
"""The keys of a pod's ``pressure``."""


@dataclass(frozen=True, slots=True)
class PodUsage:
    """One pod's mean usage over the window: CPU in cores, memory working set in bytes; with pressure
    measured, the share of the window some of its tasks stalled on each resource (cgroup v2) and the share
    its CPU limit held it."""

    namespace: str
    name: str
    uid: str
    cpu: float
    memory: int
    pressure: Mapping[str, float] = field(default_factory=dict)
    """``cpu``/``memory``/``io`` -> the pod cgroup's ``some`` share of the window (0..1)."""
    throttled: float | None = None
    """The share of the window the pod's CPU limit held it (0..1), ``None`` when not measured."""


@dataclass(frozen=True, slots=True)
class NodeLoadStatus:
    """A NodeLoad's status, parsed. ``update_time`` is Unix seconds, ``window`` seconds."""

    update_time: float
    window: float
    node_cpu: float
    node_memory: int
    pods: tuple[PodUsage, ...]
    node_metrics: Mapping[str, float] = field(default_factory=dict)
    """Every metric the agent measured (crane's, the percentiles the policy names): its ratio, as the
    Node's annotation of that name carries it."""

    def is_fresh(self, now: float, report_interval: float) -> bool:
        """Fresh while ``updateTime`` is within two report intervals of ``now`` (and not in the future
        by more than one, which would keep a broken clock's report fresh for ever)."""
        bound = FRESH_REPORT_INTERVALS * report_interval
        return now - bound < self.update_time <= now + report_interval

    def by_uid(self) -> dict[str, PodUsage]:
        return {p.uid: p for p in self.pods}


def format_cpu(cores: float) -> str:
    """Cores as a quantity in whole millicores (``"450m"``, ``"3200m"``, ``"2"``)."""
    return format_quantity(Fraction(max(0, round(cores * 1000)), 1000))


def format_memory(nbytes: int) -> str:
    """Bytes as a quantity, in the largest exact binary unit (``"300Mi"``) or plain bytes."""
    return format_quantity(max(0, int(nbytes)), "BinarySI")


def render_status(status: NodeLoadStatus) -> dict[str, Any]:
    """The ``status`` object the agent writes."""
    return {
        "updateTime": format_rfc3339(status.update_time),
        "window": format_duration(status.window),
        "node": {
            "cpu": format_cpu(status.node_cpu),
            "memory": format_memory(status.node_memory),
            "metrics": {name: round(ratio, 5) for name, ratio in sorted(status.node_metrics.items())},
        },
        "pods": [_render_pod(p) for p in status.pods],
    }


def _render_pod(p: PodUsage) -> dict[str, Any]:
    out: dict[str, Any] = {
        "namespace": p.namespace,
        "name": p.name,
        "uid": p.uid,
        "cpu": format_cpu(p.cpu),
        "memory": format_memory(p.memory),
    }
    if p.pressure:
        out["pressure"] = {k: round(v, 5) for k, v in sorted(p.pressure.items())}
    if p.throttled is not None:
        out["throttled"] = round(p.throttled, 5)
    return out


def new_object(node_name: str, node_uid: str | None) -> dict[str, Any]:
    """A NodeLoad with no status yet, owned by its Node (so it goes when the Node goes)."""
    meta: dict[str, Any] = {"name": node_name}
    if node_uid:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": meta}


def _time(raw: object) -> float | None:
    return parse_rfc3339(raw) if isinstance(raw, str) and len(raw) <= 64 else None


def _quantity(raw: object, ceiling: float) -> Fraction | None:
    if isinstance(raw, bool) or not isinstance(raw, str | int) or (isinstance(raw, str) and len(raw) > 64):
        return None
    if isinstance(raw, int) and abs(raw) > ceiling:
        return None
    if type(raw) is str:
        return _text_quantity(raw, ceiling)
    return _checked(raw, ceiling)


def _checked(raw: str | int, ceiling: float) -> Fraction | None:
    try:
        value = parse_quantity(raw)
    except (QuantityError, ValueError, OverflowError, ZeroDivisionError):
        return None
    return value if 0 <= value <= ceiling else None


_text_quantity = functools.lru_cache(maxsize=16384)(_checked)
"""``_checked`` remembered per text: exact parsing (fractions) was most of a NodeLoad's parse, about 40 us
per pod entry, and a relist of 100 000 pods repeats a few thousand distinct values (the agent writes
millicores and whole MiB)."""


def _pod(raw: object) -> PodUsage | None:
    if not isinstance(raw, dict):
        return None
    ns, name, uid = raw.get("namespace"), raw.get("name"), raw.get("uid")
    if not all(isinstance(v, str) and 0 < len(v) <= 253 for v in (ns, name, uid)):
        return None
    cpu = _quantity(raw.get("cpu"), MAX_CPU_CORES)
    memory = _quantity(raw.get("memory"), MAX_MEMORY_BYTES)
    if cpu is None or memory is None:
        return None
    raw_pressure = raw.get("pressure")
    pressure = (
        {k: float(v) for k, v in raw_pressure.items() if k in POD_PRESSURE_RESOURCES and _is_share(v)}
        if isinstance(raw_pressure, dict)
        else {}
    )
    throttled = raw.get("throttled")
    return PodUsage(
        ns,  # type: ignore[arg-type]
        name,  # type: ignore[arg-type]
        uid,  # type: ignore[arg-type]
        float(cpu),
        math.ceil(memory),
        pressure,
        float(throttled) if _is_share(throttled) else None,
    )


def _is_share(v: object) -> bool:
    """A number in [0, 1] (not a bool)."""
    return isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v <= 1


def parse_status(obj: object) -> NodeLoadStatus | None:
    """A NodeLoad object's status, or ``None`` when it has none that can be read.

    Total over any JSON value. A pod entry that cannot be read is dropped (that pod falls back to its
    estimate); a bad node total, time or window makes the whole status no information.
    """
    if not isinstance(obj, dict):
        return None
    status = obj.get("status")
    if not isinstance(status, dict):
        return None
    update_time = _time(status.get("updateTime"))
    window_raw = status.get("window")
    try:
        window = parse_duration(window_raw) if isinstance(window_raw, str) and len(window_raw) <= 32 else None
    except (ValueError, OverflowError):
        window = None
    node = status.get("node")
    if update_time is None or window is None or not math.isfinite(window) or window <= 0:
        return None
    if not isinstance(node, dict):
        return None
    cpu = _quantity(node.get("cpu"), MAX_CPU_CORES)
    memory = _quantity(node.get("memory"), MAX_MEMORY_BYTES)
    if cpu is None or memory is None:
        return None
    raw_pods = status.get("pods", [])
    if not isinstance(raw_pods, list) or len(raw_pods) > MAX_PODS:
        return None
    pods = tuple(p for p in map(_pod, raw_pods) if p is not None)
    return NodeLoadStatus(
        update_time, window, float(cpu), math.ceil(memory), pods, _metrics(node.get("metrics"))
    )


def _metrics(raw: object) -> dict[str, float]:
    """``node.metrics`` read: an entry that is not a short name and a ratio in [0, 1] is dropped."""
    if not isinstance(raw, dict) or len(raw) > MAX_METRICS:
        return {}
    return {
        name: float(value)
        for name, value in raw.items()
        if isinstance(name, str) and 0 < len(name) <= MAX_METRIC_NAME and _is_share(value)
    }
