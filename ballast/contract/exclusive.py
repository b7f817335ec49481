"""Which pods hold exclusive CPUs, and which topology results are trusted: one rule for extender and agent.

The agent pins CPUs by this rule. It also pins pods whose result it does not trust (the default
scheduler's Guaranteed pods, pods created with ``nodeName``, unsealed or malformed results) on CPUs it
chooses, which no rule on the extender's side can predict; so the agent publishes what it holds per zone
in its NRT (``ballast.contract.topology_result.EXCLUSIVE_PODS_ATTRIBUTE``), and the extender counts that, plus
trusted results and its own bind-time assumptions for pods the NRT does not list yet. That is how the two
never disagree about what a zone has free (``tests/extender/test_numa_agreement.py``); this rule decides the
rest.
A pod pins CPUs only when it is Guaranteed, asks for at least
one whole CPU and its policy is ``exclusive`` or ``immovable``; its topology result is honoured only when
its scheduler is trusted, the result is well formed, names NUMA zones the node has and holds exactly the
pod's exclusive CPUs. Pure: callers parse the pod (``ballast.contract.pod``) and pass what it says.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["DEFAULT_SCHEDULERS", "CPUPolicy", "ExclusiveDecision", "decide_exclusive"]

DEFAULT_SCHEDULERS = ("ballast-scheduler",)
"""Whose topology results are trusted when no ``--scheduler-name`` is given (extender and agent alike)."""


class CPUPolicy(StrEnum):
    """``topology.crane.io/cpu-policy`` values."""

    NONE = "none"
    EXCLUSIVE = "exclusive"
    NUMA = "numa"
    IMMOVABLE = "immovable"


PINNING = (CPUPolicy.EXCLUSIVE, CPUPolicy.IMMOVABLE)


@dataclass(frozen=True)
class ExclusiveDecision:
    """How a pod holds CPUs, decided once from its spec and annotations (the agent pins by it, the
    extender counts zones by it)."""

    mode: CPUPolicy
    """Effective mode: ``none`` when nothing is pinned (not Guaranteed, no whole-CPU container)."""
    exclusive_cpus: int
    zones: tuple[tuple[int, int], ...] | None
    """Trusted, validated topology result ``((numa, cpus), ...)``, or ``None`` (whole machine)."""
    rejected: tuple[str, str] | None = None
    """``(reason, message)`` when a topology result was present but ignored; reasons:
    ``untrusted-scheduler``, ``malformed``, ``unknown-numa``, ``cpu-mismatch``, ``unsealed``."""
    note: str = ""

    @property
    def pins(self) -> bool:
        """Whether the pod holds CPUs exclusively (exclusive or immovable): entries in the agent's state."""
        return self.mode in PINNING

    @property
    def numa_ids(self) -> tuple[int, ...]:
        """The NUMA nodes of a trusted topology result; none without one."""
        return tuple(n for n, _ in self.zones) if self.zones else ()


def decide_exclusive(
    *,
    guaranteed: bool,
    qos: str,
    exclusive_cpus: int,
    requested: CPUPolicy,
    scheduler_name: str,
    allowed_schedulers: Collection[str],
    result: tuple[tuple[int, int], ...] | None,
    result_error: str | None,
    known_numa: Collection[int],
    sealed: bool | None = None,
) -> ExclusiveDecision:
    """How a pod holds CPUs and in which zones. ``requested`` is the pod's cpu-policy with the default
    already applied; ``result``/``result_error`` come from ``parse_topology_result``
    (``ballast.contract.topology_result``). ``sealed``: whether the result's seal verifies
    (``ballast.contract.seal``),
    ``None`` when no key is configured."""
    n = exclusive_cpus
    if not guaranteed:
        return ExclusiveDecision(CPUPolicy.NONE, 0, None, note=f"QoS class {qos}: shared pool")
    if n <= 0:
        return ExclusiveDecision(CPUPolicy.NONE, 0, None, note="no container with a whole-CPU request")
    if requested is CPUPolicy.NONE:
        return ExclusiveDecision(CPUPolicy.NONE, n, None, note="cpu-policy none")
    zones, rejected = _trusted_zones(n, scheduler_name, allowed_schedulers, result, result_error, known_numa)
    if zones is not None and sealed is False:
        why = "its seal (ballast.io/topology-result-seal) does not verify: Ballast's bind did not write it"
        zones, rejected = None, ("unsealed", f"topology result ignored: {why} for this pod on this node")
    return ExclusiveDecision(requested, n, zones, rejected)


def _trusted_zones(
    n: int,
    scheduler_name: str,
    allowed_schedulers: Collection[str],
    result: tuple[tuple[int, int], ...] | None,
    result_error: str | None,
    known_numa: Collection[int],
) -> tuple[tuple[tuple[int, int], ...] | None, tuple[str, str] | None]:
    if result is None and result_error is None:
        return None, None
    if scheduler_name not in allowed_schedulers:
        allowed = ", ".join(sorted(allowed_schedulers)) or "none"
        return None, (
            "untrusted-scheduler",
            f"topology result ignored: the pod's schedulerName {scheduler_name!r} is not one "
            f"whose results are trusted ({allowed})",
        )
    if result_error is not None:
        return None, ("malformed", f"topology result ignored: {result_error}")
    zones = result or ()
    unknown = [numa for numa, _ in zones if numa not in known_numa]
    if unknown:
        known = ", ".join(f"node{i}" for i in sorted(known_numa))
        names = ", ".join(f"node{i}" for i in unknown)
        return None, (
            "unknown-numa",
            f"topology result ignored: {names} not on this machine (it has {known})",
        )
    total = sum(k for _, k in zones)
    if total != n:
        return None, (
            "cpu-mismatch",
            f"topology result ignored: its zones hold {total} CPU(s), the pod needs {n}",
        )
    return zones, None
