"""The ``topology.crane.io/*`` keys a pod (or node) carries, and the ONE parser and renderer of the topology
result: the extender's bind writes it with ``render_topology_result``, the agent pins CPUs by
``parse_topology_result``, and the extender counts a zone's CPUs by the same parse, so it never counts a
result the agent rejects.

- ``cpu-policy``: ``none``, ``exclusive``, ``numa``, ``immovable`` (``ballast.contract.exclusive.CPUPolicy``).
- ``topology-awareness``: a Go bool (``strconv.ParseBool``) on a pod (annotation) or a node (label).
- ``topology-result``: crane's ``[{"name":"node0","type":"Node","resources":{"capacity":{"cpu":"4"}}}]``,
  with ``memory`` beside ``cpu`` when the extender's policy is memory-aware.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from ballast.contract.quantity import QuantityError, format_quantity, parse_quantity

__all__ = [
    "AWARENESS_KEY",
    "CPU_POLICY_ANNOTATION",
    "TOPOLOGY_RESULT_ANNOTATION",
    "TopologyResult",
    "TopologyResultError",
    "parse_go_bool",
    "parse_topology_result",
    "render_topology_result",
]

CPU_POLICY_ANNOTATION = "topology.crane.io/cpu-policy"
TOPOLOGY_RESULT_ANNOTATION = "topology.crane.io/topology-result"
AWARENESS_KEY = "topology.crane.io/topology-awareness"
"""A pod annotation (the pod's own choice) and a node label (the node's default), both Go bools."""

_MAX_RESULT_BYTES = 64 * 1024
_ZONE_NAME = re.compile(r"node([0-9]{1,5})")
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_go_bool(value: str) -> bool | None:
    """Go's ``strconv.ParseBool``: ``True``/``False`` for the spellings it accepts, ``None`` otherwise."""
    if value in _GO_TRUE:
        return True
    if value in _GO_FALSE:
        return False
    return None


class TopologyResultError(ValueError):
    """A ``topology-result`` annotation that cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class TopologyResult:
    cpus: tuple[tuple[int, int], ...]
    """``((numa id, cpus), ...)`` sorted by NUMA id, zones with 0 CPUs left out."""
    memory: Mapping[int, int] = field(default_factory=dict)
    """Memory bytes per NUMA id of those zones, where the result states it (the extender's accounting)."""


def _whole(value: Any, zone: str, what: str, unit: str) -> int:
    try:
        number = parse_quantity(value)
    except QuantityError as e:
        raise TopologyResultError(f"zone {zone}: {e}") from None
    if number < 0 or number.denominator != 1:
        raise TopologyResultError(f"zone {zone}: {what} {value!r} is not a whole number of {unit}")
    return int(number)


def parse_topology_result(text: Any) -> TopologyResult:
    """Read a ``topology-result`` annotation; raises ``TopologyResultError`` saying what is wrong.

    Zone names must be ``node<N>`` (crane's ``BuildZoneName``), types ``Node``, CPU capacities whole
    non-negative numbers, memory (when given) a whole non-negative number of bytes; a zone may appear
    once. Zones with 0 CPUs are dropped.
    """
    if not isinstance(text, str):
        raise TopologyResultError("annotation value is not a string")
    if len(text) > _MAX_RESULT_BYTES:
        raise TopologyResultError(f"annotation is {len(text)} bytes long")
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as e:
        raise TopologyResultError(f"not JSON: {e}") from None
    if not isinstance(doc, list) or not doc:
        raise TopologyResultError("expected a non-empty JSON list of zones")
    cpus: dict[int, int] = {}
    memory: dict[int, int] = {}
    for i, zone in enumerate(doc):
        if not isinstance(zone, Mapping):
            raise TopologyResultError(f"zone {i}: expected an object")
        name = zone.get("name")
        match = _ZONE_NAME.fullmatch(name) if isinstance(name, str) else None
        if match is None:
            raise TopologyResultError(f"zone {i}: name {name!r} is not 'node<N>'")
        if zone.get("type", "Node") != "Node":
            raise TopologyResultError(f"zone {name}: type {zone.get('type')!r} is not 'Node'")
        numa = int(match.group(1))
        if numa in cpus:
            raise TopologyResultError(f"zone {name} is listed twice")
        resources = zone.get("resources")
        capacity = resources.get("capacity") if isinstance(resources, Mapping) else None
        cpu = capacity.get("cpu") if isinstance(capacity, Mapping) else None
        if cpu is None:
            raise TopologyResultError(f"zone {name}: no resources.capacity.cpu")
        cpus[numa] = _whole(cpu, name, "cpu", "CPUs")
        if "memory" in capacity:
            memory[numa] = _whole(capacity["memory"], name, "memory", "bytes")
    held = tuple(sorted((n, k) for n, k in cpus.items() if k))
    if not held:
        raise TopologyResultError("no zone has any CPU")
    return TopologyResult(held, {n: memory[n] for n, _ in held if n in memory})


def render_topology_result(zones: Iterable[tuple[str, int, int]]) -> str:
    """The annotation exactly as crane writes it from ``(zone name, cpus, memory bytes)``: ``[{"name":
    "node0","type":"Node","resources":{"capacity":{"cpu":"4"}}}]``, with memory as memory when it is part
    of the result (crane wrote the CPU value there). ``parse_topology_result`` reads back what it wrote."""
    out = []
    for name, cpus, mem in zones:
        capacity: dict[str, str] = {"cpu": str(cpus)}
        if mem:
            capacity["memory"] = format_quantity(mem, "BinarySI")
        out.append({"name": name, "type": "Node", "resources": {"capacity": capacity}})
    return orjson.dumps(out).decode()


EXCLUSIVE_PODS_ATTRIBUTE = "ballast.io/exclusive-pods"
"""NRT zone attribute the agent writes: the pods holding exclusive CPUs in that zone and how many,
``"<pod uid>=<cpus>,..."`` (sorted, ``""`` for none). The extender counts a zone's CPUs from it, so the two
agree on every pod the agent pinned, whatever its topology result said (or whether it had one)."""


def render_zone_pods(pods: dict[str, int]) -> str:
    """``{uid: cpus}`` as the zone attribute's text."""
    return ",".join(f"{uid}={cpus}" for uid, cpus in sorted(pods.items()) if cpus > 0)


def parse_zone_pods(text: object) -> dict[str, int] | None:
    """The zone attribute's ``{uid: cpus}``; ``None`` when it is not the agent's format."""
    if not isinstance(text, str):
        return None
    out: dict[str, int] = {}
    for part in filter(None, text.split(",")):
        uid, sep, cpus = part.partition("=")
        if not sep or not uid or not cpus.isdigit():
            return None
        out[uid] = out.get(uid, 0) + int(cpus)
    return out
