"""``CPUSet``: an immutable set of CPU ids that reads and writes the kernel's cpulist format.

The kubelet (``k8s.io/utils/cpuset``), the sysfs ``*_list`` files and cgroup ``cpuset.cpus`` all use the
same text form (``"0-3,8-11"``), so one type parses and prints it for the whole agent. The set sits in
hot loops of the CPU assignment, so it wraps a ``frozenset`` and caches its sorted order instead of
re-deriving it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["MAX_CPU_ID", "CPUSet", "CPUSetParseError"]

MAX_CPU_ID = 65535
"""Largest id ``parse`` accepts. Linux builds top out at 8192 CPUs; the bound keeps a corrupt file such as
``"0-4294967295"`` from making the agent build a set of four billion ints."""


class CPUSetParseError(ValueError):
    """A cpulist string that is not in the kernel/kubelet format; the message quotes it and says why."""


def _parse_id(text: str, part: str, whole: str) -> int:
    # int() alone would accept " 3", "+3", "3_0" and non-ASCII digits; the format allows none of them.
    if not text:
        raise CPUSetParseError(f"invalid cpuset {whole!r}: empty CPU id in {part!r}")
    if not (text.isascii() and text.isdigit()):
        if text.startswith("-") and text[1:].isascii() and text[1:].isdigit():
            raise CPUSetParseError(f"invalid cpuset {whole!r}: negative CPU id in {part!r}")
        raise CPUSetParseError(f"invalid cpuset {whole!r}: {text!r} in {part!r} is not a CPU id")
    cpu = int(text)
    if cpu > MAX_CPU_ID:
        raise CPUSetParseError(f"invalid cpuset {whole!r}: CPU id {cpu} in {part!r} is above {MAX_CPU_ID}")
    return cpu


class CPUSet:
    """Immutable, hashable set of non-negative CPU ids; iteration and ``str()`` are in ascending order."""

    __slots__ = ("_cpus", "_sorted")

    _cpus: frozenset[int]
    _sorted: tuple[int, ...] | None

    def __init__(self, cpus: Iterable[int] = ()) -> None:
        ids = frozenset(cpus)
        for cpu in ids:
            if not isinstance(cpu, int) or isinstance(cpu, bool) or cpu < 0:
                raise ValueError(f"CPU ids must be non-negative integers, got {cpu!r}")
        object.__setattr__(self, "_cpus", ids)
        object.__setattr__(self, "_sorted", None)

    @classmethod
    def _trusted(cls, cpus: frozenset[int]) -> CPUSet:
        """Wrap a frozenset known to hold valid ids: set algebra and hot paths skip the checks."""
        s = object.__new__(cls)
        object.__setattr__(s, "_cpus", cpus)
        object.__setattr__(s, "_sorted", None)
        return s

    @classmethod
    def of(cls, *cpus: int) -> CPUSet:
        """``CPUSet.of(0, 4)``: the literal form tests and callers read best."""
        return cls(cpus)

    @classmethod
    def parse(cls, text: str) -> CPUSet:
        """Parse ``"0-3,8-11"``; ``""`` is the empty set and a trailing newline (sysfs, cgroupfs) is ignored.

        Ranges ``a-b`` need ``a <= b`` (``"1-1"`` is fine). Anything else raises ``CPUSetParseError``.
        """
        if not isinstance(text, str):
            raise CPUSetParseError(f"invalid cpuset {text!r}: expected a string like '0-3,8-11'")
        s = text.rstrip("\n")
        if not s:
            return _EMPTY
        ids: set[int] = set()
        for part in s.split(","):
            lo_text, dash, hi_text = part.partition("-")
            if not dash:
                ids.add(_parse_id(part, part, text))
                continue
            if not lo_text and hi_text and hi_text.isascii() and hi_text.isdigit():
                raise CPUSetParseError(f"invalid cpuset {text!r}: negative CPU id in {part!r}")
            lo = _parse_id(lo_text, part, text)
            hi = _parse_id(hi_text, part, text)
            if lo > hi:
                raise CPUSetParseError(f"invalid cpuset {text!r}: invalid range {part!r} ({lo} > {hi})")
            ids.update(range(lo, hi + 1))
        return cls._trusted(frozenset(ids))

    # --- immutability -------------------------------------------------------------------------------

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("CPUSet is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("CPUSet is immutable")

    def __reduce__(self) -> tuple[Any, ...]:
        return (CPUSet, (tuple(self.sorted()),))

    # --- queries ------------------------------------------------------------------------------------

    def sorted(self) -> list[int]:
        """The ids in ascending order, as a new list."""
        return list(self._ordered())

    def _ordered(self) -> tuple[int, ...]:
        order = self._sorted
        if order is None:
            order = tuple(sorted(self._cpus))
            object.__setattr__(self, "_sorted", order)
        return order

    def as_frozenset(self) -> frozenset[int]:
        """The ids as a frozenset (no copy: both are immutable)."""
        return self._cpus

    def issubset(self, other: CPUSet) -> bool:
        return self._cpus <= other._cpus

    def issuperset(self, other: CPUSet) -> bool:
        return self._cpus >= other._cpus

    def isdisjoint(self, other: CPUSet) -> bool:
        return self._cpus.isdisjoint(other._cpus)

    def __len__(self) -> int:
        return len(self._cpus)

    def __bool__(self) -> bool:
        return bool(self._cpus)

    def __iter__(self) -> Iterator[int]:
        return iter(self._ordered())

    def __contains__(self, cpu: object) -> bool:
        return cpu in self._cpus

    # --- algebra ------------------------------------------------------------------------------------

    def __or__(self, other: CPUSet) -> CPUSet:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return CPUSet._trusted(self._cpus | other._cpus)

    def __and__(self, other: CPUSet) -> CPUSet:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return CPUSet._trusted(self._cpus & other._cpus)

    def __sub__(self, other: CPUSet) -> CPUSet:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return CPUSet._trusted(self._cpus - other._cpus)

    def union(self, *others: CPUSet) -> CPUSet:
        return CPUSet._trusted(self._cpus.union(*(o._cpus for o in others)))

    def intersection(self, *others: CPUSet) -> CPUSet:
        return CPUSet._trusted(self._cpus.intersection(*(o._cpus for o in others)))

    def difference(self, *others: CPUSet) -> CPUSet:
        return CPUSet._trusted(self._cpus.difference(*(o._cpus for o in others)))

    # --- identity and text --------------------------------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CPUSet):
            return NotImplemented
        return self._cpus == other._cpus

    def __hash__(self) -> int:
        return hash(self._cpus)

    def __str__(self) -> str:
        ids = self._ordered()
        if not ids:
            return ""
        parts: list[str] = []
        start = prev = ids[0]
        for cpu in ids[1:]:
            if cpu == prev + 1:
                prev = cpu
                continue
            parts.append(f"{start}-{prev}" if prev > start else str(start))
            start = prev = cpu
        parts.append(f"{start}-{prev}" if prev > start else str(start))
        return ",".join(parts)

    def __repr__(self) -> str:
        return f"CPUSet.parse({str(self)!r})"


_EMPTY = CPUSet._trusted(frozenset())
